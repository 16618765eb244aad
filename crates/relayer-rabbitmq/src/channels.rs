//! The connection and its pool of confirm-mode channels.
//!
//! One connection, opened lazily and reopened whenever it is found closed (the broker
//! restarted, the network dropped): that is the whole reconnection story, and it needs no
//! background task. Channels are created on that connection as sends need them, put in
//! confirm mode once, and reused while they stay open; a semaphore bounds how many sends
//! hold one at a time. Every wait here is bounded by the caller's deadline.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lapin::options::ConfirmSelectOptions;
use lapin::{Channel, Connection, ConnectionProperties};
use relayer_core::TransportError;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::{Instant, timeout, timeout_at};

use crate::address::Address;
use crate::tls::Security;

/// How long closing a discarded channel may take before it is left to the connection.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

pub(crate) struct Channels {
    address: Address,
    security: Arc<Security>,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
    idle: Mutex<Vec<Channel>>,
    permits: Semaphore,
}

/// A channel held by one send. Back in the pool when dropped after [`keep`](Self::keep);
/// otherwise — the send failed, or was abandoned at a deadline with confirms outstanding —
/// closed, so the next send never sees a confirm or a return meant for this one.
pub(crate) struct PooledChannel<'a> {
    channel: Option<Channel>,
    keep: bool,
    pool: &'a Channels,
    _permit: SemaphorePermit<'a>,
}

impl Channels {
    pub(crate) fn new(address: Address, security: Security, size: usize) -> Self {
        Channels {
            address,
            security: Arc::new(security),
            connection: tokio::sync::Mutex::new(None),
            idle: Mutex::new(Vec::with_capacity(size)),
            permits: Semaphore::new(size),
        }
    }

    /// Where the connection goes (shown redacted).
    pub(crate) fn address(&self) -> &Address {
        &self.address
    }

    /// An open channel in confirm mode, connecting first when the connection is closed.
    pub(crate) async fn take(&self, deadline: Instant) -> Result<PooledChannel<'_>, TransportError> {
        let permit = timeout_at(deadline, self.permits.acquire())
            .await
            .map_err(|_| TransportError::transient("no free channel before the confirm deadline"))?
            .map_err(|_| TransportError::transient("the channel pool is closed"))?;
        let reusable = loop {
            let Some(channel) = self.lock_idle().pop() else { break None };
            if channel.status().connected() {
                break Some(channel);
            }
        };
        let channel = match reusable {
            Some(channel) => channel,
            None => self.open(deadline).await?,
        };
        Ok(PooledChannel { channel: Some(channel), keep: false, pool: self, _permit: permit })
    }

    async fn open(&self, deadline: Instant) -> Result<Channel, TransportError> {
        let connection = self.connection(deadline).await?;
        let within = |what: &'static str| {
            move |_| TransportError::transient(format!("{what}: no answer before the confirm deadline"))
        };
        let failed = |what: &'static str| move |error| TransportError::transient(what).with_source(error);
        let channel = timeout_at(deadline, connection.create_channel())
            .await
            .map_err(within("open a channel"))?
            .map_err(failed("open a channel"))?;
        timeout_at(deadline, channel.confirm_select(ConfirmSelectOptions::default()))
            .await
            .map_err(within("enable publisher confirms"))?
            .map_err(failed("enable publisher confirms"))?;
        Ok(channel)
    }

    /// The open connection, or a new one when there is none or it closed.
    async fn connection(&self, deadline: Instant) -> Result<Arc<Connection>, TransportError> {
        let mut current = timeout_at(deadline, self.connection.lock()).await.map_err(|_| {
            TransportError::transient("another send is reconnecting; the confirm deadline passed")
        })?;
        if let Some(connection) = current.as_ref()
            && connection.status().connected()
        {
            return Ok(Arc::clone(connection));
        }
        let address = format!("{} ({})", self.address.host_port(), self.security.described);
        let properties = ConnectionProperties::default()
            .with_executor(tokio_executor_trait::Tokio::current())
            .with_reactor(tokio_reactor_trait::Tokio::current())
            .with_connection_name("relayer".into());
        // The TCP connection and TLS handshake run on lapin's I/O thread, bounded by what
        // is left of the deadline (and never less than a second, for a slow handshake).
        let security = Arc::clone(&self.security);
        let budget = deadline.saturating_duration_since(Instant::now()).max(Duration::from_secs(1));
        #[allow(clippy::result_large_err)] // lapin's connector signature, not ours to box
        let connect = Box::new(move |uri: &lapin::uri::AMQPUri| security.connect(uri, budget));
        let connection =
            timeout_at(deadline, Connection::connector(self.address.uri.clone(), connect, properties))
                .await
                .map_err(|_| {
                    TransportError::transient(format!("connect to RabbitMQ at {address}: no answer in time"))
                })?
                .map_err(|error| {
                    TransportError::transient(format!("connect to RabbitMQ at {address}")).with_source(error)
                })?;
        // Channels of the old connection are dead: forget them.
        self.lock_idle().clear();
        let connection = Arc::new(connection);
        *current = Some(Arc::clone(&connection));
        Ok(connection)
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<Channel>> {
        // The list stays consistent whatever panicked while holding it.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl PooledChannel<'_> {
    pub(crate) fn channel(&self) -> &Channel {
        self.channel.as_ref().expect("a pooled channel is present until dropped")
    }

    /// Returns the channel to the pool when dropped: every confirm of its send arrived.
    pub(crate) fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for PooledChannel<'_> {
    fn drop(&mut self) {
        let Some(channel) = self.channel.take() else { return };
        if !channel.status().connected() {
            return;
        }
        if self.keep {
            self.pool.lock_idle().push(channel);
        } else if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = timeout(CLOSE_TIMEOUT, channel.close(200, "relayer discards this channel")).await;
            });
        }
        // Without a runtime the channel is left to its connection.
    }
}
