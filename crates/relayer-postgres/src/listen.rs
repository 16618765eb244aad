//! Waking on a LISTEN/NOTIFY channel: [`listen`].
//!
//! A dedicated connection (not from a pool: it is held for the listener's life and must
//! not starve passes, LIF-2) LISTENs on one channel and reports every notification. After
//! every (re)connect it reports [`Heard::Connected`] once, since notifications sent while
//! nobody listened are lost. A broken connection is reopened with backoff; the listener's
//! owner polls to cover the gap.

use std::future::poll_fn;
use std::time::Duration;

use relayer_core::{PassBackoff, error_chain};
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;

use crate::connector::Connector;

const TARGET: &str = "relayer::listen";

/// How long opening the LISTEN connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub use relayer_core::notifications::Heard;

/// Listens on `channel` until `shutdown` is cancelled, calling `heard` for every notification
/// and after every (re)connect; reconnects after `backoff.wait_after(failures)`. The
/// connection goes to `database`: a `Config` (plain) or a [`Connector`] (with its TLS).
///
/// `channel` must be a plain identifier (relayer's channels are `relayer_` + hex).
pub async fn listen(
    database: impl Into<Connector>,
    channel: String,
    backoff: PassBackoff,
    shutdown: CancellationToken,
    heard: impl Fn(Heard<'_>) + Send + Sync + 'static,
) {
    let database = database.into();
    let heard = std::sync::Arc::new(heard);
    let mut failures = 0u32;
    while !shutdown.is_cancelled() {
        match listen_once(&database, &channel, &heard, &shutdown).await {
            Ok(()) => failures = 0,
            Err(error) => {
                failures = failures.saturating_add(1);
                tracing::warn!(target: TARGET, %channel, database = %database.target(),
                    error = %error_chain(error.as_ref()), failures, "LISTEN connection failed");
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

async fn listen_once<F: Fn(Heard<'_>) + Send + Sync + 'static>(
    database: &Connector,
    channel: &str,
    heard: &std::sync::Arc<F>,
    shutdown: &CancellationToken,
) -> Result<(), ListenError> {
    // Raced against shutdown, and bounded: an unreachable server must not hold up shutdown.
    let connecting = tokio::time::timeout(CONNECT_TIMEOUT, database.connect_with_messages());
    let (client, mut connection) = tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        connected = connecting => connected.map_err(|_| "connecting timed out")??,
    };
    let notify = std::sync::Arc::clone(heard);
    let mut driver = tokio::spawn(async move {
        while let Some(message) = poll_fn(|cx| connection.poll_message(cx)).await {
            if let AsyncMessage::Notification(notification) = message? {
                notify(Heard::Notification(notification.payload()));
            }
        }
        Ok::<(), tokio_postgres::Error>(())
    });
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
    heard(Heard::Connected);
    let ended = tokio::select! {
        () = shutdown.cancelled() => { driver.abort(); Ok(()) }
        ended = &mut driver => driver_ended(ended),
    };
    drop(client);
    ended
}

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
