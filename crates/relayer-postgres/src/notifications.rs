//! relayer's [`Notifications`] on PostgreSQL: [`PgNotifications`] LISTENs on one of a
//! namespace's channels, through [`listen`](crate::listen::listen).

use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;
use relayer_core::notifications::{Heard, Notifications};
use relayer_core::{Namespace, PassBackoff};
use tokio_util::sync::CancellationToken;

use crate::connector::Connector;

/// Wake-ups from one channel of a namespace, on a dedicated connection to `database`.
#[derive(Clone, Debug)]
pub struct PgNotifications {
    database: Connector,
    channel: String,
}

impl PgNotifications {
    /// The queue's channel of `namespace`: its payload is the queue a writer committed to.
    pub fn queue(database: impl Into<Connector>, namespace: &Namespace) -> Self {
        PgNotifications { database: database.into(), channel: crate::queue::queue_channel(namespace) }
    }

    /// The outbox's channel of `namespace`: writers notify it when they commit outbox rows
    /// (OUT-4); dispatchers wake on it.
    pub fn outbox(database: impl Into<Connector>, namespace: &Namespace) -> Self {
        PgNotifications { database: database.into(), channel: crate::outbox::notify_channel(namespace) }
    }

    /// The channel it listens on.
    pub fn channel(&self) -> &str {
        &self.channel
    }
}

#[async_trait]
impl Notifications for PgNotifications {
    async fn listen(
        &self,
        backoff: PassBackoff,
        heard: Box<dyn for<'h> Fn(Heard<'h>) + Send + Sync>,
        until: Pin<Box<dyn Future<Output = ()> + Send>>,
    ) {
        let shutdown = CancellationToken::new();
        let listening = crate::listen::listen(
            self.database.clone(),
            self.channel.clone(),
            backoff,
            shutdown.clone(),
            heard,
        );
        tokio::pin!(listening);
        tokio::select! {
            () = &mut listening => {}
            () = until => {
                // The listener closes its connection on its way out.
                shutdown.cancel();
                listening.await;
            }
        }
    }
}
