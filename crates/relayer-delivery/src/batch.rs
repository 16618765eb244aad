//! One batch to one transport: bounded by a deadline (TRN-5), panics caught (TRN-2), and
//! exactly one outcome per message whatever the transport does.

use std::num::NonZeroUsize;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use relayer_core::{Capabilities, Envelope, SendOutcome, Transport, TransportError};

const TARGET: &str = "relayer::delivery";

/// How one batch's send ended, beside its outcomes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BatchEnd {
    pub(crate) panicked: bool,
    pub(crate) timed_out: bool,
}

/// Sends one batch, giving up after `timeout`, and returns one outcome per message. A
/// transport error, a wrong number of outcomes, a panic or the timeout fails every message.
pub(crate) async fn send_batch(
    transport: &Arc<dyn Transport>,
    destination: &str,
    batch: &[Envelope],
    timeout: Duration,
) -> (Vec<SendOutcome>, BatchEnd) {
    let all_failed = |error: TransportError| vec![SendOutcome::Failed(error); batch.len()];
    let sending = AssertUnwindSafe(transport.send(destination, batch)).catch_unwind();
    let Ok(sent) = tokio::time::timeout(timeout, sending).await else {
        // The broker may still accept what timed out, and the retry sends it again (DSP-7):
        // whether consumers then see it twice is the transport's declaration (TRN-1).
        let deduplicates_by_id = capabilities(transport.as_ref()).deduplicates_by_id;
        let repeat = if deduplicates_by_id {
            "the broker drops the repeat of a late acceptance by message id, within its deduplication window"
        } else {
            "a late acceptance reaches consumers twice: the transport does not deduplicate by id"
        };
        tracing::warn!(target: TARGET, transport = transport.name(), destination, ?timeout, messages = batch.len(),
            deduplicates_by_id, repeat, "send timed out; each message of the batch counts as a transient failure");
        let error = TransportError::transient(format!(
            "transport {:?} did not answer within the send timeout ({timeout:?})",
            transport.name()
        ));
        return (all_failed(error), BatchEnd { panicked: false, timed_out: true });
    };
    match sent {
        Ok(Ok(outcomes)) if outcomes.len() == batch.len() => (outcomes, BatchEnd::default()),
        Ok(Ok(outcomes)) => (
            all_failed(TransportError::transient(format!(
                "transport {:?} returned {} outcomes for {} messages",
                transport.name(),
                outcomes.len(),
                batch.len()
            ))),
            BatchEnd::default(),
        ),
        Ok(Err(error)) => (all_failed(error), BatchEnd::default()),
        Err(panic) => {
            let what = relayer_core::panic_text(panic.as_ref());
            tracing::error!(target: TARGET, transport = transport.name(), destination, panic = %what,
                "transport panicked; counted as a failed send");
            let error =
                TransportError::transient(format!("transport {:?} panicked: {what}", transport.name()));
            (all_failed(error), BatchEnd { panicked: true, timed_out: false })
        }
    }
}

/// The transport's batch limit, or — when `batch_limit()` panics — the error that fails
/// each message of the group, as a panicking `send` would (TRN-2).
pub(crate) fn batch_limit(transport: &dyn Transport) -> Result<NonZeroUsize, TransportError> {
    std::panic::catch_unwind(AssertUnwindSafe(|| transport.batch_limit())).map_err(|panic| {
        let what = relayer_core::panic_text(panic.as_ref());
        tracing::error!(target: TARGET, transport = transport.name(), panic = %what,
            "transport panicked in batch_limit(); its messages count as failed sends");
        TransportError::transient(format!(
            "transport {:?} panicked in batch_limit(): {what}",
            transport.name()
        ))
    })
}

/// The transport's declared capabilities, or none when `capabilities()` panics (TRN-2):
/// declaring nothing is the safe reading. Every worker reads a transport's capabilities
/// through this, so user code cannot end a pass or the host's start by panicking there.
pub fn capabilities(transport: &dyn Transport) -> Capabilities {
    std::panic::catch_unwind(AssertUnwindSafe(|| transport.capabilities())).unwrap_or_else(|panic| {
        let what = relayer_core::panic_text(panic.as_ref());
        tracing::error!(target: TARGET, transport = transport.name(), panic = %what,
            "transport panicked in capabilities(); read as declaring none");
        Capabilities::NONE
    })
}

/// `text` as stored in `last_error`: without NUL and at most
/// [`MAX_ERROR_BYTES`](relayer_core::bounded_text::MAX_ERROR_BYTES), so a chatty transport
/// cannot bloat the outbox (the store applies the same conversion to whatever it binds).
pub(crate) fn bounded(text: &str) -> String {
    relayer_core::BoundedText::error(text).into_string()
}
