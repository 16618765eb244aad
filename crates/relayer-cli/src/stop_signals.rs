//! SIGTERM and SIGINT, listened for from the very start of `relayer run`.
//!
//! A signal that arrives before its handler is installed takes the default action: the
//! process dies on the spot, holding whatever leases it took. So `run` installs both
//! handlers before anything else; from then on a signal is kept until it is read, whether
//! it comes during start-up or later.

/// The stop signals of this process, listened for from construction on.
pub(crate) struct StopSignals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Installs the SIGTERM and SIGINT handlers now.
    pub(crate) fn install() -> Result<Self, String> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let listen = |kind, name| signal(kind).map_err(|e| format!("cannot listen for {name}: {e}"));
            Ok(StopSignals {
                term: listen(SignalKind::terminate(), "SIGTERM")?,
                interrupt: listen(SignalKind::interrupt(), "SIGINT")?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(StopSignals {})
        }
    }

    /// Waits for the next stop signal (or returns one that already came) and names it.
    pub(crate) async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => "SIGTERM",
                _ = self.interrupt.recv() => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}
