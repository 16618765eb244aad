//! The console served over TLS (OBS-3): a client that verifies the certificate against the
//! CA that signed it reads the pages, and the sign-in cookie is `Secure`; a client trusting
//! another CA is refused at the handshake, and a plaintext request gets no page.
#![allow(clippy::unwrap_used)]

mod support;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::Arc;

use relayer_console::{ConsoleSettings, TlsFiles};
use relayer_test_support::TestCertificates;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use support::{Scene, serve};

const TOKEN: &str = "0123456789abcdef-tls-token";

/// A TLS client trusting only the CA in `ca` (PEM).
fn client(ca: &std::path::Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(certificate.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// Sends `request` over TLS to `address` as `localhost` (the certificate's name) and
/// returns what came back before the server closed, or the TLS error.
fn exchange(
    config: Arc<rustls::ClientConfig>,
    address: &str,
    request: &str,
) -> Result<String, std::io::Error> {
    let name = ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(config, name).unwrap();
    let mut stream = rustls::StreamOwned::new(connection, TcpStream::connect(address)?);
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buffer[..n]),
            // A close without close_notify after the whole answer: what was read stands.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => break,
            Err(e) => return Err(e),
        }
    }
    Ok(String::from_utf8_lossy(&raw).into_owned())
}

/// OBS-3: served over TLS, a verifying client gets the pages and a `Secure` cookie; a
/// client trusting another CA never completes a handshake, and plaintext gets no page.
#[tokio::test]
async fn the_console_over_tls_serves_verified_clients_only_obs_3() {
    let certificates = TestCertificates::make().unwrap();
    let scene = Scene::new().await;
    let mut settings = ConsoleSettings::new("127.0.0.1:0".parse().unwrap());
    settings.access_token = Some(TOKEN.to_owned());
    settings.tls = Some(TlsFiles { certificate: certificates.server_cert(), key: certificates.server_key() });
    let served = serve(&scene.db, settings);
    let address = served.address.clone();

    let trusted = client(&certificates.ca());
    let page = exchange(
        Arc::clone(&trusted),
        &address,
        &format!(
            "GET / HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
        ),
    )
    .unwrap();
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("id=\"outbox-pending\""), "the overview page: {page}");

    let body = format!("token={TOKEN}");
    let signed_in = exchange(
        trusted,
        &address,
        &format!(
            "POST /login HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .unwrap();
    assert!(signed_in.starts_with("HTTP/1.1 303"), "{signed_in}");
    let cookie = signed_in
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap_or_else(|| panic!("no cookie: {signed_in}"));
    assert!(cookie.contains("; Secure") && cookie.contains("HttpOnly"), "{cookie}");

    let untrusted = exchange(
        client(&certificates.other_ca()),
        &address,
        "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    );
    assert!(untrusted.is_err(), "a certificate another CA signed must not verify: {untrusted:?}");

    let mut plain = TcpStream::connect(&address).unwrap();
    plain
        .write_all(
            format!("GET / HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\n\r\n").as_bytes(),
        )
        .unwrap();
    plain.set_read_timeout(Some(std::time::Duration::from_secs(15))).unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(!answer.contains("outbox-pending") && !answer.starts_with("HTTP/1.1 200"), "{answer}");
}
