//! TLS through rustls (feature `tls-rustls`): [`rustls_tls`] builds a connector from CA
//! files and the system's roots, [`connector_from_url`] reads a libpq-style URL
//! (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`, libpq's default files under
//! `~/.postgresql`) into a [`Connector`].
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
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::connector::Connector;
use crate::libpq_env::LibpqEnv;
use crate::libpq_url::{LibpqSslMode, NamedFile, TlsUrl};
use crate::tls::Tls;

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
/// `ca_files` (PEM) and, with `system_roots`, the system's trusted roots. It knows what it
/// checks ([`Tls::checks`]), so messages about its connections say, e.g. `TLS, chain and
/// host name verified against /etc/ssl/db-ca.pem`.
pub fn rustls_tls(
    check: CertificateCheck,
    ca_files: &[&Path],
    system_roots: bool,
) -> Result<Tls, TlsSetupError> {
    rustls_tls_presenting(check, ca_files, system_roots, None)
}

/// [`rustls_tls`], presenting `client` (a certificate chain and its key) when the server
/// asks for one (libpq's `sslcert` / `sslkey`).
fn rustls_tls_presenting(
    check: CertificateCheck,
    ca_files: &[&Path],
    system_roots: bool,
    client: Option<ClientIdentity>,
) -> Result<Tls, TlsSetupError> {
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
    let presents = client.as_ref().map(|client| client.cert.clone());
    let with_client = |builder: rustls::ConfigBuilder<
        rustls::ClientConfig,
        rustls::client::WantsClientCert,
    >| match client {
        None => Ok(builder.with_no_client_auth()),
        Some(ClientIdentity { chain, key, cert, key_file }) => {
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                TlsSetupError(format!(
                    "the client certificate {} ({}) and its key {} ({}) cannot be used together: {e}",
                    cert.path.display(),
                    cert.named_by,
                    key_file.path.display(),
                    key_file.named_by
                ))
            })
        }
    };
    let config = match check {
        CertificateCheck::VerifyFull => {
            if roots.is_empty() {
                return Err(TlsSetupError(
                    "no trusted root certificate: give a CA file (sslrootcert) or install the system's roots"
                        .to_owned(),
                ));
            }
            with_client(builder.with_root_certificates(roots))?
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
            with_client(
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(LaxVerifier { chain, provider })),
            )?
        }
    };
    let mut described = checks(check, ca_files, system_roots);
    if let Some(cert) = presents {
        described.push_str(&format!("; client certificate {}", cert.path.display()));
    }
    Ok(Tls::described(MakeRustlsConnect::new(config), described))
}

/// What a connector of [`rustls_tls`] checks, in words: `chain and host name verified
/// against /a.pem and the system's trusted roots`.
fn checks(check: CertificateCheck, ca_files: &[&Path], system_roots: bool) -> String {
    let mut roots: Vec<String> = ca_files.iter().map(|file| file.display().to_string()).collect();
    if system_roots {
        roots.push("the system's trusted roots".to_owned());
    }
    let roots = roots.join(" and ");
    match check {
        CertificateCheck::VerifyFull => format!("chain and host name verified against {roots}"),
        CertificateCheck::VerifyCa => format!("chain verified against {roots}, host name not checked"),
        CertificateCheck::Unverified => "not verified".to_owned(),
    }
}

/// Reads a libpq-style connection string (a `postgres://` URL or `key=value` pairs) into a
/// [`Connector`], with libpq's TLS settings that tokio-postgres does not parse:
///
/// | `sslmode` | TLS | the server's certificate |
/// |---|---|---|
/// | `disable` | never | — |
/// | `prefer` (the default) | when the server offers it | not checked; with a CA file: TLS required, as `require` |
/// | `require` | always | not checked; with a CA file: chains to it (as `verify-ca`) |
/// | `verify-ca` | always | chains to the CA file |
/// | `verify-full` | always | chains to the CA file (else the system's roots) and names the host |
///
/// The CA file is `sslrootcert` and `ca_file` (the CLI's `--ca-file`) when either is given,
/// else libpq's default `~/.postgresql/root.crt` (`%APPDATA%\postgresql\root.crt` on
/// Windows) when it exists. A CA named here (`sslrootcert`, `ca_file`) means TLS: `prefer`
/// is raised to `require` and `disable` is refused, naming both. libpq's default file does
/// as in libpq: with `prefer`, TLS is still optional, but verified when used. Without any CA
/// file, `verify-ca` is refused and `verify-full` trusts the system's roots.
/// `sslmode=allow` is refused (tokio-postgres cannot try plain first).
///
/// A client certificate (`sslcert`, else `PGSSLCERT`, else libpq's default
/// `~/.postgresql/postgresql.crt` when it exists) is presented when the server asks for one,
/// with its key (`sslkey`, else `PGSSLKEY`, else `~/.postgresql/postgresql.key`): a server
/// that authenticates clients by certificate (`hostssl … cert`, `clientcert=verify-full`)
/// lets relayer in. A named file that is missing or unreadable, a certificate without a
/// usable key, or (on Unix) a key that its group or others may read — libpq's rule —
/// is refused, naming the setting and the path. Encrypted keys (`sslpassword`) are not
/// supported.
///
/// As in libpq, the environment fills in what the string leaves out: `PGSSLMODE` for
/// `sslmode`, `PGSSLROOTCERT` for `sslrootcert`, `PGSSLCERT` for `sslcert` and `PGSSLKEY`
/// for `sslkey` (a value in the string wins).
pub fn connector_from_url(url: &str, ca_file: Option<&Path>) -> Result<Connector, TlsSetupError> {
    connector_from_url_with_defaults(url, ca_file, &LibpqDefaults::of_this_user(), &LibpqEnv::read())
}

/// libpq's default files: `~/.postgresql/root.crt`, `postgresql.crt` and `postgresql.key`
/// (under `%APPDATA%\postgresql` on Windows).
#[derive(Debug, Default)]
struct LibpqDefaults {
    /// The CA file, if it exists.
    root_cert: Option<PathBuf>,
    /// The client certificate, if it exists.
    cert: Option<PathBuf>,
    /// Where the client key would be (`None`: no home directory).
    key: Option<PathBuf>,
}

impl LibpqDefaults {
    fn of_this_user() -> LibpqDefaults {
        #[cfg(windows)]
        let dir = std::env::var_os("APPDATA").map(|dir| PathBuf::from(dir).join("postgresql"));
        #[cfg(not(windows))]
        let dir = std::env::var_os("HOME").map(|dir| PathBuf::from(dir).join(".postgresql"));
        LibpqDefaults::in_dir(dir.as_deref())
    }

    fn in_dir(dir: Option<&Path>) -> LibpqDefaults {
        let Some(dir) = dir else { return LibpqDefaults::default() };
        let existing = |name: &str| Some(dir.join(name)).filter(|file| file.is_file());
        LibpqDefaults {
            root_cert: existing("root.crt"),
            cert: existing("postgresql.crt"),
            key: Some(dir.join("postgresql.key")),
        }
    }
}

/// The default client files' names in messages.
const DEFAULT_CERT: &str = "libpq's default client certificate";
const DEFAULT_KEY: &str = "libpq's default client key";

/// A client certificate chain and its key, read from their files.
struct ClientIdentity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    cert: NamedFile,
    key_file: NamedFile,
}

/// The client certificate to present, if any: the named one, else libpq's default when it
/// exists; its key the named one, else libpq's default. Errors name the setting and path.
fn client_identity(
    cert: Option<NamedFile>,
    key: Option<NamedFile>,
    defaults: &LibpqDefaults,
) -> Result<Option<ClientIdentity>, TlsSetupError> {
    let cert = cert.or_else(|| defaults.cert.as_ref().map(|path| NamedFile::new(path, DEFAULT_CERT)));
    let Some(cert) = cert else {
        return match key {
            Some(key) => Err(TlsSetupError(format!(
                "{} names a client key ({}) but no client certificate is given: set sslcert or PGSSLCERT too",
                key.named_by,
                key.path.display()
            ))),
            None => Ok(None),
        };
    };
    let named = |file: &NamedFile| format!("{} ({})", file.path.display(), file.named_by);
    let chain = CertificateDer::pem_file_iter(&cert.path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| TlsSetupError(format!("cannot read the client certificate {}: {e}", named(&cert))))?;
    if chain.is_empty() {
        return Err(TlsSetupError(format!(
            "the client certificate {} holds no PEM certificate",
            named(&cert)
        )));
    }
    let key_file = key
        .or_else(|| defaults.key.as_ref().map(|path| NamedFile::new(path, DEFAULT_KEY)))
        .ok_or_else(|| {
            TlsSetupError(format!(
                "the client certificate {} has no key: set sslkey or PGSSLKEY",
                named(&cert)
            ))
        })?;
    check_key_permissions(&key_file).map_err(TlsSetupError)?;
    let key = PrivateKeyDer::from_pem_file(&key_file.path).map_err(|e| {
        TlsSetupError(format!(
            "cannot read the client key {} (an unencrypted PEM private key is needed): {e}",
            named(&key_file)
        ))
    })?;
    Ok(Some(ClientIdentity { chain, key, cert, key_file }))
}

/// libpq's rule for a client key: readable by its owner alone (0600 or less), or by root
/// and its group when root owns it (0640 or less). A key others could read is refused.
fn check_key_permissions(key: &NamedFile) -> Result<(), String> {
    let metadata = std::fs::metadata(&key.path)
        .map_err(|e| format!("cannot read the client key {} ({}): {e}", key.path.display(), key.named_by))?;
    if !metadata.is_file() {
        return Err(format!("the client key {} ({}) is not a file", key.path.display(), key.named_by));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let mode = metadata.mode() & 0o777;
        let allowed = if metadata.uid() == 0 { 0o640 } else { 0o600 };
        if mode & !allowed != 0 {
            return Err(format!(
                "the client key {} ({}) has group or world access (mode {mode:04o}): it must be u=rw (0600) or \
                 less, or u=rw,g=r (0640) or less when root owns it — `chmod 600 {}`",
                key.path.display(),
                key.named_by,
                key.path.display()
            ));
        }
    }
    Ok(())
}

/// [`connector_from_url`] with `defaults` as libpq's default files and `env` as the
/// environment.
fn connector_from_url_with_defaults(
    url: &str,
    ca_file: Option<&Path>,
    defaults: &LibpqDefaults,
    env: &LibpqEnv,
) -> Result<Connector, TlsSetupError> {
    let mut split =
        TlsUrl::split(url).map_err(|e| TlsSetupError(format!("not a valid connection string: {e}")))?;
    env.fill(&mut split).map_err(TlsSetupError)?;
    let TlsUrl { remaining, mode, root_cert, cert, key } = split;
    let default_root = defaults.root_cert.as_deref();
    let mut config: tokio_postgres::Config =
        remaining.parse().map_err(|e| TlsSetupError(format!("not a valid connection string: {e}")))?;
    let plan = plan(mode.unwrap_or(LibpqSslMode::Prefer), root_cert.as_deref(), ca_file, default_root)?;
    let Some(check) = plan.check else {
        config.ssl_mode(SslMode::Disable);
        return Ok(Connector::new(config));
    };
    let client = client_identity(cert, key, defaults)?;
    let tls = rustls_tls_presenting(check, &plan.ca_files, plan.system_roots, client)?;
    config.ssl_mode(plan.ssl_mode);
    if plan.ssl_mode == SslMode::Prefer {
        return Ok(Connector::preferring(config, tls));
    }
    Connector::requiring(config, tls).map_err(|e| TlsSetupError(e.to_string()))
}

/// What a libpq `sslmode` and the CA files at hand make: when TLS is used, what is checked,
/// against which roots.
#[derive(Debug, PartialEq, Eq)]
struct Plan<'a> {
    /// `Prefer` or `Require`; irrelevant without `check`.
    ssl_mode: SslMode,
    /// `None`: plaintext.
    check: Option<CertificateCheck>,
    ca_files: Vec<&'a Path>,
    system_roots: bool,
}

/// The decision table of [`connector_from_url`].
fn plan<'a>(
    mode: LibpqSslMode,
    root_cert: Option<&'a Path>,
    ca_file: Option<&'a Path>,
    default_root: Option<&'a Path>,
) -> Result<Plan<'a>, TlsSetupError> {
    let named: Vec<&Path> = root_cert.into_iter().chain(ca_file).collect();
    let named_any = !named.is_empty();
    let ca_files: Vec<&Path> = if named_any { named } else { default_root.into_iter().collect() };
    let has_ca = !ca_files.is_empty();
    let tls = |ssl_mode, check| Plan {
        ssl_mode,
        check: Some(check),
        ca_files: ca_files.clone(),
        system_roots: false,
    };
    Ok(match mode {
        LibpqSslMode::Disable if named_any => {
            let mut given: Vec<String> = Vec::new();
            given.extend(root_cert.map(|root| format!("sslrootcert={}", root.display())));
            given.extend(ca_file.map(|file| format!("--ca-file {}", file.display())));
            let given = given.join(" and ");
            return Err(TlsSetupError(format!(
                "sslmode=disable forbids TLS, but a CA file asks for verified TLS ({given}): drop \
                 sslmode=disable (TLS is then required and verified) or drop the CA file"
            )));
        }
        LibpqSslMode::Disable => {
            Plan { ssl_mode: SslMode::Disable, check: None, ca_files: Vec::new(), system_roots: false }
        }
        LibpqSslMode::Allow => {
            return Err(TlsSetupError(
                "sslmode=allow is not supported: use disable, prefer, require, verify-ca or verify-full"
                    .to_owned(),
            ));
        }
        // A CA named for this connection means TLS: never the plaintext fallback of prefer.
        LibpqSslMode::Prefer if named_any => tls(SslMode::Require, CertificateCheck::VerifyCa),
        // libpq's default CA file verifies the chain whenever TLS is used, as in libpq.
        LibpqSslMode::Prefer if has_ca => tls(SslMode::Prefer, CertificateCheck::VerifyCa),
        LibpqSslMode::Prefer => tls(SslMode::Prefer, CertificateCheck::Unverified),
        LibpqSslMode::Require if has_ca => tls(SslMode::Require, CertificateCheck::VerifyCa),
        LibpqSslMode::Require => tls(SslMode::Require, CertificateCheck::Unverified),
        // Without a CA of its own, verify-ca would accept any publicly issued certificate
        // for any name: refused, as libpq refuses it without a root certificate.
        LibpqSslMode::VerifyCa if !has_ca => {
            return Err(TlsSetupError(
                "sslmode=verify-ca needs the CA to check against: set sslrootcert (or PGSSLROOTCERT) or \
                 --ca-file, or put it in ~/.postgresql/root.crt"
                    .to_owned(),
            ));
        }
        LibpqSslMode::VerifyCa => tls(SslMode::Require, CertificateCheck::VerifyCa),
        // A CA file is the only trusted root: adding the system's would let any public
        // certificate pass. Only verify-full without one trusts the system's.
        LibpqSslMode::VerifyFull => {
            Plan { system_roots: !has_ca, ..tls(SslMode::Require, CertificateCheck::VerifyFull) }
        }
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    const NAMED: &str = "/etc/ssl/named.pem";
    const FLAG: &str = "/etc/ssl/flag.pem";
    const HOME: &str = "/home/me/.postgresql/root.crt";

    fn plan_of(mode: LibpqSslMode, root: bool, flag: bool, home: bool) -> Result<Plan<'static>, String> {
        plan(
            mode,
            root.then_some(Path::new(NAMED)),
            flag.then_some(Path::new(FLAG)),
            home.then_some(Path::new(HOME)),
        )
        .map_err(|e| e.to_string())
    }

    fn tls(ssl_mode: SslMode, check: CertificateCheck, ca_files: &[&'static str]) -> Plan<'static> {
        Plan {
            ssl_mode,
            check: Some(check),
            ca_files: ca_files.iter().map(|file| Path::new(*file)).collect(),
            system_roots: false,
        }
    }

    /// A CA named for the connection (sslrootcert, --ca-file) means TLS: prefer is raised
    /// to require, disable is refused naming both.
    #[test]
    fn a_named_ca_never_lets_a_connection_fall_back_to_plaintext() {
        for (root, flag) in [(true, false), (false, true), (true, true)] {
            let plan = plan_of(LibpqSslMode::Prefer, root, flag, true).unwrap();
            assert_eq!((plan.ssl_mode, plan.check), (SslMode::Require, Some(CertificateCheck::VerifyCa)));
            assert!(!plan.ca_files.contains(&Path::new(HOME)), "{plan:?}");
            let refused = plan_of(LibpqSslMode::Disable, root, flag, false).unwrap_err();
            assert!(refused.contains("sslmode=disable forbids TLS"), "{refused}");
            if root {
                assert!(refused.contains(&format!("sslrootcert={NAMED}")), "{refused}");
            }
            if flag {
                assert!(refused.contains(&format!("--ca-file {FLAG}")), "{refused}");
            }
        }
    }

    /// libpq: without sslrootcert, ~/.postgresql/root.crt is the CA when it exists —
    /// require then checks the chain as verify-ca does, and verify-ca/verify-full check
    /// against it (not the system's roots); prefer stays optional but verified when used.
    #[test]
    fn the_default_root_certificate_is_used_when_no_ca_is_named() {
        let with_home = |mode| plan_of(mode, false, false, true).unwrap();
        assert_eq!(
            with_home(LibpqSslMode::Require),
            tls(SslMode::Require, CertificateCheck::VerifyCa, &[HOME])
        );
        assert_eq!(
            with_home(LibpqSslMode::VerifyCa),
            tls(SslMode::Require, CertificateCheck::VerifyCa, &[HOME])
        );
        assert_eq!(
            with_home(LibpqSslMode::VerifyFull),
            tls(SslMode::Require, CertificateCheck::VerifyFull, &[HOME])
        );
        assert_eq!(
            with_home(LibpqSslMode::Prefer),
            tls(SslMode::Prefer, CertificateCheck::VerifyCa, &[HOME])
        );
        assert_eq!(with_home(LibpqSslMode::Disable).check, None);
        // Named CAs replace the default file.
        assert_eq!(
            plan_of(LibpqSslMode::Require, true, true, true).unwrap(),
            tls(SslMode::Require, CertificateCheck::VerifyCa, &[NAMED, FLAG])
        );
    }

    /// Without any CA file: prefer and require encrypt unverified, verify-ca is refused
    /// (naming where a CA can come from), verify-full trusts the system's roots.
    #[test]
    fn without_any_ca_file_only_verify_full_verifies() {
        let bare = |mode| plan_of(mode, false, false, false);
        assert_eq!(
            bare(LibpqSslMode::Prefer).unwrap(),
            tls(SslMode::Prefer, CertificateCheck::Unverified, &[])
        );
        assert_eq!(
            bare(LibpqSslMode::Require).unwrap(),
            tls(SslMode::Require, CertificateCheck::Unverified, &[])
        );
        let refused = bare(LibpqSslMode::VerifyCa).unwrap_err();
        assert!(refused.contains("sslrootcert") && refused.contains("~/.postgresql/root.crt"), "{refused}");
        let full = bare(LibpqSslMode::VerifyFull).unwrap();
        assert_eq!((full.check, full.system_roots), (Some(CertificateCheck::VerifyFull), true));
    }

    /// The subject of the client certificate a session of `connector` presented, as the
    /// server recorded it, or the connection's error.
    async fn presented(connector: Result<Connector, TlsSetupError>) -> Result<Option<String>, String> {
        let client = connector
            .map_err(|e| e.to_string())?
            .connect()
            .await
            .map_err(|e| relayer_core::error_chain(&e))?;
        let row = client
            .query_one("SELECT client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[])
            .await
            .map_err(|e| relayer_core::error_chain(&e))?;
        Ok(row.get(0))
    }

    /// Item 8 of issue 21: `PGSSLCERT` / `PGSSLKEY` fill in a client certificate the string
    /// leaves out, and libpq's default `~/.postgresql/postgresql.crt` / `postgresql.key` do
    /// when neither names one; the server (`hostssl … cert`) lets the session in by it. A
    /// variable naming a missing file is refused naming the variable and the path.
    #[tokio::test]
    async fn pgsslcert_pgsslkey_and_the_default_files_present_a_client_certificate_as_libpq_does() {
        let cluster = relayer_test_support::OwnedCluster::start_with_tls().await;
        let url = cluster.cert_user_url();
        let (cert, key) = (cluster.client_cert_file(), cluster.client_key_file());
        let verified = LibpqEnv {
            sslmode: Some("verify-full".to_owned()),
            sslrootcert: Some(cluster.ca_file()),
            ..LibpqEnv::default()
        };
        let none = LibpqDefaults::default();
        let env = LibpqEnv { sslcert: Some(cert.clone()), sslkey: Some(key.clone()), ..verified.clone() };
        let dn = presented(connector_from_url_with_defaults(&url, None, &none, &env)).await.unwrap();
        assert_eq!(dn.as_deref(), Some("/CN=relayer_cert"));
        let refused =
            presented(connector_from_url_with_defaults(&url, None, &none, &verified)).await.unwrap_err();
        assert!(refused.contains("certificate"), "{refused}");

        let missing = LibpqEnv { sslcert: Some(PathBuf::from("/nonexistent/env.crt")), ..env.clone() };
        let error =
            connector_from_url_with_defaults(&url, None, &none, &missing).map(drop).unwrap_err().to_string();
        assert!(error.contains("/nonexistent/env.crt (PGSSLCERT)"), "{error}");
        let missing = LibpqEnv { sslkey: Some(PathBuf::from("/nonexistent/env.key")), ..env.clone() };
        let error =
            connector_from_url_with_defaults(&url, None, &none, &missing).map(drop).unwrap_err().to_string();
        assert!(error.contains("/nonexistent/env.key (PGSSLKEY)"), "{error}");
        let orphan = LibpqEnv { sslkey: Some(key.clone()), ..verified.clone() };
        let error =
            connector_from_url_with_defaults(&url, None, &none, &orphan).map(drop).unwrap_err().to_string();
        assert!(error.contains("PGSSLKEY names a client key"), "{error}");

        // libpq's default files, when nothing names a certificate.
        let home = std::env::temp_dir().join(format!("relayer-libpq-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::copy(&cert, home.join("postgresql.crt")).unwrap();
        std::fs::copy(&key, home.join("postgresql.key")).unwrap();
        let defaults = LibpqDefaults::in_dir(Some(&home));
        let dn = presented(connector_from_url_with_defaults(&url, None, &defaults, &verified)).await;
        // Without its key the default certificate is refused, naming where the key was looked for.
        std::fs::remove_file(home.join("postgresql.key")).unwrap();
        let error = connector_from_url_with_defaults(&url, None, &defaults, &verified)
            .map(drop)
            .unwrap_err()
            .to_string();
        std::fs::remove_dir_all(&home).unwrap();
        assert_eq!(dn.unwrap().as_deref(), Some("/CN=relayer_cert"));
        assert!(error.contains("postgresql.key (libpq's default client key)"), "{error}");
    }

    /// What a connector says it checks, as messages show it.
    #[test]
    fn connectors_name_what_they_check() {
        let ca = [Path::new(NAMED)];
        assert_eq!(
            checks(CertificateCheck::VerifyFull, &ca, false),
            format!("chain and host name verified against {NAMED}")
        );
        assert_eq!(
            checks(CertificateCheck::VerifyFull, &[], true),
            "chain and host name verified against the system's trusted roots"
        );
        assert_eq!(
            checks(CertificateCheck::VerifyCa, &ca, false),
            format!("chain verified against {NAMED}, host name not checked")
        );
        assert_eq!(checks(CertificateCheck::Unverified, &[], false), "not verified");
    }
}
