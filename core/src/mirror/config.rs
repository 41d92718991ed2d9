//! A mirror's configuration: its prefix, which keys it keeps, its pages,
//! timeouts and backoff, and how they are checked.

use std::time::Duration;

use crate::backoff::BackoffConfig;
use crate::ids::Key;
use crate::io::Consistency;
use crate::lease::ConfigError;
use crate::StartPolicy;

/// Which keys under the prefix the mirror keeps.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum KeyFilter {
    /// Every key (an election's queue).
    #[default]
    All,
    /// Keys whose tail after the prefix is a valid host id, except
    /// `exclude`. Other tails are reported as `Ignored`.
    HostIds {
        /// A host id never kept.
        exclude: Option<String>,
    },
}

/// Keys per listing page by default.
pub const DEFAULT_PAGE_SIZE: u32 = 1000;

/// Configuration of a [`Mirror`](super::Mirror).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct MirrorConfig {
    /// The prefix mirrored.
    pub prefix: Key,
    /// Which keys are kept.
    pub filter: KeyFilter,
    /// How the prefix is read.
    pub consistency: Consistency,
    /// Deadline of each request and of each progress request.
    pub request_timeout: Duration,
    /// How long a stream may stay quiet before its liveness is probed with
    /// a progress request.
    pub probe_interval: Duration,
    /// Pacing of retries.
    pub backoff: BackoffConfig,
    /// Seed of the jitter PRNG.
    pub seed: u64,
    /// What a failed first range does.
    pub start: StartPolicy,
    /// Keys per page of a listing (halved for a page too large to
    /// receive).
    pub page_size: u32,
}

impl MirrorConfig {
    /// Defaults: every key, linearizable, request timeout 5 s, probe every
    /// 10 s, default backoff, fail-fast start.
    pub fn new(prefix: Key, seed: u64) -> Self {
        MirrorConfig {
            prefix,
            filter: KeyFilter::All,
            consistency: Consistency::Linearizable,
            request_timeout: Duration::from_secs(5),
            probe_interval: Duration::from_secs(10),
            backoff: BackoffConfig::default(),
            seed,
            start: StartPolicy::FailFast,
            page_size: DEFAULT_PAGE_SIZE,
        }
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), MirrorConfigError> {
        if self.prefix.0.is_empty() {
            return Err(MirrorConfigError::EmptyPrefix);
        }
        crate::lease::validate_request_timeout(self.request_timeout)
            .map_err(|_| MirrorConfigError::RequestTimeoutOutOfRange(self.request_timeout))?;
        if !crate::lease::probe_interval_in_range(self.probe_interval) {
            return Err(MirrorConfigError::ProbeIntervalOutOfRange(
                self.probe_interval,
            ));
        }
        if !(1..=100_000).contains(&self.page_size) {
            return Err(MirrorConfigError::PageSizeOutOfRange(self.page_size));
        }
        self.backoff
            .validate()
            .map_err(|e| MirrorConfigError::Backoff(ConfigError::Backoff(e)))?;
        Ok(())
    }
}

/// Why a mirror's (or watcher's, or observer's) config was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MirrorConfigError {
    /// The prefix is empty (it would watch the whole key space).
    #[error("the watched prefix is empty")]
    EmptyPrefix,
    /// Request timeout must be between 10 ms and 5 minutes.
    #[error("request timeout must be between 10 ms and 5 min, got {0:?}")]
    RequestTimeoutOutOfRange(Duration),
    /// Probe interval must be between 10 ms and one hour.
    #[error("probe interval must be between 10 ms and 1 h, got {0:?}")]
    ProbeIntervalOutOfRange(Duration),
    /// Page size must be between 1 and 100,000 keys.
    #[error("page size must be between 1 and 100000 keys, got {0}")]
    PageSizeOutOfRange(u32),
    /// Invalid backoff.
    #[error(transparent)]
    Backoff(ConfigError),
}
