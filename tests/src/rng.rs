//! A seeded random source for kill and restart points: the seed is printed, and setting it
//! again replays the same choices (as far as the scheduler lets a concurrent run repeat).

use std::time::{Duration, SystemTime};

/// The environment variable that fixes the seed.
pub const SEED_VARIABLE: &str = "RELAYER_CHAOS_SEED";

/// A xorshift64 generator: random enough for kill points, with no dependency.
#[derive(Clone, Debug)]
pub struct Rng {
    seed: u64,
    state: u64,
}

impl Rng {
    /// Seeded from [`SEED_VARIABLE`] when set to a number, else from the clock.
    pub fn from_env_or_clock() -> Rng {
        let seed = std::env::var(SEED_VARIABLE)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or_else(|| {
                let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
                now.as_secs() << 30 ^ u64::from(now.subsec_nanos())
            });
        Rng::new(seed)
    }

    /// A generator with this seed.
    pub fn new(seed: u64) -> Rng {
        // xorshift never leaves 0: make the state odd.
        Rng { seed, state: seed | 1 }
    }

    /// The seed, to print and replay.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// A number in `low..high` (`low` when the range is empty).
    pub fn below(&mut self, low: u64, high: u64) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        if high <= low { low } else { low + self.state % (high - low) }
    }

    /// A duration of `low..high` milliseconds.
    pub fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(self.below(low, high))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_replays_the_same_choices_within_their_range() {
        let (mut a, mut b) = (Rng::new(42), Rng::new(42));
        for _ in 0..1000 {
            let n = a.below(50, 700);
            assert_eq!(n, b.below(50, 700));
            assert!((50..700).contains(&n));
        }
        assert_eq!(Rng::new(0).below(3, 3), 3);
    }
}
