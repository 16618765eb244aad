//! Writing without a host: [`writer`], for a process that only enqueues.

use relayer_core::Namespace;
use relayer_postgres::OutboxWriter;

/// The name relayer's PostgreSQL queue transport is registered under
/// ([`RelayerBuilder::queue_transport`](crate::RelayerBuilder)): the `transport` of a
/// [`NewMessage`](crate::NewMessage) bound for the queue.
pub const QUEUE_TRANSPORT: &str = "queue";

/// A writer for `namespace` accepting messages for the named transports, for a process
/// that enqueues without running a host: a web process, say, while other processes run
/// the workers.
///
/// A writer is plain data: build it once and share it. It must accept the transport names
/// the hosts register ([`QUEUE_TRANSPORT`] for relayer's PostgreSQL queue), since a message
/// for an unknown transport is refused before anything is written (OUT-3). A host's own
/// [`RelayerHost::writer`](crate::RelayerHost::writer) is the same, with the host's
/// transports and largest body.
///
/// ```no_run
/// # async fn example(client: &mut relayer::tokio_postgres::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use relayer::{Namespace, NewMessage, QUEUE_TRANSPORT};
///
/// let writer = relayer::writer(&Namespace::default(), [QUEUE_TRANSPORT]);
/// let tx = client.transaction().await?;
/// // … the service's own writes on `tx` …
/// writer.enqueue(&tx, &[NewMessage::new(QUEUE_TRANSPORT, "orders.created", b"{}".to_vec())]).await?;
/// tx.commit().await?; // a host's dispatcher (in any process) sends it from here on
/// # Ok(()) }
/// ```
pub fn writer<I>(namespace: &Namespace, transports: I) -> OutboxWriter
where
    I: IntoIterator,
    I::Item: Into<String>,
{
    OutboxWriter::new(namespace, transports)
}

#[cfg(all(test, feature = "queue"))]
mod tests {
    #[test]
    fn the_queue_transport_constant_is_the_queue_crates_name() {
        assert_eq!(super::QUEUE_TRANSPORT, relayer_queue::DEFAULT_NAME);
    }
}
