//! A batch published pipelined, its acknowledgements awaited together.
//!
//! Most brokers that acknowledge publishes let a client write many messages on one
//! connection before the first acknowledgement comes back (JetStream acks, AMQP publisher
//! confirms, Kafka produce responses …). A [`Transport::send`](super::Transport::send) that
//! publishes the whole batch first and then waits for every acknowledgement at once costs
//! one round trip per batch, not one per message. [`publish_then_await`] is that loop, with
//! the per-message failure rules relayer expects:
//!
//! - an envelope that cannot be prepared or published fails alone
//!   ([`Published::Failed`]): the rest of the batch is still published;
//! - an envelope whose publish lost the connection (or channel) fails, and so does every
//!   envelope after it, with the same error and without being published
//!   ([`Published::Broke`]): publishing on a dead connection would only wait for its
//!   timeout;
//! - the acknowledgements are awaited concurrently, so a timeout that starts when its
//!   future is first polled runs for every message at once rather than one after another.
//!
//! The outcomes come back in batch order, as [`Transport::send`](super::Transport::send)
//! must return them.
//!
//! ```
//! use std::num::NonZeroUsize;
//! use relayer_core::transport::{Published, publish_then_await};
//! use relayer_core::{async_trait, Envelope, SendOutcome, Transport, TransportError};
//!
//! /// A broker client: `publish` writes a message and returns its acknowledgement to await.
//! struct Connection;
//!
//! enum PublishError { TooLarge, ConnectionLost }
//!
//! impl Connection {
//!     async fn publish(&self, _topic: &str, _body: &[u8]) -> Result<Acknowledgement, PublishError> {
//!         Ok(Acknowledgement)
//!     }
//! }
//!
//! struct Acknowledgement;
//!
//! impl Acknowledgement {
//!     async fn wait(self) -> Result<(), String> {
//!         Ok(())
//!     }
//! }
//!
//! struct MyBroker { connection: Connection }
//!
//! #[async_trait]
//! impl Transport for MyBroker {
//!     fn name(&self) -> &str { "my-broker" }
//!     fn batch_limit(&self) -> NonZeroUsize { NonZeroUsize::new(256).unwrap() }
//!     async fn send(&self, topic: &str, batch: &[Envelope])
//!         -> Result<Vec<SendOutcome>, TransportError>
//!     {
//!         let await_ack = |ack: Acknowledgement| async move {
//!             match ack.wait().await {
//!                 Ok(()) => SendOutcome::Accepted,
//!                 Err(refusal) => SendOutcome::Failed(TransportError::transient(refusal)),
//!             }
//!         };
//!         // The publish closure is written in the call, so its future may borrow the envelope.
//!         let sent = publish_then_await(
//!             batch,
//!             |envelope| async move {
//!                 match self.connection.publish(topic, &envelope.body).await {
//!                     Ok(ack) => Published::Awaiting(ack),
//!                     Err(PublishError::TooLarge) => {
//!                         Published::Failed(TransportError::permanent("message too large"))
//!                     }
//!                     Err(PublishError::ConnectionLost) => {
//!                         Published::Broke(TransportError::transient("connection lost"))
//!                     }
//!                 }
//!             },
//!             await_ack,
//!         )
//!         .await;
//!         Ok(sent.outcomes)
//!     }
//! }
//! ```

use std::future::Future;

use futures_util::future::join_all;

use super::{SendOutcome, TransportError};
use crate::message::Envelope;

/// One envelope of a batch after its publish step.
#[derive(Debug)]
pub enum Published<A> {
    /// Handed to the broker; `A` is what resolves to its acknowledgement.
    Awaiting(A),
    /// This envelope failed (it could not be prepared, or the broker refused it at once);
    /// the rest of the batch is still published.
    Failed(TransportError),
    /// This envelope failed and the connection (or channel) is gone with it: every later
    /// envelope of the batch fails with this same error, without being published.
    Broke(TransportError),
}

/// What [`publish_then_await`] reports for a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub struct PublishedBatch {
    /// One outcome per envelope, in batch order: what [`Transport::send`](super::Transport::send)
    /// returns.
    pub outcomes: Vec<SendOutcome>,
    /// The error of the publish that broke the connection, if one did: a transport that
    /// pools connections or channels should not reuse this one.
    pub broken: Option<TransportError>,
}

/// Publishes `batch` in order with `publish`, then awaits every acknowledgement together
/// with `await_ack`; see the [module docs](self) for the failure rules.
///
/// `publish` is called once per envelope, each call awaited before the next (the order the
/// broker receives them in), and never again once one returns [`Published::Broke`].
/// `await_ack` turns each [`Published::Awaiting`] into that envelope's outcome; those
/// futures run concurrently, so each should carry its own deadline if the broker's client
/// does not.
///
/// For `publish`'s future to borrow the envelope, write the closure in the call (as in the
/// module example), or bind it first with its parameter unannotated and used in a way that
/// fixes its type before a field is read: a closure written `|envelope: &Envelope|`
/// accepts an envelope of any lifetime, so its future cannot borrow it ("lifetime may not
/// live long enough").
pub async fn publish_then_await<'b, A, P, PF, W, WF>(
    batch: &'b [Envelope],
    mut publish: P,
    await_ack: W,
) -> PublishedBatch
where
    P: FnMut(&'b Envelope) -> PF,
    PF: Future<Output = Published<A>>,
    W: Fn(A) -> WF,
    WF: Future<Output = SendOutcome>,
{
    let mut published = Vec::with_capacity(batch.len());
    let mut broken: Option<TransportError> = None;
    for envelope in batch {
        if let Some(error) = &broken {
            published.push(Published::Failed(error.clone()));
            continue;
        }
        let step = publish(envelope).await;
        if let Published::Broke(error) = &step {
            broken = Some(error.clone());
        }
        published.push(step);
    }
    let await_ack = &await_ack;
    let outcomes = join_all(published.into_iter().map(|step| async move {
        match step {
            Published::Awaiting(ack) => await_ack(ack).await,
            Published::Failed(error) | Published::Broke(error) => SendOutcome::Failed(error),
        }
    }))
    .await;
    PublishedBatch { outcomes, broken }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::message::{Headers, MessageId};
    use crate::time::Timestamp;

    fn envelope(n: u8) -> Envelope {
        Envelope {
            id: MessageId::new(),
            body: vec![n],
            headers: Headers::new(),
            created_at: Timestamp::from_micros(0),
            trace_context: None,
            lane: None,
            attempts: 0,
        }
    }

    fn batch(count: u8) -> Vec<Envelope> {
        (0..count).map(envelope).collect()
    }

    /// The acknowledgement of body `[n]`: accepted when `n` is even, refused when odd.
    fn acknowledged(n: u8) -> SendOutcome {
        if n.is_multiple_of(2) { SendOutcome::Accepted } else { SendOutcome::Failed(refused(n)) }
    }

    fn refused(n: u8) -> TransportError {
        TransportError::transient(format!("refused {n}"))
    }

    #[tokio::test]
    async fn outcomes_come_back_in_batch_order() {
        let batch = batch(5);
        // Later envelopes are acknowledged sooner: the order is the batch's, not completion's.
        let sent = publish_then_await(
            &batch,
            |envelope| async move { Published::Awaiting(envelope.body[0]) },
            |n| async move {
                tokio::time::sleep(Duration::from_millis(u64::from(5 - n))).await;
                acknowledged(n)
            },
        )
        .await;
        let expected: Vec<SendOutcome> = (0..5).map(acknowledged).collect();
        assert_eq!(sent.outcomes, expected);
        assert_eq!(sent.broken, None);
    }

    #[tokio::test]
    async fn a_failed_publish_fails_only_its_envelope() {
        let batch = batch(4);
        let publishes = Cell::new(0);
        let too_large = TransportError::permanent("message too large");
        let sent = publish_then_await(
            &batch,
            |envelope| {
                publishes.set(publishes.get() + 1);
                let too_large = too_large.clone();
                async move {
                    match envelope.body[0] {
                        1 => Published::Failed(too_large),
                        n => Published::Awaiting(n),
                    }
                }
            },
            |_| async { SendOutcome::Accepted },
        )
        .await;
        assert_eq!(publishes.get(), 4, "the envelopes after the failure are published");
        assert_eq!(
            sent.outcomes,
            [
                SendOutcome::Accepted,
                SendOutcome::Failed(too_large),
                SendOutcome::Accepted,
                SendOutcome::Accepted
            ]
        );
        assert_eq!(sent.broken, None, "a failure of one envelope is not a broken connection");
    }

    #[tokio::test]
    async fn a_broken_connection_stops_publishing_and_fails_the_rest_with_its_error() {
        let batch = batch(5);
        let publishes = Cell::new(0);
        let lost = TransportError::transient("connection lost");
        let sent = publish_then_await(
            &batch,
            |envelope| {
                publishes.set(publishes.get() + 1);
                let lost = lost.clone();
                async move {
                    match envelope.body[0] {
                        2 => Published::Broke(lost),
                        n => Published::Awaiting(n),
                    }
                }
            },
            |_| async { SendOutcome::Accepted },
        )
        .await;
        assert_eq!(publishes.get(), 3, "nothing is published after the connection broke");
        let failed = SendOutcome::Failed(lost.clone());
        assert_eq!(
            sent.outcomes,
            [SendOutcome::Accepted, SendOutcome::Accepted, failed.clone(), failed.clone(), failed]
        );
        assert_eq!(sent.broken, Some(lost));
    }

    #[tokio::test(start_paused = true)]
    async fn acknowledgements_are_awaited_concurrently() {
        let batch = batch(3);
        let start = Instant::now();
        let sent = publish_then_await(
            &batch,
            |_| async { Published::Awaiting(()) },
            |()| async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                SendOutcome::Accepted
            },
        )
        .await;
        assert_eq!(sent.outcomes, vec![SendOutcome::Accepted; 3]);
        assert_eq!(start.elapsed(), Duration::from_secs(1), "three 1 s waits overlap, not add up");
    }

    #[tokio::test]
    async fn an_empty_batch_publishes_nothing() {
        let publishes = Cell::new(0);
        let sent = publish_then_await(
            &[],
            |_| {
                publishes.set(publishes.get() + 1);
                async { Published::Awaiting(()) }
            },
            |()| async { SendOutcome::Accepted },
        )
        .await;
        assert_eq!(publishes.get(), 0);
        assert_eq!(sent, PublishedBatch { outcomes: Vec::new(), broken: None });
    }

    /// What `async_trait` requires of a `send` built on the helper: with `Send` parts, its
    /// future is `Send`.
    #[test]
    fn the_future_is_send_when_its_parts_are() {
        fn assert_send<F: Future + Send>(_: F) {}
        let batch = batch(1);
        let subject = String::from("orders");
        let subject = subject.as_str();
        assert_send(publish_then_await(
            &batch,
            |envelope| async move { Published::Awaiting((subject, envelope.body[0])) },
            |(subject, n)| async move {
                if subject.is_empty() { SendOutcome::Failed(refused(n)) } else { SendOutcome::Accepted }
            },
        ));
    }
}
