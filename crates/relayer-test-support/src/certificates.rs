//! Certificates for a TLS cluster, made at test time with the `openssl` command: a CA, a
//! server certificate it signs for the host name `localhost` only, a client certificate it
//! signs for the role [`CERT_USER`], and a second CA that signed nothing (to be refused
//! with). Nothing is kept between runs.
//!
//! The cluster lets the role [`TLS_USER`] in over TLS only (`hostnossl … reject`), so a
//! session of that role proves its connection is encrypted; it lets [`CERT_USER`] in only
//! with the client certificate (`hostssl … cert`), so a session of that role proves the
//! certificate was presented; the fixtures' `postgres` role connects either way.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// The certificate the server presents (for `localhost`, signed by [`CA_CERT`]).
pub(crate) const SERVER_CERT: &str = "server.pem";
/// The server certificate's private key.
pub(crate) const SERVER_KEY: &str = "server.key";
/// The CA that signed the server's certificate.
pub(crate) const CA_CERT: &str = "ca.pem";
/// A CA that signed nothing the server presents.
pub(crate) const OTHER_CA_CERT: &str = "other-ca.pem";

/// The superuser that may connect over TLS only.
pub(crate) const TLS_USER: &str = "relayer_tls";

/// The client certificate of [`CERT_USER`] (signed by [`CA_CERT`]).
pub(crate) const CLIENT_CERT: &str = "client.pem";
/// The client certificate's private key (mode 0600).
pub(crate) const CLIENT_KEY: &str = "client.key";

/// The superuser that may connect only over TLS with the client certificate
/// [`CLIENT_CERT`] (whose common name it is).
pub(crate) const CERT_USER: &str = "relayer_cert";

/// The host name on the server's certificate.
pub(crate) const HOST_NAME: &str = "localhost";

/// Makes the CAs and the server's certificate in `dir`, the server's key owned by `owner`
/// (the server refuses a key others can read).
pub(crate) fn make(dir: &Path, owner: Option<(u32, u32)>) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let ca = |key: &str, cert: &str, name: &str| {
        openssl(
            dir,
            &["req", "-x509"],
            &ec,
            &[
                "-keyout",
                key,
                "-out",
                cert,
                "-days",
                "2",
                "-subj",
                name,
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        )
    };
    ca("ca.key", CA_CERT, "/CN=relayer test CA")?;
    ca("other-ca.key", OTHER_CA_CERT, "/CN=relayer stranger CA")?;
    openssl(dir, &["req"], &ec, &["-keyout", SERVER_KEY, "-out", "server.csr", "-subj", "/CN=localhost"])?;
    let extensions = dir.join("server.ext");
    std::fs::write(
        &extensions,
        format!(
            "subjectAltName=DNS:{HOST_NAME}\nbasicConstraints=critical,CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        ),
    )
    .map_err(|e| format!("cannot write {}: {e}", extensions.display()))?;
    openssl(
        dir,
        &["x509", "-req"],
        &[],
        &[
            "-in",
            "server.csr",
            "-CA",
            CA_CERT,
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            SERVER_CERT,
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    )?;
    openssl(
        dir,
        &["req"],
        &ec,
        &["-keyout", CLIENT_KEY, "-out", "client.csr", "-subj", &format!("/CN={CERT_USER}")],
    )?;
    let client_extensions = dir.join("client.ext");
    std::fs::write(
        &client_extensions,
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n",
    )
    .map_err(|e| format!("cannot write {}: {e}", client_extensions.display()))?;
    openssl(
        dir,
        &["x509", "-req"],
        &[],
        &[
            "-in",
            "client.csr",
            "-CA",
            CA_CERT,
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            CLIENT_CERT,
            "-days",
            "2",
            "-extfile",
            "client.ext",
        ],
    )?;
    let client_key = dir.join(CLIENT_KEY);
    std::fs::set_permissions(&client_key, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot restrict {}: {e}", client_key.display()))?;
    let key = dir.join(SERVER_KEY);
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(&key, Some(uid), Some(gid))
            .map_err(|e| format!("cannot chown {}: {e}", key.display()))?;
    }
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot restrict {}: {e}", key.display()))
}

/// Puts the TLS-only rule for [`TLS_USER`] and the certificate-only rule for
/// [`CERT_USER`] before initdb's `trust` lines of `data`'s `pg_hba.conf` (the first
/// matching line decides).
pub(crate) fn require_tls_for_tls_user(data: &Path) -> Result<(), String> {
    let path = data.join("pg_hba.conf");
    let existing =
        std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let rules = format!(
        "hostnossl all {TLS_USER} 0.0.0.0/0 reject\nhostnossl all {TLS_USER} ::/0 reject\n\
         hostssl all {CERT_USER} 0.0.0.0/0 cert\nhostssl all {CERT_USER} ::/0 cert\n\
         host all {CERT_USER} 0.0.0.0/0 reject\nhost all {CERT_USER} ::/0 reject\n"
    );
    std::fs::write(&path, rules + &existing).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn openssl(dir: &Path, command: &[&str], key: &[&str], rest: &[&str]) -> Result<(), String> {
    let output = Command::new("openssl")
        .current_dir(dir)
        .args(command)
        .args(key)
        .args(rest)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run openssl (install it, e.g. `apt-get install openssl`): {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "openssl {} failed ({}): {}",
            command.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// A CA, a server certificate it signed for `localhost`, and a second CA that signed
/// nothing, in a fresh directory removed on drop: what a TLS test's server presents and
/// its client trusts (or, with [`other_ca`](Self::other_ca), refuses).
#[derive(Debug)]
pub struct TestCertificates {
    dir: std::path::PathBuf,
}

impl TestCertificates {
    /// Makes them with the `openssl` command.
    pub fn make() -> Result<TestCertificates, String> {
        let dir = std::env::temp_dir().join(format!("relayer-certs-{}", uuid::Uuid::new_v4()));
        let certificates = TestCertificates { dir };
        make(&certificates.dir, None)?;
        Ok(certificates)
    }

    /// The CA that signed the server's certificate (PEM).
    pub fn ca(&self) -> std::path::PathBuf {
        self.dir.join(CA_CERT)
    }

    /// A CA that signed nothing the server presents (PEM).
    pub fn other_ca(&self) -> std::path::PathBuf {
        self.dir.join(OTHER_CA_CERT)
    }

    /// The server's certificate (PEM, for the host name `localhost` only).
    pub fn server_cert(&self) -> std::path::PathBuf {
        self.dir.join(SERVER_CERT)
    }

    /// The server certificate's private key (PEM).
    pub fn server_key(&self) -> std::path::PathBuf {
        self.dir.join(SERVER_KEY)
    }
}

impl Drop for TestCertificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
