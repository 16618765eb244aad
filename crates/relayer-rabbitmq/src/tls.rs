//! TLS for `amqps://`: rustls on the ring provider, the server's chain and host name always
//! verified — against the CA files of [`RabbitMqOptions::with_ca_file`] when given (they
//! are then the only trusted roots), else the system's trusted roots.
//!
//! The connection is opened here rather than by lapin's default connector so that an
//! `amqps` URI can never fall back to plaintext and every root is the one configured. The
//! handshake is bounded: the stream is blocking on lapin's I/O thread until it is set up.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lapin::tcp::{HandshakeError, HandshakeResult, RustlsConnector, TcpStream};
use lapin::uri::AMQPUri;
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::options::{OptionError, RabbitMqOptions};

/// How a connection is secured: TLS with these roots, or plain `amqp://`.
#[derive(Clone)]
pub(crate) struct Security {
    tls: Option<RustlsConnector>,
    /// What is verified, for messages: `TLS, chain and host name verified against …`.
    pub(crate) described: String,
}

impl Security {
    /// The security `amqps` (`tls`) asks for with `options`' CA files. A CA file under a
    /// plain `amqp://` URI is refused: the file asks for TLS the URI does not use.
    pub(crate) fn new(tls: bool, options: &RabbitMqOptions) -> Result<Security, OptionError> {
        let ca_files = options.ca_files();
        if !tls {
            if let Some(file) = ca_files.first() {
                return Err(OptionError {
                    field: "ca_file",
                    problem: format!(
                        "{} asks for verified TLS, but the URI is amqp:// (plaintext): use amqps://",
                        file.display()
                    ),
                });
            }
            return Ok(Security { tls: None, described: "plaintext (amqp://)".to_owned() });
        }
        let roots = roots(ca_files)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| OptionError {
                field: "uri",
                problem: format!("amqps: rustls refused its default protocol versions: {e}"),
            })?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let against = if ca_files.is_empty() {
            "the system's trusted roots".to_owned()
        } else {
            ca_files.iter().map(|file| file.display().to_string()).collect::<Vec<_>>().join(" and ")
        };
        Ok(Security {
            tls: Some(RustlsConnector::from(config)),
            described: format!("TLS, chain and host name verified against {against}"),
        })
    }

    /// Opens a TCP connection to `uri`'s host and, for `amqps`, completes the TLS
    /// handshake, all within `timeout`. Runs on lapin's I/O thread.
    #[allow(clippy::result_large_err)] // lapin's connector signature, not ours to box
    pub(crate) fn connect(&self, uri: &AMQPUri, timeout: Duration) -> HandshakeResult {
        // The URI's own `connection_timeout` (milliseconds) shortens it, as lapin's does.
        let timeout =
            uri.query.connection_timeout.map_or(timeout, |ms| timeout.min(Duration::from_millis(ms)));
        let deadline = Instant::now() + timeout;
        let host = uri.authority.host.as_str();
        let stream = TcpStream::connect_timeout((host, uri.authority.port), timeout)?;
        let Some(tls) = &self.tls else {
            stream.set_nonblocking(true)?;
            return Ok(stream);
        };
        // Blocking reads and writes with a timeout: the handshake gives up when the server
        // is silent, and each timeout comes back here to check the deadline.
        stream.set_read_timeout(Some(HANDSHAKE_POLL))?;
        stream.set_write_timeout(Some(timeout))?;
        let mut handshake = stream.into_rustls(tls, host);
        let stream = loop {
            match handshake {
                Ok(stream) => break stream,
                Err(HandshakeError::WouldBlock(mid)) if Instant::now() < deadline => {
                    handshake = mid.handshake();
                }
                Err(HandshakeError::WouldBlock(_)) => {
                    return Err(HandshakeError::Failure(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("TLS handshake: no answer within {timeout:?}"),
                    )));
                }
                Err(HandshakeError::Failure(error)) => {
                    return Err(HandshakeError::Failure(io::Error::new(
                        error.kind(),
                        format!("TLS handshake refused: {error}"),
                    )));
                }
            }
        };
        stream.set_read_timeout(None)?;
        stream.set_write_timeout(None)?;
        stream.set_nonblocking(true)?;
        Ok(stream)
    }
}

/// How long one blocking read of the handshake waits before the deadline is checked again.
const HANDSHAKE_POLL: Duration = Duration::from_millis(200);

/// The trusted roots: the CA files when given, else the system's.
fn roots(ca_files: &[std::path::PathBuf]) -> Result<RootCertStore, OptionError> {
    let mut roots = RootCertStore::empty();
    for file in ca_files {
        add_ca_file(&mut roots, file)?;
    }
    if ca_files.is_empty() {
        // Unreadable system certificates are skipped; none at all is refused below.
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        if roots.is_empty() {
            return Err(OptionError {
                field: "ca_file",
                problem: "is not set and the system has no trusted root certificate: amqps cannot verify \
                          the broker; give the CA that signed its certificate"
                    .to_owned(),
            });
        }
    }
    Ok(roots)
}

fn add_ca_file(roots: &mut RootCertStore, file: &Path) -> Result<(), OptionError> {
    let refused = |problem: String| OptionError { field: "ca_file", problem };
    let certificates =
        CertificateDer::pem_file_iter(file)
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(|e| refused(format!("{}: cannot read CA certificates: {e}", file.display())))?;
    if certificates.is_empty() {
        return Err(refused(format!("{} holds no PEM certificate", file.display())));
    }
    for certificate in certificates {
        roots
            .add(certificate)
            .map_err(|e| refused(format!("{} holds a certificate rustls cannot use: {e}", file.display())))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_under_plain_amqp_is_refused_naming_both_trn_3() {
        let options = RabbitMqOptions::default().with_ca_file("/etc/ssl/broker-ca.pem");
        let refused = Security::new(false, &options).err().unwrap();
        assert_eq!(
            refused.to_string(),
            "RabbitMQ transport option `ca_file` /etc/ssl/broker-ca.pem asks for verified TLS, but the URI \
             is amqp:// (plaintext): use amqps://"
        );
    }

    #[test]
    fn an_unreadable_or_empty_ca_file_is_refused_naming_it_trn_3() {
        let missing = RabbitMqOptions::default().with_ca_file("/nonexistent/ca.pem");
        let refused = Security::new(true, &missing).err().unwrap().to_string();
        assert!(refused.contains("/nonexistent/ca.pem: cannot read CA certificates"), "{refused}");
        let empty = std::env::temp_dir().join(format!("relayer-empty-ca-{}.pem", std::process::id()));
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let refused = Security::new(true, &RabbitMqOptions::default().with_ca_file(&empty)).err().unwrap();
        let _ = std::fs::remove_file(&empty);
        assert!(refused.to_string().contains("holds no PEM certificate"), "{refused}");
    }
}
