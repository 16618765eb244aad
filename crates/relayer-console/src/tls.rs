//! HTTPS for a console served beyond loopback: rustls (ring provider) with the configured
//! certificate and key. Handshakes run on tasks of their own, so a client that opens a
//! connection and says nothing delays no one else; one that takes longer than
//! [`HANDSHAKE_TIMEOUT`] is dropped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::settings::TlsFiles;

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The server configuration from `files`, refused in one line naming the key and file.
pub(crate) fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, String> {
    let certificates = CertificateDer::pem_file_iter(&files.certificate)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| format!("console.tls_certificate: {}: {e}", files.certificate.display()))?;
    if certificates.is_empty() {
        return Err(format!(
            "console.tls_certificate: {}: holds no certificate",
            files.certificate.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("console.tls_key: {}: {e}", files.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("console TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certificates, key)
        .map_err(|e| format!("console.tls_key: {} does not fit the certificate: {e}", files.key.display()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A TCP listener whose connections are handed out once their TLS handshake completed.
pub(crate) struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: JoinSet<Option<(TlsStream<TcpStream>, SocketAddr)>>,
}

impl TlsListener {
    pub(crate) fn new(tcp: TcpListener, config: Arc<rustls::ServerConfig>) -> Self {
        TlsListener { tcp, acceptor: TlsAcceptor::from(config), handshakes: JoinSet::new() }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            tokio::select! {
                accepted = self.tcp.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let acceptor = self.acceptor.clone();
                        self.handshakes.spawn(async move {
                            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                                Ok(Ok(tls)) => Some((tls, peer)),
                                Ok(Err(error)) => {
                                    tracing::debug!(target: "relayer::console", %peer, %error, "TLS handshake failed");
                                    None
                                }
                                Err(_) => None,
                            }
                        });
                    }
                    // Out of file descriptors, say: wait a moment rather than spin.
                    Err(error) => {
                        tracing::warn!(target: "relayer::console", %error, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    if let Ok(Some(connection)) = done {
                        return connection;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
