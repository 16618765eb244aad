//! [`Warnings`]: what a test's host logs at WARN and above, to assert on.

use std::sync::{Arc, Mutex, PoisonError};

/// Every WARN and ERROR event logged on the current thread while [`capture`](Self::capture)'s
/// guard lives, as text. A `#[tokio::test]` (current-thread runtime) runs the tasks it
/// spawns, a host's workers included, on the test's own thread, so nothing of another test
/// reaches it.
#[derive(Clone, Debug, Default)]
pub struct Warnings(Arc<Mutex<Vec<u8>>>);

impl Warnings {
    /// Starts capturing on this thread until the guard is dropped.
    #[must_use = "capturing stops when the guard is dropped"]
    pub fn capture(&self) -> tracing::subscriber::DefaultGuard {
        self.capture_from(tracing::Level::WARN)
    }

    /// Like [`capture`](Self::capture), from `level` up (INFO for a host's start line).
    #[must_use = "capturing stops when the guard is dropped"]
    pub fn capture_from(&self, level: tracing::Level) -> tracing::subscriber::DefaultGuard {
        let sink = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    /// What was captured so far, one event a line.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }
}

impl std::io::Write for Warnings {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
