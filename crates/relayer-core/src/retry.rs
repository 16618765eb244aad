//! What happens to a message whose send failed: retried after a delay, or buried in the
//! dead table as poison (DSP-3, DSP-5, LAN-2).
//!
//! One decision serves every sender — the dispatcher's unordered batches, its lane heads
//! (where burying a head parks its lane) and the recovery sweeper — so a row is judged
//! alike whoever sends it. It is pure: the attempts the row had, the class of the error
//! and the [`RetryPolicy`] go in, a [`FailureDecision`] comes out. Test your own policy
//! against it:
//!
//! ```
//! use std::num::NonZeroU32;
//! use std::time::Duration;
//! use relayer_core::{DispatcherOptions, ErrorClass, FailureDecision, retry_or_bury};
//!
//! let options = DispatcherOptions::builder().max_attempts(NonZeroU32::new(3)).build().unwrap();
//! let policy = options.retry_policy();
//! assert_eq!(
//!     retry_or_bury(&policy, 0, ErrorClass::Transient),
//!     FailureDecision::Retry { attempts: 1, after: Duration::from_secs(1) }
//! );
//! assert_eq!(
//!     retry_or_bury(&policy, 1, ErrorClass::Transient),
//!     FailureDecision::Retry { attempts: 2, after: Duration::from_secs(2) }
//! );
//! assert_eq!(retry_or_bury(&policy, 2, ErrorClass::Transient), FailureDecision::Bury { attempts: 3 });
//! assert_eq!(retry_or_bury(&policy, 0, ErrorClass::Permanent), FailureDecision::Bury { attempts: 1 });
//! ```

use std::num::NonZeroU32;
use std::time::Duration;

use crate::backoff::RetryBackoff;
use crate::poison::is_poison;
use crate::transport::ErrorClass;

/// The retry and poison policy of a sender: how long a failed row waits, and after how
/// many attempts it is poison. [`DispatcherOptions::retry_policy`](crate::DispatcherOptions::retry_policy)
/// gives the configured one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Failed attempts after which a row is poison; `None`: never (DSP-5).
    pub max_attempts: Option<NonZeroU32>,
    /// The per-row retry schedule (DSP-3).
    pub backoff: RetryBackoff,
}

/// What to do with a message whose send just failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureDecision {
    /// Keep it pending and try again `after` this delay; it has now failed `attempts` times.
    Retry {
        /// Failed attempts, this one included.
        attempts: u32,
        /// How long the row waits before it is visible again.
        after: Duration,
    },
    /// It is poison: move it to the dead table (a lane head: park its lane).
    Bury {
        /// Failed attempts, this one included.
        attempts: u32,
    },
}

impl FailureDecision {
    /// Failed attempts, the one just seen included.
    pub const fn attempts(&self) -> u32 {
        match self {
            FailureDecision::Retry { attempts, .. } | FailureDecision::Bury { attempts } => *attempts,
        }
    }
}

/// Decides the fate of a message that had failed `attempts_before` times and whose send
/// just failed with an error of `class`: poison once it reaches `max_attempts`, or at once
/// when the error is permanent and `max_attempts` is set; otherwise retried after the
/// backoff for its new attempt count.
pub fn retry_or_bury(policy: &RetryPolicy, attempts_before: u32, class: ErrorClass) -> FailureDecision {
    let attempts = attempts_before.saturating_add(1);
    if is_poison(attempts, policy.max_attempts, class) {
        FailureDecision::Bury { attempts }
    } else {
        FailureDecision::Retry { attempts, after: policy.backoff.delay_after(attempts) }
    }
}
