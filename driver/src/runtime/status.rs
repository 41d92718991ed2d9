//! What every lease-holding handle (a host's liveness, a session)
//! publishes about its lease, how its constructor learns that the first
//! registration succeeded or failed, and the lease settings its options
//! ask for.

use std::time::Duration;

use coord_core::lease::{Event, LeaseConfig, LeaseState, RevokeOutcome};
use coord_core::mirror::MirrorStatus;
use coord_core::{AttemptFailure, BackoffConfig, LeaseId, Revision, StartPolicy};
use tokio::sync::{oneshot, watch};
use tracing::{debug, info, warn};

use crate::error::Error;
use crate::runtime::clock::Clock;

/// The lease settings of a handle's options: `refresh` by default a third
/// of `ttl`, and a failed first grant retried in the background when
/// `retry_first`, or failed fast.
pub(crate) fn lease_config(
    ttl: Duration,
    refresh: Option<Duration>,
    request_timeout: Duration,
    backoff: &BackoffConfig,
    seed: u64,
    retry_first: bool,
) -> LeaseConfig {
    LeaseConfig {
        ttl,
        refresh: refresh.unwrap_or(ttl / 3),
        request_timeout,
        backoff: backoff.clone(),
        seed,
        start: if retry_first {
            StartPolicy::Retry
        } else {
            StartPolicy::FailFast
        },
    }
}

/// The state of a handle's lease, as its `state()` receiver reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseStatus {
    /// The first registration is in flight.
    Registering,
    /// The lease (and a host's key) exists, kept alive.
    Registered {
        /// The live lease.
        lease: LeaseId,
    },
    /// The lease was lost; registering again with backoff.
    Healing {
        /// Failed attempts since the last success.
        attempt: u32,
    },
    /// `stop`/`close` is revoking the lease.
    Closing,
    /// Closed by `stop`/`close` or by a failed first registration.
    Closed {
        /// What happened to the lease.
        revoke: RevokeOutcome,
    },
    /// The background task ended without a stop (every handle was
    /// dropped): the lease is left to expire.
    Abandoned,
}

impl From<LeaseState> for LeaseStatus {
    fn from(s: LeaseState) -> Self {
        match s {
            LeaseState::Registering => LeaseStatus::Registering,
            LeaseState::Registered { lease } => LeaseStatus::Registered { lease },
            LeaseState::Healing { attempt } => LeaseStatus::Healing { attempt },
            LeaseState::Closing => LeaseStatus::Closing,
            LeaseState::Closed { revoke } => LeaseStatus::Closed { revoke },
        }
    }
}

/// The answer a constructor waits for: the first lease, or why not.
pub(crate) type Ready = oneshot::Sender<Result<LeaseId, Error>>;

/// Publishes a lease's status and answers the constructor once.
pub(crate) struct LeaseReporter {
    what: &'static str,
    clock: Clock,
    status: watch::Sender<LeaseStatus>,
    ready: Option<Ready>,
    first_failure: Option<Error>,
}

impl LeaseReporter {
    pub(crate) fn new(
        what: &'static str,
        clock: Clock,
        status: watch::Sender<LeaseStatus>,
        ready: Ready,
    ) -> Self {
        LeaseReporter {
            what,
            clock,
            status,
            ready: Some(ready),
            first_failure: None,
        }
    }

    /// Logs a lease event and remembers a failed first registration.
    pub(crate) fn event(&mut self, event: &Event) {
        let what = self.what;
        match event {
            Event::Registered { lease, ttl } => {
                crate::telemetry::lease_registered(what);
                tracing::Span::current().record("lease", tracing::field::display(lease));
                info!(what, %lease, ?ttl, "lease registered")
            }
            Event::Lost { lease, reason } => {
                crate::telemetry::lease_lost(what, reason);
                warn!(what, %lease, %reason, "lease lost")
            }
            Event::KeepAliveInterrupted { lease, failure } => {
                info!(what, %lease, %failure, "keep-alive stream interrupted; reopening")
            }
            Event::Retrying(retry) => {
                debug!(what, attempt = retry.attempt, failure = ?retry.failure, "healing")
            }
            Event::Reregistered { lease, resumed } => {
                crate::telemetry::lease_healed(what, *resumed);
                tracing::Span::current().record("lease", tracing::field::display(lease));
                info!(what, %lease, resumed, "lease registered again")
            }
            Event::StartFailed { reason } => {
                warn!(what, %reason, "first registration failed");
                self.first_failure = Some(Error::from_first_attempt(reason.clone()));
            }
            Event::Closed { revoke } => {
                info!(what, ?revoke, "lease closed");
                if let Some(ready) = self.ready.take() {
                    let err = self.first_failure.take().unwrap_or(Error::TaskGone);
                    let _ = ready.send(Err(err));
                }
            }
        }
    }

    /// Reports how long the lease provably lives (`None`: not held).
    pub(crate) fn expiry(&self, expires_at: Option<coord_core::Instant>) {
        let now = self.clock.now();
        crate::telemetry::lease_remaining(
            self.what,
            expires_at.map(|at| {
                std::time::Duration::from_millis(at.as_millis().saturating_sub(now.as_millis()))
            }),
        );
    }

    /// Publishes the machine's state; answers the constructor once the
    /// state says registered (so it never returns a handle whose lease is
    /// still unknown).
    pub(crate) fn state(&mut self, state: LeaseState) {
        let status = LeaseStatus::from(state);
        let registered = match status {
            LeaseStatus::Registered { lease } => Some(lease),
            _ => None,
        };
        self.status.send_if_modified(|s| {
            let changed = *s != status;
            *s = status;
            changed
        });
        if let Some(lease) = registered {
            if let Some(ready) = self.ready.take() {
                let _ = ready.send(Ok(lease));
            }
        }
    }

    /// Every handle is gone: an ungraceful stop.
    pub(crate) fn abandoned(&mut self) {
        debug!(
            what = self.what,
            "handle dropped; leaving the lease to expire"
        );
        self.status.send_replace(LeaseStatus::Abandoned);
    }
}

/// Waits for the constructor's answer.
pub(crate) async fn first_lease(
    ready: oneshot::Receiver<Result<LeaseId, Error>>,
) -> Result<LeaseId, Error> {
    match ready.await {
        Ok(answer) => answer,
        Err(_) => Err(Error::TaskGone),
    }
}

/// What a list-and-watch (a [`HostWatcher`](crate::HostWatcher), an
/// [`Observe`](crate::Observe)) is doing, as its `status()` receiver
/// reports it: whether its view is current, being rebuilt, or possibly
/// stale because etcd keeps failing. A stale view is never silent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ViewStatus {
    /// The first listing is being read (no failure yet).
    Starting,
    /// Watching: the view reflects every change up to `revision`.
    Watching {
        /// Every change up to here is in the view.
        revision: Revision,
    },
    /// Re-listing after a compaction or to check for a restored etcd; the
    /// view may lag until the listing is read.
    Relisting {
        /// The revision the view reflects meanwhile.
        revision: Revision,
    },
    /// Listing or watching has failed since `since`, with no success
    /// since: the view may be stale. Retries go on with backoff.
    Failing {
        /// The revision the view reflects meanwhile.
        revision: Revision,
        /// When the first failure of this run happened.
        since: tokio::time::Instant,
        /// Failures so far.
        attempt: u32,
        /// The last failure.
        failure: AttemptFailure,
    },
    /// Closed, or failed to start.
    Closed,
}

impl ViewStatus {
    pub(crate) fn of(status: MirrorStatus, clock: Clock) -> Self {
        match status {
            MirrorStatus::Starting => ViewStatus::Starting,
            MirrorStatus::Watching { revision } => ViewStatus::Watching { revision },
            MirrorStatus::Relisting { revision } => ViewStatus::Relisting { revision },
            MirrorStatus::Failing {
                revision,
                since,
                attempt,
                failure,
            } => ViewStatus::Failing {
                revision,
                since: clock.to_runtime(since),
                attempt,
                failure,
            },
            MirrorStatus::Closed => ViewStatus::Closed,
        }
    }

    /// Publishes `status` on `tx` if it changed.
    pub(crate) fn publish(tx: &watch::Sender<ViewStatus>, status: MirrorStatus, clock: Clock) {
        let status = ViewStatus::of(status, clock);
        tx.send_if_modified(|s| {
            if *s == status {
                false
            } else {
                *s = status;
                true
            }
        });
    }
}
