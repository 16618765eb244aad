//! [`Tls`]: any tokio-postgres TLS connector behind one type.
//!
//! The pools, the LISTEN connection and the host keep one type whatever TLS library the
//! application chose, so nothing downstream of a connection becomes generic. `Tls` is
//! itself a [`MakeTlsConnect`], so it also goes wherever tokio-postgres takes one (the
//! advisory lock, your own `Config::connect`).

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::Socket;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

/// Why a TLS connector failed.
type TlsError = Box<dyn Error + Send + Sync>;

/// A TLS connector of any kind, cheap to clone: it holds the connector it was made from.
///
/// Never wraps `NoTls`: [`Connector::with_tls`](crate::Connector::with_tls) keeps a plain
/// connector plain, so `sslmode=prefer` still connects without TLS there (a wrapped
/// connector always claims it can do TLS).
#[derive(Clone)]
pub struct Tls {
    make: Arc<dyn MakeAnyTls>,
    /// What the connector checks of the server's certificate, when relayer built it.
    checks: Option<Arc<str>>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("checks", &self.checks).finish_non_exhaustive()
    }
}

impl Tls {
    /// Wraps `tls`, a connector of any TLS library whose handshake and stream can move
    /// between threads (every one does: `postgres-native-tls`, `postgres-openssl`,
    /// `tokio-postgres-rustls`).
    pub(crate) fn new<T>(tls: T) -> Self
    where
        T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
        T::Stream: Send + 'static,
        T::TlsConnect: Send + 'static,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send + 'static,
    {
        Tls { make: Arc::new(tls), checks: None }
    }

    /// Wraps `tls`, which checks what `checks` says (e.g. `chain and host name verified
    /// against /etc/ssl/db-ca.pem`, `not verified`).
    #[cfg_attr(not(feature = "tls-rustls"), allow(dead_code))]
    pub(crate) fn described<T>(tls: T, checks: String) -> Self
    where
        T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
        T::Stream: Send + 'static,
        T::TlsConnect: Send + 'static,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send + 'static,
    {
        Tls { make: Arc::new(tls), checks: Some(checks.into()) }
    }

    /// What this connector checks of the server's certificate, for messages, when relayer
    /// built it (`postgres::rustls_tls`, `postgres::connector_from_url`): e.g. `chain and
    /// host name verified against /etc/ssl/db-ca.pem`, `chain verified against
    /// /etc/ssl/db-ca.pem, host name not checked`, `not verified`. `None` for the
    /// application's own connector, whose checks relayer cannot see.
    pub fn checks(&self) -> Option<&str> {
        self.checks.as_deref()
    }
}

/// The object-safe face of a `MakeTlsConnect`: it clones the connector per connection,
/// since making a handshake takes `&mut self`.
trait MakeAnyTls: Send + Sync {
    fn make(&self, domain: &str) -> Result<TlsHandshake, TlsError>;
}

impl<T> MakeAnyTls for T
where
    T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
    T::Stream: Send + 'static,
    T::TlsConnect: Send + 'static,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send + 'static,
{
    fn make(&self, domain: &str) -> Result<TlsHandshake, TlsError> {
        let connect = self.clone().make_tls_connect(domain).map_err(Into::into)?;
        Ok(TlsHandshake { connect: Box::new(connect) })
    }
}

impl MakeTlsConnect<Socket> for Tls {
    type Stream = TlsConnection;
    type TlsConnect = TlsHandshake;
    type Error = TlsError;

    fn make_tls_connect(&mut self, domain: &str) -> Result<TlsHandshake, TlsError> {
        self.make.make(domain)
    }
}

/// One TLS handshake to come, for one server (the `TlsConnect` of [`Tls`]).
pub struct TlsHandshake {
    connect: Box<dyn ConnectAnyTls>,
}

impl fmt::Debug for TlsHandshake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsHandshake").finish_non_exhaustive()
    }
}

/// A handshake in progress.
type Handshaking = Pin<Box<dyn Future<Output = Result<TlsConnection, TlsError>> + Send>>;

trait ConnectAnyTls: Send {
    fn connect(self: Box<Self>, socket: Socket) -> Handshaking;
}

impl<C> ConnectAnyTls for C
where
    C: TlsConnect<Socket> + Send + 'static,
    C::Stream: Send + 'static,
    C::Future: Send + 'static,
{
    fn connect(self: Box<Self>, socket: Socket) -> Handshaking {
        let handshake = (*self).connect(socket);
        Box::pin(async move {
            let stream = handshake.await.map_err(Into::into)?;
            Ok(TlsConnection { stream: Box::new(stream) })
        })
    }
}

impl TlsConnect<Socket> for TlsHandshake {
    type Stream = TlsConnection;
    type Error = TlsError;
    type Future = Handshaking;

    fn connect(self, socket: Socket) -> Handshaking {
        self.connect.connect(socket)
    }
}

/// An established TLS connection of any library (the `Stream` of [`Tls`]).
pub struct TlsConnection {
    stream: Box<dyn AnyTlsStream>,
}

impl fmt::Debug for TlsConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConnection").finish_non_exhaustive()
    }
}

trait AnyTlsStream: TlsStream + Unpin + Send {}

impl<S: TlsStream + Unpin + Send> AnyTlsStream for S {}

impl AsyncRead for TlsConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConnection {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl TlsStream for TlsConnection {
    fn channel_binding(&self) -> ChannelBinding {
        // SCRAM's channel binding (tls-server-end-point) keeps working through the wrapper.
        self.stream.channel_binding()
    }
}
