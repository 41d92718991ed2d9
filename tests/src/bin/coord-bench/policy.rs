//! The two recovery policies the heal and herd benchmarks compare, run
//! through the same driver: coord's own, and the go-coord-style baseline.

use std::time::Duration;

use coord::{BackoffConfig, LivenessOptions, OnLoss};

/// Which policy a host heals with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// coord's: adaptive pacing, a lost lease resumed.
    Coord,
    /// go-coord's: plain doubling to 30 s ([`BackoffConfig::plain`]), a
    /// lost lease replaced.
    Plain,
}

impl Policy {
    /// Its name on a child process's command line.
    pub fn arg(self) -> &'static str {
        match self {
            Policy::Coord => "coord",
            Policy::Plain => "plain",
        }
    }

    /// The policy named `arg` (as [`arg`](Self::arg) writes it).
    pub fn parse(arg: &str) -> Result<Policy, String> {
        match arg {
            "coord" => Ok(Policy::Coord),
            "plain" => Ok(Policy::Plain),
            other => Err(format!("unknown policy {other:?}")),
        }
    }

    /// A host's options under this policy: keys under `prefix`, `ttl`,
    /// the jitter seeded with `seed`.
    pub fn options(self, prefix: &str, ttl: Duration, seed: u64) -> LivenessOptions {
        let (backoff, on_loss, fleet_spacing) = match self {
            Policy::Coord => (
                BackoffConfig::default(),
                OnLoss::Resume,
                LivenessOptions::default().fleet_spacing,
            ),
            // go-coord counts no fleet.
            Policy::Plain => (BackoffConfig::plain(), OnLoss::Replace, None),
        };
        LivenessOptions::default()
            .with_prefix(prefix)
            .with_ttl(ttl)
            .with_backoff(backoff)
            .with_on_loss(on_loss)
            .with_fleet_spacing(fleet_spacing)
            .with_seed(seed)
    }
}
