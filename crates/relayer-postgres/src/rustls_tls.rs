//! TLS through rustls (feature `tls-rustls`): [`rustls_tls`] builds a connector from CA
//! files and the system's roots, [`connector_from_url`] reads a libpq-style URL
//! (`sslmode`, `sslrootcert`) into a [`Connector`].
//!
//! rustls runs on the `ring` provider (no cmake or assembler needed to build it).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::DigitallySignedStruct;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::connector::Connector;
use crate::libpq_url::{LibpqSslMode, TlsUrl};

/// How a TLS connection checks the server's certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertificateCheck {
    /// The chain ends at a trusted root and the certificate names the host connected to
    /// (libpq's `verify-full`).
    VerifyFull,
    /// The chain ends at a trusted root; the host name is not checked (libpq's `verify-ca`).
    VerifyCa,
    /// Nothing is checked: the connection is encrypted but the server unauthenticated
    /// (libpq's `prefer` and `require` without a root certificate). Open to an active
    /// man in the middle; prefer [`VerifyFull`](Self::VerifyFull).
    Unverified,
}

/// Why a TLS setup could not be built.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsSetupError(String);

/// A rustls connector checking certificates as `check` says, trusting the certificates of
/// `ca_files` (PEM) and, with `system_roots`, the system's trusted roots.
pub fn rustls_tls(
    check: CertificateCheck,
    ca_files: &[&Path],
    system_roots: bool,
) -> Result<MakeRustlsConnect, TlsSetupError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for file in ca_files {
        let certificates =
            CertificateDer::pem_file_iter(file).and_then(Iterator::collect::<Result<Vec<_>, _>>).map_err(
                |e| TlsSetupError(format!("cannot read CA certificates from {}: {e}", file.display())),
            )?;
        if certificates.is_empty() {
            return Err(TlsSetupError(format!("{} holds no PEM certificate", file.display())));
        }
        for certificate in certificates {
            roots.add(certificate).map_err(|e| {
                TlsSetupError(format!("{} holds a certificate rustls cannot use: {e}", file.display()))
            })?;
        }
    }
    if system_roots {
        // Unreadable system certificates are skipped: the CA files may be all that is needed.
        let found = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(found.certs);
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsSetupError(format!("rustls refused its default protocol versions: {e}")))?;
    let config = match check {
        CertificateCheck::VerifyFull => {
            if roots.is_empty() {
                return Err(TlsSetupError(
                    "no trusted root certificate: give a CA file (sslrootcert) or install the system's roots"
                        .to_owned(),
                ));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        CertificateCheck::VerifyCa | CertificateCheck::Unverified => {
            let chain = match check {
                CertificateCheck::VerifyCa => Some(
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                        .build()
                        .map_err(|e| TlsSetupError(format!("no usable trusted root certificate: {e}")))?,
                ),
                _ => None,
            };
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(LaxVerifier { chain, provider }))
                .with_no_client_auth()
        }
    };
    Ok(MakeRustlsConnect::new(config))
}

/// Reads a libpq-style connection string (a `postgres://` URL or `key=value` pairs) into a
/// [`Connector`], with libpq's TLS settings that tokio-postgres does not parse:
///
/// | `sslmode` | TLS | certificate |
/// |---|---|---|
/// | `disable` | never | — |
/// | `prefer` (the default) | when the server offers it | not checked |
/// | `require` | always | not checked; with a CA (`sslrootcert` or `ca_file`): as `verify-ca` |
/// | `verify-ca` | always | chains to a trusted root |
/// | `verify-full` | always | chains to a trusted root and names the host |
///
/// Trusted roots are `sslrootcert` and `ca_file` (PEM files) when either is given, else (for
/// `verify-full` only) the system's; `verify-ca` without a CA file is refused.
/// `sslmode=allow` is refused (tokio-postgres cannot try plain first).
pub fn connector_from_url(url: &str, ca_file: Option<&Path>) -> Result<Connector, TlsSetupError> {
    let TlsUrl { remaining, mode, root_cert } =
        TlsUrl::split(url).map_err(|e| TlsSetupError(format!("not a valid connection string: {e}")))?;
    let mut config: tokio_postgres::Config =
        remaining.parse().map_err(|e| TlsSetupError(format!("not a valid connection string: {e}")))?;
    let mut ca_files: Vec<&Path> = Vec::new();
    let root_cert: Option<PathBuf> = root_cert;
    if let Some(file) = &root_cert {
        ca_files.push(file);
    }
    if let Some(file) = ca_file {
        ca_files.push(file);
    }
    let has_ca = !ca_files.is_empty();
    let (ssl_mode, check) = match mode.unwrap_or(LibpqSslMode::Prefer) {
        LibpqSslMode::Disable => {
            config.ssl_mode(SslMode::Disable);
            return Ok(Connector::new(config));
        }
        LibpqSslMode::Allow => {
            return Err(TlsSetupError(
                "sslmode=allow is not supported: use disable, prefer, require, verify-ca or verify-full"
                    .to_owned(),
            ));
        }
        LibpqSslMode::Prefer => (SslMode::Prefer, CertificateCheck::Unverified),
        LibpqSslMode::Require if has_ca => (SslMode::Require, CertificateCheck::VerifyCa),
        LibpqSslMode::Require => (SslMode::Require, CertificateCheck::Unverified),
        // Without a CA of its own, verify-ca would accept any publicly issued certificate
        // for any name: refused, as libpq refuses it without a root certificate.
        LibpqSslMode::VerifyCa if !has_ca => {
            return Err(TlsSetupError(
                "sslmode=verify-ca needs the CA to check against: set sslrootcert or --ca-file".to_owned(),
            ));
        }
        LibpqSslMode::VerifyCa => (SslMode::Require, CertificateCheck::VerifyCa),
        LibpqSslMode::VerifyFull => (SslMode::Require, CertificateCheck::VerifyFull),
    };
    config.ssl_mode(ssl_mode);
    // A named CA is the only trusted root: adding the system's would let any public
    // certificate pass a chain check. Only verify-full without one trusts the system's.
    let system_roots = check == CertificateCheck::VerifyFull && !has_ca;
    let tls = rustls_tls(check, &ca_files, system_roots)?;
    Ok(Connector::with_tls(config, tls))
}

/// `verify-ca` (the chain, not the name) or no check at all; either way the handshake's
/// signatures are verified, so the server must hold the key of the certificate it sent.
struct LaxVerifier {
    /// `None`: no chain check.
    chain: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl fmt::Debug for LaxVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaxVerifier").field("checks_chain", &self.chain.is_some()).finish()
    }
}

impl ServerCertVerifier for LaxVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else { return Ok(ServerCertVerified::assertion()) };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}
