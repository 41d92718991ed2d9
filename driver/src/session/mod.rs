//! `Session`: one lease kept alive in the background, shared by elections
//! and locks (the core [`Session`](coord_core::session::Session) on the
//! driver's run loop).
//!
//! A session is cheap to clone; every clone and every election or lock made
//! from it talks to the same background task. Dropping every clone without
//! [`close`](Session::close) is an ungraceful close: the keep-alive ends and
//! the lease (with every key on it) expires about one TTL later.
//!
//! # Contract
//!
//! - A `Session` is one lease kept alive by the same engine as a host's
//!   liveness (client-side deadline, broken streams reopened while the lease
//!   provably lives). When its lease is lost (TTL 0, not found, or its
//!   deadline passed) every campaign and leadership on it reports lost at
//!   once, the old lease is revoked until etcd confirms (its keys must not
//!   block anyone), and a new lease is granted for later campaigns: a dead
//!   session is never handed out. Campaigns asked for meanwhile wait for it.
//! - `Election::new`/`Mutex::new` own a session of their own (`close`
//!   revokes it); `Election::on`/`Mutex::on`/`pool.election(name)` borrow one
//!   (their `close` leaves it alone), as go-coord's pool does.
//! - Keep-alive load does not grow with names: a pool of 1,000 names is one
//!   lease (go-coord's pool holds one session per name).
//! - Dropping every handle of a session without `close` is an ungraceful
//!   close: its keys go when the lease expires, about one TTL later.

mod client;
mod protocol;
mod task;

pub(crate) use client::SessionClient;
pub(crate) use protocol::{Counters, Deadline, Phase, Request};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use coord_core::election::ElectionId;
use coord_core::session::{Session as SessionMachine, SessionConfig};
use coord_core::{BackoffConfig, Instant, LeaseId};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument;

use crate::election::ObserveSettings;
use crate::error::Error;
use crate::etcd::EtcdApi;
use crate::runtime::clock::Clock;
use crate::runtime::runner::run;
use crate::runtime::status::{first_lease, lease_config, LeaseReporter, LeaseStatus};
use client::Erased;
use task::SessionAdapter;

/// Options of [`Session::new`] (and of a standalone election, a lock, a
/// pool).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionOptions {
    /// Lease TTL, 1 s to 1 day, asked in whole seconds (rounded up); etcd
    /// may grant more (its minimum). A leader whose process dies is
    /// replaced about one TTL later. Default 10 s.
    pub ttl: Duration,
    /// Keep-alive interval, at least 10 ms and below the TTL. Default TTL/3.
    pub refresh: Option<Duration>,
    /// Deadline of each etcd request. Default 5 s. A keep-alive's reply
    /// is awaited this long or a third of the TTL plus 1 s, whichever is
    /// longer (an `etcd grpc-proxy` replies only as it renews the lease).
    pub request_timeout: Duration,
    /// A campaign's queue watch quiet this long is probed. Default 10 s.
    pub probe_interval: Duration,
    /// Pacing of retries. Default 100 ms doubling to 30 s (1 s while etcd
    /// refuses at once).
    pub backoff: BackoffConfig,
    /// Seed of the retry jitter. Default: from the time.
    pub seed: Option<u64>,
    /// Keep retrying a failing first lease grant in the background instead
    /// of failing `new`. Default false.
    pub retry_first_grant: bool,
}

/// Builder-style setters: the struct is `#[non_exhaustive]`, so that a
/// new option is not a breaking change; start from `SessionOptions::default()`
/// (or its constructor) and set what differs.
impl SessionOptions {
    /// These options with [`ttl`](Self::ttl) set.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// These options with [`refresh`](Self::refresh) set.
    pub fn with_refresh(mut self, refresh: Duration) -> Self {
        self.refresh = Some(refresh);
        self
    }
    /// These options with [`request_timeout`](Self::request_timeout) set.
    pub fn with_request_timeout(mut self, request_timeout: Duration) -> Self {
        self.request_timeout = request_timeout;
        self
    }
    /// These options with [`probe_interval`](Self::probe_interval) set.
    pub fn with_probe_interval(mut self, probe_interval: Duration) -> Self {
        self.probe_interval = probe_interval;
        self
    }
    /// These options with [`backoff`](Self::backoff) set.
    pub fn with_backoff(mut self, backoff: BackoffConfig) -> Self {
        self.backoff = backoff;
        self
    }
    /// These options with [`seed`](Self::seed) set.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }
    /// These options with [`retry_first_grant`](Self::retry_first_grant) set.
    pub fn with_retry_first_grant(mut self, retry_first_grant: bool) -> Self {
        self.retry_first_grant = retry_first_grant;
        self
    }
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            ttl: Duration::from_secs(10),
            refresh: None,
            request_timeout: Duration::from_secs(5),
            probe_interval: Duration::from_secs(10),
            backoff: BackoffConfig::default(),
            seed: None,
            retry_first_grant: false,
        }
    }
}

#[derive(Debug)]
struct Inner {
    requests: mpsc::UnboundedSender<Request>,
    status: watch::Receiver<LeaseStatus>,
    deadline: watch::Receiver<Deadline>,
    counters: watch::Receiver<Counters>,
    clock: Clock,
    ttl: Duration,
    request_timeout: Duration,
    probe_interval: Duration,
    backoff: BackoffConfig,
    seed: u64,
    next_id: AtomicU64,
    client: Arc<dyn SessionClient>,
}

/// A lease kept alive in the background, shared by the elections and
/// locks made from it. Cloning shares it.
#[derive(Debug, Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

impl Session {
    /// Grants a lease and keeps it alive in the background. Fails fast on
    /// invalid options, or (unless `retry_first_grant`) when the first
    /// grant fails, e.g. `Error::Unreachable`, revoking anything granted.
    ///
    /// Cancel safety: not cancel-safe. Dropping it part-way is an ungraceful
    /// close: a lease granted meanwhile expires within one TTL.
    pub async fn new<A: EtcdApi>(client: A, opts: SessionOptions) -> Result<Session, Error> {
        let seed = opts
            .seed
            .unwrap_or_else(|| crate::liveness::default_seed("session"));
        let config = opts.config(seed);
        let machine = SessionMachine::new(config)?;
        let clock = Clock::start();
        let (requests, requests_rx) = mpsc::unbounded_channel();
        let (status_tx, status) = watch::channel(LeaseStatus::Registering);
        let (deadline_tx, deadline) = watch::channel(Deadline::default());
        let (counters_tx, counters) = watch::channel(Counters::default());
        let (ready_tx, ready_rx) = oneshot::channel();
        let adapter = SessionAdapter::new(
            LeaseReporter::new("session", clock, status_tx, ready_tx),
            deadline_tx,
            counters_tx,
        );
        let erased: Arc<dyn SessionClient> = Arc::new(Erased(client.clone()));
        let span = tracing::info_span!("session", lease = tracing::field::Empty);
        tokio::spawn(run(client, machine, adapter, clock, requests_rx).instrument(span));
        let session = Session {
            inner: Arc::new(Inner {
                requests,
                status,
                deadline,
                counters,
                clock,
                ttl: opts.ttl,
                request_timeout: opts.request_timeout,
                probe_interval: opts.probe_interval,
                backoff: opts.backoff,
                seed,
                next_id: AtomicU64::new(1),
                client: erased,
            }),
        };
        if !opts.retry_first_grant {
            first_lease(ready_rx).await?;
        }
        Ok(session)
    }

    /// The lease while registered; `None` while registering, healing or
    /// closed. After a heal it names the new lease.
    pub fn lease_id(&self) -> Option<LeaseId> {
        match &*self.inner.status.borrow() {
            LeaseStatus::Registered { lease } => Some(*lease),
            _ => None,
        }
    }

    /// A receiver of the lease's state; it changes on every transition.
    pub fn state(&self) -> watch::Receiver<LeaseStatus> {
        self.inner.status.clone()
    }

    /// The TTL asked for.
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// Ends every campaign and leadership of this session (they report
    /// lost) and revokes the lease, deleting every key on it. Idempotent.
    /// `Error::RevokeNotConfirmed` if etcd could not confirm the revoke: the
    /// keys then expire with the lease, within one TTL.
    ///
    /// Cancel safety: cancel-safe. Once polled, the close goes on in the
    /// background; a later `close` waits for the same outcome.
    pub async fn close(&self) -> Result<(), Error> {
        let _ = self.inner.requests.send(Request::Close);
        let mut status = self.inner.status.clone();
        let done = status
            .wait_for(|s| matches!(s, LeaseStatus::Closed { .. } | LeaseStatus::Abandoned))
            .await
            .map(|s| s.clone());
        match done {
            Ok(LeaseStatus::Closed {
                revoke: coord_core::lease::RevokeOutcome::NotConfirmed(lease),
            }) => Err(Error::RevokeNotConfirmed { lease }),
            Ok(LeaseStatus::Closed { .. }) => Ok(()),
            _ => Err(Error::TaskGone),
        }
    }

    /// True once closed (or its task gone).
    pub fn is_closed(&self) -> bool {
        matches!(
            *self.inner.status.borrow(),
            LeaseStatus::Closing | LeaseStatus::Closed { .. } | LeaseStatus::Abandoned
        )
    }

    pub(crate) fn send(&self, request: Request) -> Result<(), Error> {
        if let Request::Campaign { .. } = request {
            if self.is_closed() {
                return Err(Error::Closed);
            }
        }
        self.inner.requests.send(request).map_err(|_| {
            if self.is_closed() {
                Error::Closed
            } else {
                Error::TaskGone
            }
        })
    }

    pub(crate) fn next_id(&self) -> ElectionId {
        ElectionId(self.inner.next_id.fetch_add(1, Ordering::Relaxed))
    }

    pub(crate) fn deadline(&self) -> Deadline {
        *self.inner.deadline.borrow()
    }

    pub(crate) fn now(&self) -> Instant {
        self.inner.clock.now()
    }

    pub(crate) fn counters(&self) -> Counters {
        *self.inner.counters.borrow()
    }

    /// The session's client, its type erased: for one-shot reads and
    /// observers of the queues.
    pub(crate) fn client(&self) -> &Arc<dyn SessionClient> {
        &self.inner.client
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.inner.request_timeout
    }

    /// The settings an observer of this session's elections uses.
    pub(crate) fn observe_settings(&self) -> ObserveSettings {
        ObserveSettings {
            request_timeout: self.inner.request_timeout,
            probe_interval: self.inner.probe_interval,
            backoff: self.inner.backoff.clone(),
            seed: self.inner.seed,
        }
    }
}

impl SessionOptions {
    /// Checks these options as [`Session::new`] does, without dialling or
    /// writing anything: `Error::InvalidOptions` naming the first field out
    /// of range (TTL 1 s to 1 day, refresh at least 10 ms and below the
    /// TTL, request timeout, probe interval, backoff).
    pub fn validate(&self) -> Result<(), Error> {
        Ok(self.config(0).validate()?)
    }

    /// The core machine's configuration these options ask for.
    fn config(&self, seed: u64) -> SessionConfig {
        SessionConfig {
            lease: lease_config(
                self.ttl,
                self.refresh,
                self.request_timeout,
                &self.backoff,
                seed,
                self.retry_first_grant,
            ),
            probe_interval: self.probe_interval,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coord_core::lease::ConfigError;
    use coord_core::StartPolicy;

    #[test]
    fn each_setter_sets_its_own_option() {
        let backoff = BackoffConfig::default().with_cap(Duration::from_secs(3));
        let set = SessionOptions::default()
            .with_ttl(Duration::from_secs(6))
            .with_refresh(Duration::from_secs(1))
            .with_request_timeout(Duration::from_secs(2))
            .with_probe_interval(Duration::from_secs(4))
            .with_backoff(backoff.clone())
            .with_seed(9)
            .with_retry_first_grant(true);
        assert_eq!(
            set,
            SessionOptions {
                ttl: Duration::from_secs(6),
                refresh: Some(Duration::from_secs(1)),
                request_timeout: Duration::from_secs(2),
                probe_interval: Duration::from_secs(4),
                backoff,
                seed: Some(9),
                retry_first_grant: true,
            }
        );
    }

    #[test]
    fn options_are_checked_as_new_checks_them() {
        assert!(SessionOptions::default().validate().is_ok());
        let secs = |s| SessionOptions {
            ttl: Duration::from_secs(s),
            ..SessionOptions::default()
        };
        assert!(secs(1).validate().is_ok());
        assert!(secs(86_400).validate().is_ok());
        for bad in [0, 86_401] {
            assert!(matches!(
                secs(bad).validate(),
                Err(Error::InvalidOptions(ConfigError::TtlOutOfRange(_)))
            ));
        }
        let refresh = SessionOptions {
            refresh: Some(Duration::from_secs(10)),
            ..SessionOptions::default()
        };
        assert!(matches!(
            refresh.validate(),
            Err(Error::InvalidOptions(ConfigError::RefreshOutOfRange { .. }))
        ));
        let timeout = SessionOptions {
            request_timeout: Duration::from_millis(1),
            ..SessionOptions::default()
        };
        assert!(matches!(
            timeout.validate(),
            Err(Error::InvalidOptions(
                ConfigError::RequestTimeoutOutOfRange(_)
            ))
        ));
        let probe = SessionOptions {
            probe_interval: Duration::ZERO,
            ..SessionOptions::default()
        };
        assert!(matches!(
            probe.validate(),
            Err(Error::InvalidOptions(ConfigError::ProbeIntervalOutOfRange(
                _
            )))
        ));
    }

    #[test]
    fn the_config_carries_every_option() {
        let opts = SessionOptions {
            ttl: Duration::from_secs(7),
            refresh: None,
            request_timeout: Duration::from_secs(2),
            probe_interval: Duration::from_secs(3),
            backoff: BackoffConfig::plain(),
            seed: Some(9),
            retry_first_grant: true,
        };
        let config = opts.config(42);
        assert_eq!(config.lease.ttl, Duration::from_secs(7));
        assert_eq!(config.lease.refresh, Duration::from_secs(7) / 3);
        assert_eq!(config.lease.request_timeout, Duration::from_secs(2));
        assert_eq!(config.probe_interval, Duration::from_secs(3));
        assert_eq!(config.lease.backoff, BackoffConfig::plain());
        assert_eq!(config.lease.seed, 42);
        assert_eq!(config.lease.start, StartPolicy::Retry);
        let refresh = SessionOptions {
            refresh: Some(Duration::from_secs(1)),
            retry_first_grant: false,
            ..opts
        };
        let config = refresh.config(1);
        assert_eq!(config.lease.refresh, Duration::from_secs(1));
        assert_eq!(config.lease.start, StartPolicy::FailFast);
    }
}
