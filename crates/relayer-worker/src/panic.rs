//! Running user code whose panic must not end the task that runs it (RES-1, QUE-5).

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use relayer_core::panic_text;

/// Runs `future`, turning a panic into `Err` with the panic's message (`panic: …`).
///
/// The pass loop runs every pass through it; the queue consumer runs every handler call
/// through it. Unwind safety is asserted: callers drop whatever the future borrowed
/// mutably once it panicked.
pub async fn catch_panic<F: Future>(future: F) -> Result<F::Output, String> {
    AssertUnwindSafe(future)
        .catch_unwind()
        .await
        .map_err(|panic| format!("panic: {}", panic_text(panic.as_ref())))
}
