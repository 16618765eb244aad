//! Waking on the namespace's channel (OUT-4).
//!
//! A dedicated connection (not from the pool: it is held for the dispatcher's life and must
//! not starve passes, LIF-2) LISTENs on the channel the writer notifies when its
//! transaction commits. Each notification wakes every pass loop. After every (re)connect the
//! loop is woken once, since rows may have committed while nobody listened. A broken
//! connection is reopened with backoff; polling covers the gap.

use std::future::poll_fn;
use std::sync::Arc;
use std::time::Duration;

use relayer_core::{PassBackoff, error_chain};

use crate::wake::Wake;
use tokio_postgres::{AsyncMessage, NoTls};
use tokio_util::sync::CancellationToken;

const TARGET: &str = "relayer::dispatcher";

/// Listens until `shutdown`, waking every pass loop on every notification.
pub(crate) async fn listen(
    config: tokio_postgres::Config,
    channel: String,
    wake: Arc<Wake>,
    backoff: PassBackoff,
    shutdown: CancellationToken,
) {
    let mut failures = 0u32;
    while !shutdown.is_cancelled() {
        match listen_once(&config, &channel, &wake, &shutdown).await {
            Ok(()) => failures = 0,
            Err(error) => {
                failures = failures.saturating_add(1);
                tracing::warn!(target: TARGET, %channel, error = %error_chain(error.as_ref()), failures, "LISTEN connection failed");
            }
        }
        let wait = if failures == 0 { Duration::from_millis(100) } else { backoff.wait_after(failures) };
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Why a LISTEN session ended other than by shutdown.
type ListenError = Box<dyn std::error::Error + Send + Sync>;

/// One LISTEN session: returns when the connection ends (an error) or at shutdown.
async fn listen_once(
    config: &tokio_postgres::Config,
    channel: &str,
    wake: &Arc<Wake>,
    shutdown: &CancellationToken,
) -> Result<(), ListenError> {
    // Raced against shutdown, and bounded: an unreachable server must not hold up `run`.
    let connecting = tokio::time::timeout(CONNECT_TIMEOUT, config.connect(NoTls));
    let (client, mut connection) = tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        connected = connecting => connected.map_err(|_| "connecting timed out")??,
    };
    let notify = Arc::clone(wake);
    let mut driver = tokio::spawn(async move {
        while let Some(message) = poll_fn(|cx| connection.poll_message(cx)).await {
            if let AsyncMessage::Notification(_) = message? {
                notify.all();
            }
        }
        Ok::<(), tokio_postgres::Error>(())
    });
    // The channel is a fixed `relayer_` + hex name: safe to splice, quoted anyway.
    let statement = format!("LISTEN \"{channel}\"");
    let listening = tokio::select! {
        result = client.batch_execute(&statement) => result,
        ended = &mut driver => return driver_ended(ended),
    };
    if let Err(error) = listening {
        driver.abort();
        return Err(error.into());
    }
    tracing::debug!(target: TARGET, %channel, "listening");
    wake.all();
    let ended = tokio::select! {
        () = shutdown.cancelled() => { driver.abort(); Ok(()) }
        ended = &mut driver => driver_ended(ended),
    };
    drop(client);
    ended
}

/// How long opening the LISTEN connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The connection driver's end: a closed connection is an error to back off from, and so
/// is a driver that panicked (never reported as a clean end).
fn driver_ended(
    ended: Result<Result<(), tokio_postgres::Error>, tokio::task::JoinError>,
) -> Result<(), ListenError> {
    match ended {
        Ok(Ok(())) => Err("the LISTEN connection closed".into()),
        Ok(Err(error)) => Err(error.into()),
        Err(join) => Err(format!("the LISTEN connection driver failed: {join}").into()),
    }
}
