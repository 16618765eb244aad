//! The webhook's receiving end: a minimal HTTP/1.1 server on plain tokio TCP.
//!
//! It answers every request and closes the connection. A message is identified by its
//! `Webhook-Id`: the receiver records each id once however often it arrives (delivery is
//! at least once, so a receiver deduplicates), and, when asked to, refuses each id the
//! first time with a 503 — the transport calls that transient and relayer retries it.

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The largest request head read.
const MAX_HEAD: usize = 64 * 1024;

/// One message as the endpoint received it.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// The request path (the message's destination).
    pub path: String,
    /// The `Webhook-Id` header: the relayer message id.
    pub id: String,
    /// Every header, names in lower case.
    pub headers: BTreeMap<String, String>,
    /// The body.
    pub body: Vec<u8>,
}

#[derive(Default)]
struct State {
    deliveries: Vec<Delivery>,
    seen: HashSet<String>,
    accepted: HashSet<String>,
    refused: usize,
}

/// A running endpoint; stops when dropped.
pub struct Receiver {
    address: SocketAddr,
    state: Arc<Mutex<State>>,
    arrived: Arc<Notify>,
    task: JoinHandle<()>,
}

impl Receiver {
    /// Listens on a free loopback port. With `refuse_first`, each message id is refused
    /// once (503) before it is accepted.
    pub async fn start(refuse_first: bool) -> io::Result<Receiver> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let arrived = Arc::new(Notify::new());
        let task = tokio::spawn({
            let (state, arrived) = (Arc::clone(&state), Arc::clone(&arrived));
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let (state, arrived) = (Arc::clone(&state), Arc::clone(&arrived));
                    tokio::spawn(async move {
                        // A malformed request just ends its connection.
                        let _ = serve(stream, &state, refuse_first).await;
                        arrived.notify_waiters();
                    });
                }
            }
        });
        Ok(Receiver { address, state, arrived, task })
    }

    /// Where to send requests.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The accepted messages, each id once, in arrival order.
    pub fn deliveries(&self) -> Vec<Delivery> {
        lock(&self.state).deliveries.clone()
    }

    /// How many requests were refused with a 503.
    pub fn refused(&self) -> usize {
        lock(&self.state).refused
    }

    /// Waits until `count` distinct messages were accepted.
    pub async fn wait_for(&self, count: usize) {
        loop {
            let arrived = self.arrived.notified();
            if lock(&self.state).deliveries.len() >= count {
                return;
            }
            arrived.await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn serve(mut stream: TcpStream, state: &Mutex<State>, refuse_first: bool) -> io::Result<()> {
    let mut buffer = Vec::new();
    let head_end = loop {
        if let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break end;
        }
        if buffer.len() > MAX_HEAD {
            return respond(&mut stream, "431 Request Header Fields Too Large").await;
        }
        let mut chunk = [0u8; 4096];
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Ok(());
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (method, path) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default().to_owned());
    let headers: BTreeMap<String, String> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers.get("content-length").and_then(|n| n.parse().ok()).unwrap_or(0);
    let mut body = buffer[head_end + 4..].to_vec();
    while body.len() < length {
        let mut chunk = vec![0u8; length - body.len()];
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Ok(());
        }
        body.extend_from_slice(&chunk[..read]);
    }
    let Some(id) = headers.get("webhook-id").cloned() else {
        return respond(&mut stream, "400 Bad Request").await;
    };
    if method != "POST" {
        return respond(&mut stream, "405 Method Not Allowed").await;
    }
    let status = {
        let mut state = lock(state);
        if refuse_first && state.seen.insert(id.clone()) {
            state.refused += 1;
            "503 Service Unavailable"
        } else {
            if state.accepted.insert(id.clone()) {
                state.deliveries.push(Delivery { path, id, headers, body });
            }
            "204 No Content"
        }
    };
    respond(&mut stream, status).await
}

async fn respond(stream: &mut TcpStream, status: &str) -> io::Result<()> {
    let response = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
