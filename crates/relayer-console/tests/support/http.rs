//! A plain HTTP/1.1 client on a TCP stream, enough for WebDriver's JSON and for requests a
//! browser would not make (a form without its CSRF token, a missing header).

use std::io::{Read as _, Write as _};
use std::net::TcpStream;

/// One response: status and body.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: String,
}

/// Sends one request to `address` (`host:port`) and reads the whole response.
pub(crate) fn request(
    address: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<(&str, &str)>,
) -> Response {
    let mut stream = TcpStream::connect(address).unwrap_or_else(|e| panic!("connecting to {address}: {e}"));
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    match body {
        Some((content_type, body)) => {
            text.push_str(&format!(
                "Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ));
        }
        None => text.push_str("Content-Length: 0\r\n\r\n"),
    }
    stream.write_all(text.as_bytes()).unwrap();
    // Read the head, then the body by its length: a server may keep the connection open
    // whatever `Connection: close` asked (chromedriver does).
    let mut raw = Vec::new();
    let mut buffer = [0u8; 8192];
    let head_end = loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let n = stream.read(&mut buffer).unwrap();
        assert!(n > 0, "{method} {path}: the connection closed before the response's head");
        raw.extend_from_slice(&buffer[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    };
    let chunked = header("transfer-encoding").is_some_and(|v| v.contains("chunked"));
    let mut body = raw[head_end..].to_vec();
    match header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        Some(length) => {
            while body.len() < length {
                let n = stream.read(&mut buffer).unwrap();
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&buffer[..n]);
            }
        }
        None if chunked => {
            while !body.windows(5).any(|w| w == b"0\r\n\r\n") {
                let n = stream.read(&mut buffer).unwrap();
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&buffer[..n]);
            }
        }
        None => {
            stream.read_to_end(&mut body).unwrap();
        }
    }
    let body = String::from_utf8_lossy(&body).into_owned();
    let body = if chunked { dechunk(&body) } else { body };
    Response { status, body }
}

fn dechunk(mut rest: &str) -> String {
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else { break };
        if size == 0 || after.len() < size {
            break;
        }
        body.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    body
}

/// `value` form-encoded.
pub(crate) fn form(pairs: &[(&str, &str)]) -> String {
    let encode = |s: &str| {
        s.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                    char::from(b).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect::<String>()
    };
    pairs.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect::<Vec<_>>().join("&")
}
