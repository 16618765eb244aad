//! The options of the workers a host runs, fixed once it starts (OPT-4).

use relayer_core::{CleanupOptions, DispatcherOptions, SweeperOptions};

/// The options of the workers a host runs, fixed once it starts (OPT-4). `None`: the host
/// does not run that worker (LIF-4).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RelayerOptions {
    pub(crate) dispatcher: Option<DispatcherOptions>,
    pub(crate) sweeper: Option<SweeperOptions>,
    pub(crate) cleanup: Option<CleanupOptions>,
    #[cfg(feature = "dead-letters")]
    pub(crate) dead_letter: Option<relayer_core::DeadLetterOptions>,
}

impl RelayerOptions {
    /// The dispatcher's options, when the host runs one.
    pub fn dispatcher(&self) -> Option<&DispatcherOptions> {
        self.dispatcher.as_ref()
    }

    /// The recovery sweeper's options, when the host runs one.
    pub fn sweeper(&self) -> Option<&SweeperOptions> {
        self.sweeper.as_ref()
    }

    /// Retention cleanup's options, when the host runs it.
    pub fn cleanup(&self) -> Option<&CleanupOptions> {
        self.cleanup.as_ref()
    }

    /// The dead-letter policy worker's options, when the host runs it.
    #[cfg(feature = "dead-letters")]
    pub fn dead_letter(&self) -> Option<&relayer_core::DeadLetterOptions> {
        self.dead_letter.as_ref()
    }
}
