//! The rustls configuration every connection of the transport uses when it speaks TLS:
//! the ring provider, the server's chain and host name verified against the CA files of
//! [`NatsOptions::with_ca_file`](crate::NatsOptions::with_ca_file) when given (then the only
//! trusted roots), else the system's trusted roots. Built here rather than left to
//! async-nats so the roots are exactly the configured ones and the provider is explicit.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_nats::rustls::RootCertStore;
use async_nats::rustls::pki_types::CertificateDer;
use async_nats::rustls::pki_types::pem::PemObject;

use crate::options::OptionError;

/// The client configuration, and what it verifies in words (for messages).
pub(crate) fn client_config(
    ca_files: &[PathBuf],
) -> Result<(async_nats::rustls::ClientConfig, String), OptionError> {
    let mut roots = RootCertStore::empty();
    for file in ca_files {
        add_ca_file(&mut roots, file)?;
    }
    if ca_files.is_empty() {
        // Unreadable system certificates are skipped. None at all leaves a TLS server
        // unverifiable: its handshake fails, naming the unknown issuer.
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    }
    let provider = Arc::new(async_nats::rustls::crypto::ring::default_provider());
    let config = async_nats::rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| {
            OptionError::new("ca_file", format!("rustls refused its default protocol versions: {e}"))
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let against = if ca_files.is_empty() {
        "the system's trusted roots".to_owned()
    } else {
        ca_files.iter().map(|file| file.display().to_string()).collect::<Vec<_>>().join(" and ")
    };
    Ok((config, format!("chain and host name verified against {against}")))
}

fn add_ca_file(roots: &mut RootCertStore, file: &Path) -> Result<(), OptionError> {
    let refused = |problem: String| OptionError::new("ca_file", problem);
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
