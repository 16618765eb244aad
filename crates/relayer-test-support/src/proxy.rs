//! A TCP forwarder on loopback that a test controls: the broker becomes unreachable
//! ([`TcpProxy::cut`]), silent ([`TcpProxy::stall`]) or healthy again
//! ([`TcpProxy::restore`]) without touching the shared broker itself.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the forwarder does with traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Forwards both ways.
    Forward,
    /// Keeps every connection open and accepts new ones, but forwards nothing more: a
    /// broker that took the connection and never answers.
    Stall,
    /// Closes every connection and closes new ones at once: a broker that is down.
    Cut,
}

/// Forwards `127.0.0.1:<port>` to an upstream address until dropped.
pub struct TcpProxy {
    address: SocketAddr,
    mode: watch::Sender<Mode>,
    acceptor: JoinHandle<()>,
}

impl TcpProxy {
    /// Starts forwarding a fresh loopback port to `upstream`.
    pub async fn start(upstream: SocketAddr) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port for the proxy");
        TcpProxy::listening(listener, upstream)
    }

    /// Starts forwarding a fresh port of `ip` (e.g. `::1`) to `upstream`; `None` when
    /// nothing can bind there (no IPv6 on this machine).
    pub async fn start_on(ip: std::net::IpAddr, upstream: SocketAddr) -> Option<TcpProxy> {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0)).await.ok()?;
        Some(TcpProxy::listening(listener, upstream))
    }

    fn listening(listener: TcpListener, upstream: SocketAddr) -> TcpProxy {
        let address = listener.local_addr().expect("the proxy's address");
        let (mode, watching) = watch::channel(Mode::Forward);
        let acceptor = tokio::spawn(accept(listener, upstream, watching));
        TcpProxy { address, mode, acceptor }
    }

    /// The address clients connect to.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Closes every forwarded connection and refuses new ones until [`restore`](Self::restore).
    pub fn cut(&self) {
        self.mode.send_replace(Mode::Cut);
    }

    /// Stops forwarding while keeping connections open and accepting new ones.
    pub fn stall(&self) {
        self.mode.send_replace(Mode::Stall);
    }

    /// Forwards again (connections cut earlier stay closed; clients reconnect).
    pub fn restore(&self) {
        self.mode.send_replace(Mode::Forward);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.mode.send_replace(Mode::Cut);
        self.acceptor.abort();
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, mode: watch::Receiver<Mode>) {
    while let Ok((client, _)) = listener.accept().await {
        if *mode.borrow() == Mode::Cut {
            drop(client); // the broker is "down": the connection closes at once
            continue;
        }
        let Ok(server) = TcpStream::connect(upstream).await else {
            continue;
        };
        let (client_read, client_write) = client.into_split();
        let (server_read, server_write) = server.into_split();
        tokio::spawn(pump(client_read, server_write, mode.clone()));
        tokio::spawn(pump(server_read, client_write, mode.clone()));
    }
}

/// Copies one direction while the mode allows it; ends (closing its half) on a cut.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut mode: watch::Receiver<Mode>) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let current = *mode.borrow_and_update();
        match current {
            Mode::Cut => return,
            Mode::Stall => {
                if mode.changed().await.is_err() {
                    return;
                }
            }
            Mode::Forward => {
                tokio::select! {
                    read = from.read(&mut buffer) => match read {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            // Read before the stall began: still forwarded, as a real
                            // network would have.
                            if to.write_all(&buffer[..n]).await.is_err() {
                                return;
                            }
                        }
                    },
                    changed = mode.changed() => if changed.is_err() { return },
                }
            }
        }
    }
}
