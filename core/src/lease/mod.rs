//! The lease engine: one etcd lease granted, kept alive with a client-side
//! deadline, healed, and revoked until etcd confirms. Written once and used
//! by every machine that holds a lease: [`Liveness`](crate::liveness) is a
//! lease with one key attached; a [`Session`](crate::session) is a lease
//! shared by elections and locks, which write their own keys on it.
//!
//! Registration: grant a lease (TTL) -> put the attached key, if any ->
//! open the keep-alive stream (the open sends the first keep-alive; its
//! reply confirms the lease) -> `Registered`: a keep-alive every `refresh`.
//!
//! The engine keeps its own **lease deadline**, computed conservatively:
//! the send time of the latest acknowledged keep-alive plus the TTL that
//! reply returned, so it never believes a lease alive after etcd may have
//! dropped it ([`LeaseEngine::expires_at`]).
//!
//! A keep-alive stream that closes or errors while the deadline has not
//! passed is reopened at once (then with fast backoff, until a reopened
//! stream has answered a keep-alive beyond its opening one), and the lease stays
//! registered: it provably lives, so a broken TCP stream or one etcd member
//! going down is not a loss ([`Event::KeepAliveInterrupted`] reports it).
//! A stream whose keep-alive goes unanswered for the request timeout (or,
//! when longer, TTL/3 + 1 s, the most an `etcd grpc-proxy` delays a
//! reply) counts as silently broken and is replaced the same way.
//! The lease is **lost** when a reply carries TTL 0 or etcd says "lease not
//! found" (revoked or expired), or when the deadline passes with no live
//! reply (a silent partition, a stall, a stream that cannot be reopened).
//!
//! After a loss, [`OnLoss`] decides:
//! - `Resume` (liveness): unless etcd said the lease is dead, first
//!   **resume** it (it may outlive the conservative deadline): reopen the
//!   keep-alive stream and, on a live reply, make sure the attached key is
//!   still there with a compare-and-put that writes nothing when it is
//!   intact, so watchers see no Down/Up flap. If etcd answers that the lease
//!   is gone, grant a new lease at once.
//! - `Replace` (sessions): what was built on the lost lease is reported lost
//!   by the parent, so the lease is revoked (until etcd confirms: its keys
//!   must not block anyone) and a new one is granted.
//!
//! Failed attempts are paced by [`Backoff`](crate::Backoff); a partially
//! made registration (lease granted, later step failed) has its lease
//! revoked until etcd confirms, and so has a lease whose grant answered
//! only after its deadline (the engine had moved on without it).
//!
//! Close revokes whatever lease exists (also one still being granted), then
//! the engine is `Closed` and inert.

mod closing;
mod engine;
mod late_grants;
mod link;
mod revokes;

use std::time::Duration;

use crate::backoff::{BackoffConfig, BackoffConfigError};
use crate::ids::{Key, LeaseId};
use crate::outcome::{AttemptFailure, Failure, Retry};
use crate::StartPolicy;

#[cfg(test)]
pub(crate) use engine::put_if_changed;
pub use engine::LeaseEngine;
#[cfg(test)]
pub(crate) use revokes::RETRY;

/// Smallest lease TTL accepted.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// Largest lease TTL accepted.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// Smallest refresh interval accepted.
pub const MIN_REFRESH: Duration = Duration::from_millis(10);

/// A key written under the lease as part of registering it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Attach {
    /// The key.
    pub key: Key,
    /// Its value.
    pub value: Vec<u8>,
}

/// What the engine does after losing its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub enum OnLoss {
    /// Try to keep the same lease (and key) unless etcd said it is dead.
    Resume,
    /// Revoke it until etcd confirms, and grant a new one.
    Replace,
}

/// The settings of a lease: how long it lives, how it is kept alive, how
/// its heals are paced. Liveness and sessions each hold one; what the lease
/// is for (the key it registers, what a loss does) is given to the
/// [`LeaseEngine`] beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct LeaseConfig {
    /// Lease TTL asked for; granted TTLs may be longer (etcd's minimum).
    /// Whole seconds are asked for, rounding up. Default 10 s.
    pub ttl: Duration,
    /// Keep-alive interval. Must be below `ttl`. Default TTL/3.
    pub refresh: Duration,
    /// Deadline of every request; past it the outcome is unknown. Default
    /// 5 s.
    pub request_timeout: Duration,
    /// Pacing of heal attempts.
    pub backoff: BackoffConfig,
    /// Seed of the jitter PRNG.
    pub seed: u64,
    /// What a failed first grant (or registration) does. Default: fail
    /// fast.
    pub start: StartPolicy,
}

impl LeaseConfig {
    /// A config with coord's defaults: TTL 10 s, refresh TTL/3, request
    /// timeout 5 s, default backoff, fail-fast start.
    pub fn new(seed: u64) -> Self {
        LeaseConfig {
            ttl: Duration::from_secs(10),
            refresh: Duration::from_secs(10) / 3,
            request_timeout: Duration::from_secs(5),
            backoff: BackoffConfig::default(),
            seed,
            start: StartPolicy::FailFast,
        }
    }

    /// Checks every parameter; the engine refuses to start otherwise.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.ttl < MIN_TTL || self.ttl > MAX_TTL {
            return Err(ConfigError::TtlOutOfRange(self.ttl));
        }
        if self.refresh < MIN_REFRESH || self.refresh >= self.ttl {
            return Err(ConfigError::RefreshOutOfRange {
                refresh: self.refresh,
                ttl: self.ttl,
            });
        }
        validate_request_timeout(self.request_timeout)?;
        self.backoff.validate()?;
        Ok(())
    }

    pub(crate) fn ttl_secs(&self) -> i64 {
        let secs = self.ttl.as_secs() + u64::from(self.ttl.subsec_nanos() > 0);
        i64::try_from(secs).unwrap_or(i64::MAX)
    }
}

/// Whether a probe interval (of a quiet watch stream) is within its
/// limits, 10 ms to one hour: shared by every config that has one.
pub(crate) fn probe_interval_in_range(interval: Duration) -> bool {
    (Duration::from_millis(10)..=Duration::from_secs(3600)).contains(&interval)
}

/// Probe intervals at and a millisecond beyond each limit, and whether
/// each is allowed (for the configs' tests).
#[cfg(test)]
pub(crate) const PROBE_INTERVAL_EDGES: [(Duration, bool); 4] = [
    (Duration::from_millis(9), false),
    (Duration::from_millis(10), true),
    (Duration::from_millis(3_600_000), true),
    (Duration::from_millis(3_600_001), false),
];

/// Checks a request timeout: between 10 ms and 5 minutes.
pub(crate) fn validate_request_timeout(timeout: Duration) -> Result<(), ConfigError> {
    if timeout < Duration::from_millis(10) || timeout > Duration::from_secs(300) {
        return Err(ConfigError::RequestTimeoutOutOfRange(timeout));
    }
    Ok(())
}

/// Why a lease (or liveness, or session) config was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// TTL must be between 1 s and one day.
    #[error("lease TTL must be between 1 s and 1 day, got {0:?}")]
    TtlOutOfRange(Duration),
    /// Refresh must be at least 10 ms and below the TTL.
    #[error("refresh must be at least 10 ms and below the TTL ({ttl:?}), got {refresh:?}")]
    RefreshOutOfRange {
        /// The refresh asked for.
        refresh: Duration,
        /// The TTL it must stay below.
        ttl: Duration,
    },
    /// Request timeout must be between 10 ms and 5 minutes.
    #[error("request timeout must be between 10 ms and 5 min, got {0:?}")]
    RequestTimeoutOutOfRange(Duration),
    /// The attached key is empty.
    #[error("the key is empty")]
    EmptyKey,
    /// Probe interval must be between 10 ms and one hour.
    #[error("probe interval must be between 10 ms and 1 h, got {0:?}")]
    ProbeIntervalOutOfRange(Duration),
    /// The backoff parameters are invalid.
    #[error(transparent)]
    Backoff(#[from] BackoffConfigError),
    /// A fleet's slot spacing must be between 1 ms and 1 s, its census
    /// interval between 1 s and one day, and its prefix not empty.
    #[error("fleet spacing must be 1 ms to 1 s and census interval 1 s to 1 day, with a prefix; got spacing {spacing:?}, interval {every:?}")]
    FleetOutOfRange {
        /// The spacing asked for.
        spacing: Duration,
        /// The census interval asked for.
        every: Duration,
    },
}

pub use crate::machine::{Input, StartError};

/// Why a held lease was declared lost.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LostReason {
    /// The keep-alive stream broke and could not be reopened before the
    /// lease's deadline.
    #[error("keep-alive stream broken past the lease deadline: {0}")]
    StreamClosed(Failure),
    /// etcd answered with TTL 0 or "lease not found": the lease was revoked
    /// or expired.
    #[error("lease revoked or expired")]
    LeaseExpired,
    /// No reply before the lease's deadline (silent partition, stall).
    #[error("no keep-alive reply before the lease deadline")]
    KeepAliveTimeout,
}

/// What close did with the leases the engine held.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RevokeOutcome {
    /// No lease existed (never granted one, or every one known gone).
    NothingToRevoke,
    /// etcd confirmed the revoke of every lease the engine held (or that
    /// it no longer exists): its keys are gone. Names the registration's
    /// lease (or else a partial one).
    Revoked(LeaseId),
    /// A revoke failed or timed out: its keys (if any) stay until the lease
    /// expires, at most one TTL later. Names such a lease (the
    /// registration's if it is one).
    NotConfirmed(LeaseId),
}

/// Something the user should know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The first registration succeeded.
    Registered {
        /// The lease.
        lease: LeaseId,
        /// TTL granted.
        ttl: Duration,
    },
    /// The keep-alive stream broke while the lease is provably alive; it is
    /// being reopened (at once, or after a backoff if the stream it
    /// replaced had not proved itself yet) and the lease stays registered.
    KeepAliveInterrupted {
        /// The held lease.
        lease: LeaseId,
        /// What broke the stream.
        failure: Failure,
    },
    /// The held lease was declared lost; healing starts.
    Lost {
        /// The lease that was held.
        lease: LeaseId,
        /// Why.
        reason: LostReason,
    },
    /// An attempt failed (or a heal begins); the next one is at `next_at`.
    Retrying(Retry),
    /// Registered again after a loss.
    Reregistered {
        /// The lease now held.
        lease: LeaseId,
        /// True if the old lease was resumed (no Down/Up for watchers).
        resumed: bool,
    },
    /// The first registration failed under [`StartPolicy::FailFast`]; a
    /// `Closed` follows once any partial lease is revoked.
    StartFailed {
        /// Why.
        reason: AttemptFailure,
    },
    /// Terminal: the engine is inert.
    Closed {
        /// What happened to the lease.
        revoke: RevokeOutcome,
    },
}

/// The user-visible state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseState {
    /// Not started yet, or the first registration is in flight.
    Registering,
    /// The lease is held (and its key exists), kept alive.
    Registered {
        /// The live lease.
        lease: LeaseId,
    },
    /// Not registered right now; re-registering.
    Healing {
        /// Failures since the last success.
        attempt: u32,
    },
    /// Close is revoking the lease.
    Closing,
    /// Inert.
    Closed {
        /// What close did with the lease.
        revoke: RevokeOutcome,
    },
}

/// What `poll` yields.
pub type Output = crate::outbox::Output<crate::io::Command, Event>;
