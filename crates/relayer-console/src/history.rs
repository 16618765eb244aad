//! The sidecar sampler's recent samples, for the overview's chart: a bounded ring kept in
//! memory (at most one window, by time and by count), so a console shows the last hour
//! without a metrics server or a table of its own.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use relayer_postgres::NamespaceStatus;

/// The most samples kept, whatever the interval: a chart has no use for more points.
const MAX_SAMPLES: usize = 3_600;

/// One sample: what the chart draws.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// When it was taken (this host's clock: only the chart's x-axis).
    pub at: SystemTime,
    /// Outbox rows pending (an estimate past the sampler's cap).
    pub backlog: i64,
    /// Age of the oldest pending row, in seconds.
    pub oldest_seconds: f64,
    /// Queue dead letters (a lower bound past the sampler's cap).
    pub dead_letters: i64,
}

/// Recent samples, shared between the sampler and the console (cheap to clone).
#[derive(Clone, Debug)]
pub struct History {
    window: Duration,
    samples: Arc<Mutex<VecDeque<Sample>>>,
}

impl History {
    /// Keeps the samples of the last `window`.
    pub fn new(window: Duration) -> Self {
        History { window, samples: Arc::new(Mutex::new(VecDeque::new())) }
    }

    /// The window kept.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Records a sample of `status` taken at `at`.
    pub fn record(&self, status: &NamespaceStatus, at: SystemTime) {
        let dead_letters = status.dead_letters.iter().map(|d| d.count).sum();
        self.push(Sample {
            at,
            backlog: status.outbox_pending,
            oldest_seconds: status.oldest_pending_age.map_or(0.0, |d| d.as_secs_f64()),
            dead_letters,
        });
    }

    /// Appends `sample`, dropping those older than the window before it, and the oldest
    /// past the cap of 3,600 samples (an hour at one a second).
    pub fn push(&self, sample: Sample) {
        let mut samples = self.samples.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let horizon = sample.at.checked_sub(self.window);
        while let (Some(first), Some(horizon)) = (samples.front(), horizon) {
            if first.at >= horizon {
                break;
            }
            samples.pop_front();
        }
        samples.push_back(sample);
        while samples.len() > MAX_SAMPLES {
            samples.pop_front();
        }
    }

    /// The samples kept, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn sample(at_secs: u64) -> Sample {
        Sample {
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(at_secs),
            backlog: 1,
            oldest_seconds: 0.0,
            dead_letters: 0,
        }
    }

    proptest! {
        /// OBS-2: the history never holds a sample older than its window before the newest,
        /// nor more than its cap, and keeps the newest.
        #[test]
        fn history_stays_within_its_window_and_cap_obs_2(steps in proptest::collection::vec(0u64..400, 1..300)) {
            let history = History::new(Duration::from_secs(3_600));
            let mut now = 1_000_000;
            for step in steps {
                now += step;
                history.push(sample(now));
                let kept = history.samples();
                prop_assert!(kept.len() <= MAX_SAMPLES);
                prop_assert_eq!(kept.last().map(|s| s.at), Some(sample(now).at));
                let oldest = kept.first().map(|s| s.at).unwrap_or(sample(now).at);
                prop_assert!(sample(now).at.duration_since(oldest).unwrap_or_default() <= Duration::from_secs(3_600));
            }
        }
    }
}
