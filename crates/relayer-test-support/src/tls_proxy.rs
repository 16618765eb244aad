//! A TLS terminator on loopback in front of a plaintext broker: clients speak TLS to it
//! with a test certificate ([`TestCertificates`]), it forwards plaintext to the broker. A
//! broker transport's TLS path is then tested against the real broker without
//! reconfiguring the shared one.
//!
//! Two ways of starting TLS, as the protocols do:
//! - [`TlsStart::Immediate`]: the handshake is the connection's first bytes (AMQP's
//!   `amqps`, NATS's `handshake_first` / a client's `tls_first`);
//! - [`TlsStart::AfterNatsInfo`]: the NATS protocol's own upgrade — the server's `INFO`
//!   line goes out in plaintext, saying `"tls_required":true`, then the client starts
//!   TLS. The terminator reads `INFO` from the broker, rewrites that flag, sends it, and
//!   then terminates TLS as above.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::certificates::TestCertificates;

/// When the client starts TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsStart {
    /// At once: the handshake is the connection's first bytes.
    Immediate,
    /// After the broker's plaintext NATS `INFO` line, rewritten to require TLS.
    AfterNatsInfo,
}

/// Terminates TLS on `127.0.0.1:<port>` and forwards plaintext to an upstream address
/// until dropped.
#[derive(Debug)]
pub struct TlsTerminator {
    address: SocketAddr,
    acceptor: JoinHandle<()>,
}

impl TlsTerminator {
    /// Starts terminating TLS with `certificates`' server certificate on a fresh loopback
    /// port, forwarding to `upstream`.
    pub async fn start(
        upstream: SocketAddr,
        certificates: &TestCertificates,
        start: TlsStart,
    ) -> TlsTerminator {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(certificates.server_cert())
            .and_then(Iterator::collect)
            .expect("read the test server certificate");
        let key = PrivateKeyDer::from_pem_file(certificates.server_key()).expect("read the test server key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("rustls's default protocol versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("the test server certificate and key match");
        let tls = TlsAcceptor::from(Arc::new(config));
        let listener =
            TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port for the terminator");
        let address = listener.local_addr().expect("the terminator's address");
        let acceptor = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(terminate(client, upstream, tls.clone(), start));
            }
        });
        TlsTerminator { address, acceptor }
    }

    /// The address clients connect to (its certificate names `localhost`).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The port clients connect to, at `localhost`.
    pub fn port(&self) -> u16 {
        self.address.port()
    }
}

impl Drop for TlsTerminator {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

/// One client: TLS from it, plaintext to the broker, both ways until either side closes.
/// A client that fails the handshake (it refused the certificate, or spoke plaintext) is
/// dropped.
async fn terminate(mut client: TcpStream, upstream: SocketAddr, tls: TlsAcceptor, start: TlsStart) {
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let mut server = BufReader::new(server);
    if start == TlsStart::AfterNatsInfo {
        let mut info = String::new();
        if server.read_line(&mut info).await.is_err() || !info.starts_with("INFO ") {
            return;
        }
        if client.write_all(requiring_tls(&info).as_bytes()).await.is_err() {
            return;
        }
    }
    let Ok(mut client) = tls.accept(client).await else { return };
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}

/// A NATS `INFO` line saying the server requires TLS.
fn requiring_tls(info: &str) -> String {
    if info.contains("\"tls_required\":false") {
        info.replacen("\"tls_required\":false", "\"tls_required\":true", 1)
    } else if info.contains("\"tls_required\":true") {
        info.to_owned()
    } else {
        info.replacen('{', "{\"tls_required\":true,", 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_info_line_is_rewritten_to_require_tls() {
        assert_eq!(requiring_tls("INFO {\"a\":1}\r\n"), "INFO {\"tls_required\":true,\"a\":1}\r\n");
        assert_eq!(requiring_tls("INFO {\"tls_required\":false}\r\n"), "INFO {\"tls_required\":true}\r\n");
    }
}
