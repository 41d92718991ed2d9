//! `HostLiveness`: registers a host under a TTL lease and keeps it there.
//!
//! A background task runs the core [`Liveness`] machine on the driver's one
//! run loop: it executes the machine's commands against etcd (each request
//! on its own task, tagged with its `OpId`), always drains keep-alive
//! replies, and sleeps until the machine's next deadline. Only this task
//! reads the clock.
//!
//! # Contract
//!
//! `register` fails fast, writing nothing, on a bad host id (empty, longer than
//! 253 bytes, containing `/`, `..`, whitespace or control characters), bad
//! options (TTL outside 1 s..1 day, refresh not below the TTL) or metadata over
//! 1 MiB. If the first registration fails at etcd (unreachable, refused) it
//! returns `Error::Unreachable` / `Error::Registration` after revoking any lease
//! it had granted; set `retry_first_registration` to keep trying in the
//! background instead. Metadata of your own type goes through
//! `HostLiveness::register_with(client, host_id, &meta, opts)`.
//!
//! Dropping a `HostLiveness` without `stop` is an ungraceful stop: the
//! keep-alive ends and the key disappears when the lease expires, about one TTL
//! later.

use std::time::Duration;

use coord_core::liveness::{
    Event, FleetConfig, Input, Liveness, LivenessConfig, OnLoss, RevokeOutcome,
};
use coord_core::{BackoffConfig, Instant, Key, LeaseId};
use serde::Serialize;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tracing::Instrument;
use tracing::{debug, info, warn};

use crate::error::Error;
use crate::etcd::EtcdApi;
use crate::metadata::{validate_host_id, HostMetadata, MAX_METADATA_LEN};
use crate::runtime::clock::Clock;
use crate::runtime::runner::{run, Adapter};
use crate::runtime::status::{first_lease, lease_config, LeaseReporter, LeaseStatus};

/// go-coord's default key prefix for hosts.
pub const DEFAULT_PREFIX: &str = "/coord/hosts/";

/// Options of [`HostLiveness::register`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LivenessOptions {
    /// Key prefix; the host's key is `<prefix><host id>`. Default
    /// `/coord/hosts/`.
    pub prefix: String,
    /// Lease TTL, 1 s to 1 day, asked in whole seconds (rounded up). etcd
    /// may grant more (its minimum). Default 10 s.
    pub ttl: Duration,
    /// Keep-alive interval, at least 10 ms and below the TTL. Default TTL/3.
    pub refresh: Option<Duration>,
    /// Deadline of each etcd request. Default 5 s. A keep-alive's reply
    /// is awaited this long or a third of the TTL plus 1 s, whichever is
    /// longer (an `etcd grpc-proxy` replies only as it renews the lease).
    pub request_timeout: Duration,
    /// Pacing of heal attempts. Default 100 ms doubling to 30 s, and at
    /// most 1 s between attempts while etcd refuses at once.
    pub backoff: BackoffConfig,
    /// Seed of the backoff jitter. Default: derived from the host id and
    /// the start time, so a fleet's hosts jitter differently.
    pub seed: Option<u64>,
    /// When true, a failing first registration is retried in the
    /// background (like after a loss) and `register` returns at once with
    /// the handle. Default false: `register` fails fast.
    pub retry_first_registration: bool,
    /// What a lost lease becomes. Default [`OnLoss::Resume`]: unless etcd
    /// said the lease is dead, keep it (the key stays; watchers see no
    /// `Down`/`Up` flap). [`OnLoss::Replace`] revokes it and registers
    /// under a new lease, as go-coord does (kept for comparisons).
    pub on_loss: OnLoss,
    /// Time between two hosts' return slots once etcd answers again after
    /// an outage. Default 5 ms: every host under the prefix counts the
    /// fleet and its own rank in it (two count reads within 50 ms of
    /// registering, again 12-24 s later, then a minute apart), and a
    /// lasting failure's retries land on its slot on the wall clock, so a
    /// fleet of N returns one host per 5 ms, over N × 5 ms (at most half
    /// the TTL): 1,000 hosts over 5 s, 10 within 50 ms. `None`: no count;
    /// each host keeps its own jittered pace, and a large fleet returns
    /// within about a second (a herd).
    pub fleet_spacing: Option<Duration>,
}

/// Builder-style setters: the struct is `#[non_exhaustive]`, so that a
/// new option is not a breaking change; start from `LivenessOptions::default()`
/// (or its constructor) and set what differs.
impl LivenessOptions {
    /// These options with [`prefix`](Self::prefix) set.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
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
    /// These options with [`retry_first_registration`](Self::retry_first_registration) set.
    pub fn with_retry_first_registration(mut self, retry_first_registration: bool) -> Self {
        self.retry_first_registration = retry_first_registration;
        self
    }
    /// These options with [`on_loss`](Self::on_loss) set.
    pub fn with_on_loss(mut self, on_loss: OnLoss) -> Self {
        self.on_loss = on_loss;
        self
    }
    /// These options with [`fleet_spacing`](Self::fleet_spacing) set.
    pub fn with_fleet_spacing(mut self, fleet_spacing: Option<Duration>) -> Self {
        self.fleet_spacing = fleet_spacing;
        self
    }
}

impl Default for LivenessOptions {
    fn default() -> Self {
        LivenessOptions {
            prefix: DEFAULT_PREFIX.to_string(),
            ttl: Duration::from_secs(10),
            refresh: None,
            request_timeout: Duration::from_secs(5),
            backoff: BackoffConfig::default(),
            seed: None,
            retry_first_registration: false,
            on_loss: OnLoss::Resume,
            fleet_spacing: Some(Duration::from_millis(5)),
        }
    }
}

/// The liveness of a registered host, as [`HostLiveness::state`] reports it.
pub type LivenessStatus = LeaseStatus;

/// A registered host. Dropping it without [`stop`](Self::stop) ends the
/// keep-alive and leaves the lease to expire (an ungraceful stop: the key
/// disappears within one TTL).
#[derive(Debug)]
pub struct HostLiveness {
    key: String,
    requests: mpsc::UnboundedSender<Stop>,
    status: watch::Receiver<LivenessStatus>,
    events: broadcast::Sender<Event>,
}

/// A request to stop (the only request a host's loop takes).
struct Stop;

impl HostLiveness {
    /// Registers `meta` at `<prefix><meta.host_uuid>` under a new lease and
    /// keeps it alive in the background.
    ///
    /// Fails fast, writing nothing, on an invalid host id, options or
    /// oversized metadata. Unless `retry_first_registration` is set, a
    /// grant, put or keep-alive failure of the first registration returns
    /// an error after revoking any lease it granted. `started_at_unix_ns`
    /// is set to now when 0.
    ///
    /// Cancel safety: not cancel-safe. A registration dropped part-way is an
    /// ungraceful stop: a lease it was granted (and the key, if written)
    /// expires within one TTL.
    pub async fn register<A: EtcdApi>(
        client: A,
        mut meta: HostMetadata,
        opts: LivenessOptions,
    ) -> Result<HostLiveness, Error> {
        if meta.started_at_unix_ns == 0 {
            meta.started_at_unix_ns = unix_now_ns();
        }
        let host_id = meta.host_uuid.clone();
        Self::register_with(client, &host_id, &meta, opts).await
    }

    /// Like [`register`](Self::register) with metadata of the caller's own
    /// type, serialised as JSON, at `<prefix><host_id>`.
    ///
    /// Cancel safety: as [`register`](Self::register).
    pub async fn register_with<A: EtcdApi, M: Serialize + ?Sized>(
        client: A,
        host_id: &str,
        meta: &M,
        opts: LivenessOptions,
    ) -> Result<HostLiveness, Error> {
        validate_host_id(host_id)?;
        opts.check_prefix()?;
        let value = serde_json::to_vec(meta).map_err(|e| Error::Encode(crate::Cause::new(e)))?;
        if value.len() > MAX_METADATA_LEN {
            return Err(Error::MetadataTooLarge {
                size: value.len(),
                max: MAX_METADATA_LEN,
            });
        }
        let key = format!("{}{}", opts.prefix, host_id);
        let seed = opts.seed.unwrap_or_else(|| default_seed(host_id));
        let clock = Clock::start();
        let config = opts.config(
            Key(key.clone().into_bytes()),
            value,
            seed,
            clock.wall_at_epoch(),
        );
        let machine = Liveness::new(config)?;
        let (requests, requests_rx) = mpsc::unbounded_channel();
        let (status_tx, status) = watch::channel(LivenessStatus::Registering);
        let (events, _) = broadcast::channel(64);
        let (ready_tx, ready_rx) = oneshot::channel();
        let adapter = LivenessAdapter {
            reporter: LeaseReporter::new("liveness", clock, status_tx, ready_tx),
            slot: None,
            events: events.clone(),
        };
        let span = tracing::info_span!("liveness", key = %key, lease = tracing::field::Empty);
        tokio::spawn(run(client, machine, adapter, clock, requests_rx).instrument(span));
        let handle = HostLiveness {
            key,
            requests,
            status,
            events,
        };
        if opts.retry_first_registration {
            return Ok(handle);
        }
        let lease = first_lease(ready_rx).await?;
        info!(key = %handle.key, %lease, "registered");
        Ok(handle)
    }

    /// Stops: revokes the lease (the key is gone at once) and ends the
    /// background task. Idempotent: later calls return the first outcome.
    /// Returns `RevokeNotConfirmed` if etcd could not confirm the revoke
    /// within the request timeout; the key then expires within one TTL.
    ///
    /// Cancel safety: cancel-safe. Once polled, the stop goes on in the
    /// background; a later `stop` waits for the same outcome.
    pub async fn stop(&self) -> Result<(), Error> {
        let _ = self.requests.send(Stop);
        let mut status = self.status.clone();
        let done = status
            .wait_for(|s| matches!(s, LivenessStatus::Closed { .. } | LivenessStatus::Abandoned))
            .await
            .map(|s| s.clone());
        match done {
            Ok(LivenessStatus::Closed {
                revoke: RevokeOutcome::NotConfirmed(lease),
            }) => Err(Error::RevokeNotConfirmed { lease }),
            Ok(LivenessStatus::Closed { .. }) => Ok(()),
            _ => Err(Error::TaskGone),
        }
    }

    /// The lease the key is attached to while registered; `None` while
    /// registering, healing or stopped. After a heal onto a new lease it
    /// names the new lease.
    pub fn lease_id(&self) -> Option<LeaseId> {
        match &*self.status.borrow() {
            LivenessStatus::Registered { lease } => Some(*lease),
            _ => None,
        }
    }

    /// The host's key, `<prefix><host id>`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// A receiver of the liveness state; it changes on every transition.
    pub fn state(&self) -> watch::Receiver<LivenessStatus> {
        self.status.clone()
    }

    /// A receiver of every liveness event from now on (lost, healing,
    /// reregistered, ...). A receiver that falls 64 events behind skips
    /// the oldest (`RecvError::Lagged`); the state above is never lost.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }
}

fn unix_now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The jitter seed of a host given none: [`seed_of`] the host id at the
/// current wall-clock time, so it differs per host and per run.
pub(crate) fn default_seed(host_id: &str) -> u64 {
    seed_of(host_id, unix_now_ns())
}

/// FNV-1a of the host id mixed with a start time: distinct per host and
/// per start, so a fleet restarted together still jitters apart.
fn seed_of(host_id: &str, started_ns: i64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in host_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^ started_ns.unsigned_abs()
}

/// The liveness loop's side of the handle: the state and events it
/// publishes, and the answer `register` waits for.
struct LivenessAdapter {
    reporter: LeaseReporter,
    events: broadcast::Sender<Event>,
    /// The fleet slot last logged: a census that changes it is logged.
    slot: Option<coord_core::Slot>,
}

impl Adapter<Liveness> for LivenessAdapter {
    type Request = Stop;

    fn start(&mut self, now: Instant, machine: &mut Liveness) {
        if let Err(e) = machine.handle(now, Input::Start) {
            warn!(error = %e, "liveness refused to start");
        }
    }

    fn request(&mut self, now: Instant, machine: &mut Liveness, Stop: Stop) {
        if let Err(e) = machine.handle(now, Input::Close) {
            warn!(error = %e, "liveness refused to stop");
        }
    }

    fn publish(&mut self, _now: Instant, event: Event) {
        self.reporter.event(&event);
        let _ = self.events.send(event);
    }

    fn drained(&mut self, machine: &Liveness) {
        self.reporter.state(machine.state());
        self.reporter.expiry(machine.expires_at());
        let slot = machine.slot();
        if slot != self.slot {
            self.slot = slot;
            debug!(?slot, "fleet census: the return slot changed");
        }
    }

    fn orphaned(&mut self, _machine: &Liveness) {
        self.reporter.abandoned();
    }
}

impl LivenessOptions {
    /// Checks these options as [`HostLiveness::register`] does, without
    /// dialling or writing anything: `Error::InvalidPrefix` for an empty
    /// prefix or one with control characters, `Error::InvalidOptions`
    /// naming the first field out of range (TTL 1 s to 1 day, refresh at
    /// least 10 ms and below the TTL, request timeout, backoff).
    pub fn validate(&self) -> Result<(), Error> {
        self.check_prefix()?;
        let key = Key(self.prefix.clone().into_bytes());
        Ok(self.config(key, Vec::new(), 0, 0).validate()?)
    }

    fn check_prefix(&self) -> Result<(), Error> {
        if self.prefix.is_empty() || self.prefix.chars().any(char::is_control) {
            return Err(Error::InvalidPrefix(self.prefix.clone()));
        }
        Ok(())
    }

    /// The core machine's configuration these options ask for.
    fn config(&self, key: Key, value: Vec<u8>, seed: u64, wall_at_epoch: u64) -> LivenessConfig {
        let fleet = self.fleet_spacing.map(|spacing| FleetConfig {
            spacing,
            ..FleetConfig::new(Key(self.prefix.clone().into_bytes()), wall_at_epoch)
        });
        LivenessConfig {
            key,
            value,
            lease: lease_config(
                self.ttl,
                self.refresh,
                self.request_timeout,
                &self.backoff,
                seed,
                self.retry_first_registration,
            ),
            on_loss: self.on_loss,
            fleet,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coord_core::lease::ConfigError;
    use coord_core::StartPolicy;
    use std::collections::BTreeSet;

    #[test]
    fn each_setter_sets_its_own_option() {
        let backoff = BackoffConfig::default().with_cap(Duration::from_secs(3));
        let set = LivenessOptions::default()
            .with_prefix("/fleet/")
            .with_ttl(Duration::from_secs(4))
            .with_refresh(Duration::from_secs(1))
            .with_request_timeout(Duration::from_secs(2))
            .with_backoff(backoff.clone())
            .with_seed(9)
            .with_retry_first_registration(true)
            .with_on_loss(OnLoss::Replace)
            .with_fleet_spacing(None);
        assert_eq!(
            set,
            LivenessOptions {
                prefix: "/fleet/".to_string(),
                ttl: Duration::from_secs(4),
                refresh: Some(Duration::from_secs(1)),
                request_timeout: Duration::from_secs(2),
                backoff,
                seed: Some(9),
                retry_first_registration: true,
                on_loss: OnLoss::Replace,
                fleet_spacing: None,
            }
        );
    }

    #[test]
    fn options_are_checked_as_register_checks_them() {
        assert!(LivenessOptions::default().validate().is_ok());
        for prefix in ["", "/hosts\n/"] {
            let opts = LivenessOptions {
                prefix: prefix.to_string(),
                ..LivenessOptions::default()
            };
            assert!(matches!(opts.validate(), Err(Error::InvalidPrefix(p)) if p == prefix));
        }
        let ttl = LivenessOptions {
            ttl: Duration::ZERO,
            ..LivenessOptions::default()
        };
        assert!(matches!(
            ttl.validate(),
            Err(Error::InvalidOptions(ConfigError::TtlOutOfRange(_)))
        ));
        let refresh = LivenessOptions {
            refresh: Some(Duration::from_millis(5)),
            ..LivenessOptions::default()
        };
        assert!(matches!(
            refresh.validate(),
            Err(Error::InvalidOptions(ConfigError::RefreshOutOfRange { .. }))
        ));
    }

    #[test]
    fn the_host_part_of_a_seed_is_fnv1a_of_the_host_id() {
        // FNV-1a 64 test vectors (Fowler, Noll, Vo).
        assert_eq!(seed_of("", 0), 0xcbf2_9ce4_8422_2325);
        assert_eq!(seed_of("a", 0), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(seed_of("foobar", 0), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn seeds_differ_between_hosts_and_between_starts() {
        let start = 1_764_600_000_000_000_000;
        let hosts: BTreeSet<u64> = (0..1000)
            .map(|i| seed_of(&format!("host-{i}"), start))
            .collect();
        assert_eq!(hosts.len(), 1000, "two hosts drew one seed");
        let starts: BTreeSet<u64> = (0..1000).map(|t| seed_of("host-7", start + t)).collect();
        assert_eq!(starts.len(), 1000, "two starts of a host drew one seed");
        assert_ne!(default_seed("host-1"), default_seed("host-2"));
    }

    #[test]
    fn the_config_carries_every_option() {
        let opts = LivenessOptions {
            prefix: "/p/".into(),
            ttl: Duration::from_secs(6),
            refresh: None,
            request_timeout: Duration::from_secs(2),
            backoff: BackoffConfig::plain(),
            seed: None,
            retry_first_registration: true,
            on_loss: OnLoss::Replace,
            fleet_spacing: Some(Duration::from_millis(7)),
        };
        let config = opts.config(Key(b"/p/h".to_vec()), b"{}".to_vec(), 5, 1_234);
        assert_eq!(config.key, Key(b"/p/h".to_vec()));
        assert_eq!(config.value, b"{}".to_vec());
        assert_eq!(config.lease.ttl, Duration::from_secs(6));
        assert_eq!(config.lease.refresh, Duration::from_secs(2));
        assert_eq!(config.lease.request_timeout, Duration::from_secs(2));
        assert_eq!(config.lease.backoff, BackoffConfig::plain());
        assert_eq!(config.lease.seed, 5);
        assert_eq!(config.lease.start, StartPolicy::Retry);
        assert_eq!(config.on_loss, OnLoss::Replace);
        let fleet = config.fleet.expect("a fleet spacing makes a census");
        assert_eq!(fleet.prefix, Key(b"/p/".to_vec()));
        assert_eq!(fleet.spacing, Duration::from_millis(7));
        assert_eq!(fleet.wall_at_epoch, 1_234);
        let config = LivenessOptions {
            refresh: Some(Duration::from_secs(1)),
            retry_first_registration: false,
            on_loss: OnLoss::Resume,
            fleet_spacing: None,
            ..opts
        }
        .config(Key(b"k".to_vec()), Vec::new(), 0, 0);
        assert_eq!(config.fleet, None);
        assert_eq!(config.lease.refresh, Duration::from_secs(1));
        assert_eq!(config.lease.start, StartPolicy::FailFast);
        assert_eq!(config.on_loss, OnLoss::Resume);
    }
}
