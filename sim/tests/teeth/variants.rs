//! The broken variants the teeth run: `EtcdApi` wrappers and option
//! changes that exist only here (nothing in core or driver has a switch for
//! them), each breaking one thing the checker must catch.

use coord::Revision;
use coord::{EtcdApi, EtcdError, Granted, KeepAliveReplies, LeaseId};
use coord_core::io::{Listing, RangeRequest, Txn, TxnResponse};
use coord_sim::check::Invariant;
use coord_sim::etcd::client::{SimEtcd, SimKeeper, SimReplies, SimWatchControl, SimWatchEvents};
use coord_sim::faults::schedule::{
    Case, ContenderKind, ContenderSpec, Direction, Fault, Generator, Target, TimedFault,
};
use coord_sim::run::runner::run_case_with;
use coord_sim::world::Variant;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The simulated client inside a wrapper.
pub(crate) trait Inner {
    fn inner(&self) -> &SimEtcd;
}

/// Delegates the named calls, which a variant does not override, to the
/// simulated client.
macro_rules! delegate {
    (unary) => {
        async fn lease_grant(&self, ttl_secs: i64) -> Result<Granted, EtcdError> {
            self.inner().lease_grant(ttl_secs).await
        }
        async fn txn(&self, txn: Txn) -> Result<TxnResponse, EtcdError> {
            self.inner().txn(txn).await
        }
        async fn range(&self, request: RangeRequest) -> Result<Listing, EtcdError> {
            self.inner().range(request).await
        }
    };
    (revoke) => {
        async fn lease_revoke(&self, lease: LeaseId) -> Result<(), EtcdError> {
            self.inner().lease_revoke(lease).await
        }
    };
    (keep_alive) => {
        async fn lease_keep_alive(
            &self,
            lease: LeaseId,
        ) -> Result<(SimKeeper, SimReplies), EtcdError> {
            self.inner().lease_keep_alive(lease).await
        }
    };
    (watch) => {
        async fn watch(
            &self,
            key: Vec<u8>,
            prefix: bool,
            start: Revision,
        ) -> Result<(SimWatchControl, SimWatchEvents), EtcdError> {
            self.inner().watch(key, prefix, start).await
        }
    };
}

/// A broken variant `$wrap` whose API `$api` wraps the simulated client;
/// the variant's own `EtcdApi` impl says what it breaks.
macro_rules! newtype_wrapper {
    ($wrap:ident, $api:ident) => {
        #[derive(Clone)]
        pub(crate) struct $wrap;
        #[derive(Clone)]
        pub(crate) struct $api(SimEtcd);

        impl Variant for $wrap {
            type Api = $api;
            fn wrap(&self, etcd: SimEtcd) -> $api {
                $api(etcd)
            }
        }

        impl Inner for $api {
            fn inner(&self) -> &SimEtcd {
                &self.0
            }
        }
    };
}

// Claims every revoke succeeded without sending it: stop leaves the key.
newtype_wrapper!(SwallowRevoke, SwallowRevokeApi);

impl EtcdApi for SwallowRevokeApi {
    type Keeper = SimKeeper;
    type Replies = SimReplies;
    type WatchControl = SimWatchControl;
    type WatchEvents = SimWatchEvents;
    delegate!(unary);
    delegate!(keep_alive);
    delegate!(watch);
    async fn lease_revoke(&self, _lease: LeaseId) -> Result<(), EtcdError> {
        Ok(())
    }
}

// Answers a dead lease's keep-alive with the last live TTL (as a client
// caching TTLs might), so the host never learns its lease is gone.
newtype_wrapper!(StaleTtl, StaleTtlApi);

pub(crate) struct StaleReplies {
    inner: SimReplies,
    last: i64,
}

impl KeepAliveReplies for StaleReplies {
    async fn next(&mut self) -> Option<Result<i64, EtcdError>> {
        match self.inner.next().await {
            Some(Ok(0)) if self.last > 0 => Some(Ok(self.last)),
            Some(Ok(ttl)) => {
                self.last = ttl;
                Some(Ok(ttl))
            }
            other => other,
        }
    }
}

impl EtcdApi for StaleTtlApi {
    type Keeper = SimKeeper;
    type Replies = StaleReplies;
    type WatchControl = SimWatchControl;
    type WatchEvents = SimWatchEvents;
    delegate!(unary);
    delegate!(revoke);
    delegate!(watch);
    async fn lease_keep_alive(
        &self,
        lease: LeaseId,
    ) -> Result<(SimKeeper, StaleReplies), EtcdError> {
        let (k, r) = self.0.lease_keep_alive(lease).await?;
        Ok((k, StaleReplies { inner: r, last: 0 }))
    }
}

/// A stream layer that wedges: once any keep-alive stream of a process has
/// broken, that stream and every later one stay open but silent (the
/// etcd-client #54 shape, made permanent).
#[derive(Clone)]
pub(crate) struct SilentStreams;

#[derive(Clone)]
pub(crate) struct SilentStreamsApi {
    inner: SimEtcd,
    wedged: Arc<AtomicBool>,
}

pub(crate) struct SilentReplies {
    inner: SimReplies,
    wedged: Arc<AtomicBool>,
}

impl Variant for SilentStreams {
    type Api = SilentStreamsApi;
    fn wrap(&self, etcd: SimEtcd) -> SilentStreamsApi {
        SilentStreamsApi {
            inner: etcd,
            wedged: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl KeepAliveReplies for SilentReplies {
    async fn next(&mut self) -> Option<Result<i64, EtcdError>> {
        if self.wedged.load(Ordering::Relaxed) {
            return std::future::pending().await;
        }
        match self.inner.next().await {
            Some(Ok(ttl)) => Some(Ok(ttl)),
            _ => {
                self.wedged.store(true, Ordering::Relaxed);
                std::future::pending().await
            }
        }
    }
}

impl Inner for SilentStreamsApi {
    fn inner(&self) -> &SimEtcd {
        &self.inner
    }
}

impl EtcdApi for SilentStreamsApi {
    type Keeper = SimKeeper;
    type Replies = SilentReplies;
    type WatchControl = SimWatchControl;
    type WatchEvents = SimWatchEvents;
    delegate!(unary);
    delegate!(revoke);
    delegate!(watch);
    async fn lease_keep_alive(
        &self,
        lease: LeaseId,
    ) -> Result<(SimKeeper, SilentReplies), EtcdError> {
        let (k, r) = self.inner.lease_keep_alive(lease).await?;
        Ok((
            k,
            SilentReplies {
                inner: r,
                wedged: Arc::clone(&self.wedged),
            },
        ))
    }
}

/// Edits every message of every watch stream with `.0` (as a buggy proxy
/// or filter might); a message for which it returns true is delivered a
/// second late (as a lagging watch would), and every one after it too.
#[derive(Clone)]
pub(crate) struct WatchEdited(Edit);

pub(crate) type Edit = fn(&mut coord::WatchMessage) -> bool;

#[derive(Clone)]
pub(crate) struct WatchEditedApi(SimEtcd, Edit);

pub(crate) struct EditedEvents(SimWatchEvents, Edit);

/// Drops the delete events whose key `drop` selects (on time).
pub(crate) fn drop_deletes(msg: &mut coord::WatchMessage, drop: fn(&coord::Key) -> bool) -> bool {
    msg.events.retain(|e| match e {
        coord_core::kv::WatchEvent::Delete { key, .. } => !drop(key),
        coord_core::kv::WatchEvent::Put { .. } => true,
    });
    false
}

/// An election or lock key (not a host's).
pub(crate) fn queue_key(key: &coord::Key) -> bool {
    !key.as_bytes().starts_with(coord::DEFAULT_PREFIX.as_bytes())
}

/// Every delete: host watchers never see a host go down.
pub(crate) const ALL_DELETES: WatchEdited = WatchEdited(|msg| drop_deletes(msg, |_| true));

/// The election and lock queues' deletes: waiters and leaders never learn
/// their key was deleted, waiters never see predecessors go, observers
/// keep leaders that left.
pub(crate) const QUEUE_DELETES: WatchEdited = WatchEdited(|msg| drop_deletes(msg, queue_key));

/// Every message that deletes an election or lock key, a second late:
/// successors learn late that they lead.
pub(crate) const LATE_QUEUE_DELETES: WatchEdited = WatchEdited(|msg| {
    msg.events.iter().any(|e| match e {
        coord_core::kv::WatchEvent::Delete { key, .. } => queue_key(key),
        coord_core::kv::WatchEvent::Put { .. } => false,
    })
});

/// Every put of a host key with a space appended to its value (still
/// valid JSON, decoding to the same metadata): only the records' raw
/// values show it.
pub(crate) const VALUES_PADDED: WatchEdited = WatchEdited(|msg| {
    for e in &mut msg.events {
        if let coord_core::kv::WatchEvent::Put { kv, .. } = e {
            if !queue_key(&kv.key) {
                kv.value.push(b' ');
            }
        }
    }
    false
});

impl Variant for WatchEdited {
    type Api = WatchEditedApi;
    fn wrap(&self, etcd: SimEtcd) -> WatchEditedApi {
        WatchEditedApi(etcd, self.0)
    }
}

impl coord::WatchEvents for EditedEvents {
    async fn next(&mut self) -> Option<Result<coord::WatchMessage, EtcdError>> {
        let mut m = self.0.next().await?;
        let late = match &mut m {
            Ok(msg) => (self.1)(msg),
            Err(_) => false,
        };
        if late {
            madsim::time::sleep(std::time::Duration::from_secs(1)).await;
        }
        Some(m)
    }
}

impl Inner for WatchEditedApi {
    fn inner(&self) -> &SimEtcd {
        &self.0
    }
}

impl EtcdApi for WatchEditedApi {
    type Keeper = SimKeeper;
    type Replies = SimReplies;
    type WatchControl = SimWatchControl;
    type WatchEvents = EditedEvents;
    delegate!(unary);
    delegate!(revoke);
    delegate!(keep_alive);
    async fn watch(
        &self,
        key: Vec<u8>,
        prefix: bool,
        start: Revision,
    ) -> Result<(SimWatchControl, EditedEvents), EtcdError> {
        let (c, e) = self.0.watch(key, prefix, start).await?;
        Ok((c, EditedEvents(e, self.1)))
    }
}

/// A wrapper whose only change is what it does to transactions or to
/// ranges.
macro_rules! unary_wrapper {
    ($wrap:ident, $api:ident, txn |$txn:ident| $body:expr) => {
        unary_wrapper!(@ $wrap, $api, |$txn| $body, |request| request);
    };
    ($wrap:ident, $api:ident, range |$request:ident| $body:expr) => {
        unary_wrapper!(@ $wrap, $api, |txn| txn, |$request| $body);
    };
    (@ $wrap:ident, $api:ident, |$txn:ident| $txn_body:expr, |$request:ident| $range_body:expr) => {
        newtype_wrapper!($wrap, $api);

        impl EtcdApi for $api {
            type Keeper = SimKeeper;
            type Replies = SimReplies;
            type WatchControl = SimWatchControl;
            type WatchEvents = SimWatchEvents;
            delegate!(revoke);
            delegate!(keep_alive);
            delegate!(watch);
            async fn lease_grant(&self, ttl_secs: i64) -> Result<Granted, EtcdError> {
                self.0.lease_grant(ttl_secs).await
            }
            async fn range(&self, $request: RangeRequest) -> Result<Listing, EtcdError> {
                self.0.range($range_body).await
            }
            async fn txn(&self, $txn: Txn) -> Result<TxnResponse, EtcdError> {
                self.0.txn($txn_body).await
            }
        }
    };
}

// Runs a leader's guarded transaction without its guard: a stale leader's
// write lands after a newer leader's.
unary_wrapper!(
    UnguardedTxn,
    UnguardedTxnApi,
    txn | txn | {
        let guarded = txn.compares.len() == 1
            && txn.success.len() == 1
            && matches!(txn.success[0], coord::TxnOp::Txn(_));
        let mut txn = txn;
        if guarded {
            txn.compares.clear();
        }
        txn
    }
);

// A try whose "nobody queued" compare looks at its own key only: it joins
// the queue like a campaign (and the core then leaves it again).
unary_wrapper!(
    TryFallsThrough,
    TryFallsThroughApi,
    txn | txn | {
        let mut txn = txn;
        let own_key = match txn.success.first() {
            Some(coord::TxnOp::Put { key, .. }) => Some(key.clone()),
            _ => None,
        };
        if let (Some(c), Some(key)) = (txn.compares.first_mut(), own_key) {
            if c.prefix {
                c.prefix = false;
                c.key = key;
            }
        }
        txn
    }
);

// Sends every read as serializable (a proxy that answers all reads from
// whichever member it reaches): the linearizable re-read of a stale
// listing then comes from the stale member too.
unary_wrapper!(
    AllReadsSerializable,
    AllReadsSerializableApi,
    range | request | {
        RangeRequest {
            consistency: coord_core::io::Consistency::Serializable,
            ..request
        }
    }
);

/// Every host of the fleet draws the same backoff jitter (one seed for
/// all), as a fleet without jitter would, and counts no fleet (no slots,
/// which would spread it by rank on their own): after a fleet-wide loss
/// they retry in step.
#[derive(Clone)]
pub(crate) struct Unjittered;

impl Variant for Unjittered {
    type Api = SimEtcd;
    fn wrap(&self, etcd: SimEtcd) -> SimEtcd {
        etcd
    }
    fn host_options(&self, nominal: coord::LivenessOptions) -> coord::LivenessOptions {
        nominal.with_seed(7).with_fleet_spacing(None)
    }
}

/// One heal or detection path of every simulated process running twice as
/// slow as configured. The checker's bounds stay derived from the
/// configured options, as they would for a bug that slows the path.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Slowed {
    /// Every backoff delay and cut twice as long (initial, caps).
    Backoff,
    /// The prober probing half as often, and waiting twice as long for
    /// an answer.
    Probe,
    /// Keep-alives half as often (a revoke noticed later).
    Refresh,
    /// Host watchers probing a quiet stream half as often (a stalled
    /// stream noticed later).
    WatcherProbe,
    /// Host watchers waiting twice as long for a request (a probe of a
    /// stalled stream given up later).
    WatcherRequest,
    /// Every backoff delay and cut of the host watchers twice as long.
    WatcherBackoff,
    /// Every backoff delay and cut of the election and lock processes'
    /// sessions twice as long.
    SessionBackoff,
    /// Sessions' keep-alives half as often.
    SessionRefresh,
}

impl Variant for Slowed {
    type Api = SimEtcd;
    fn wrap(&self, etcd: SimEtcd) -> SimEtcd {
        match self {
            Slowed::Probe => {
                let nominal = coord::ProbeConfig::default();
                etcd.with_probe(
                    coord::ProbeConfig::default()
                        .with_interval(nominal.interval * 2)
                        .with_request_timeout(nominal.request_timeout * 2)
                        .with_refused_interval(nominal.refused_interval * 2),
                )
            }
            _ => etcd,
        }
    }
    fn host_options(&self, nominal: coord::LivenessOptions) -> coord::LivenessOptions {
        match self {
            // The hosts count no fleet: a counted host retries a lasting
            // failure on its slot and is cut to it when etcd is found
            // back, so its own backoff shows in few runs, and hosts are
            // counted within a second of registering. Uncounted, every
            // retry is paced by the backoff, as before the census.
            Slowed::Backoff => {
                let backoff = twice_as_slow(&nominal.backoff);
                nominal.with_backoff(backoff).with_fleet_spacing(None)
            }
            // The watchers' backoff sought as found (generator 7, hosts
            // uncounted): the hosts' census reads shift every later event.
            Slowed::WatcherBackoff => nominal.with_fleet_spacing(None),
            Slowed::Refresh => {
                let value = nominal.ttl * 2 / 3;
                nominal.with_refresh(value)
            }
            _ => nominal,
        }
    }
    fn watcher_options(&self, nominal: coord::WatcherOptions) -> coord::WatcherOptions {
        match self {
            Slowed::WatcherProbe => {
                let value = nominal.probe_interval * 2;
                nominal.with_probe_interval(value)
            }
            Slowed::WatcherRequest => {
                let value = nominal.request_timeout * 2;
                nominal.with_request_timeout(value)
            }
            Slowed::WatcherBackoff => {
                let value = twice_as_slow(&nominal.backoff);
                nominal.with_backoff(value)
            }
            _ => nominal,
        }
    }
    fn session_options(&self, nominal: coord::SessionOptions) -> coord::SessionOptions {
        match self {
            Slowed::SessionBackoff => {
                let value = twice_as_slow(&nominal.backoff);
                nominal.with_backoff(value)
            }
            Slowed::SessionRefresh => {
                let value = nominal.ttl * 2 / 3;
                nominal.with_refresh(value)
            }
            _ => nominal,
        }
    }
}

/// Every delay and cap of `nominal` twice as long.
pub(crate) fn twice_as_slow(nominal: &coord::BackoffConfig) -> coord::BackoffConfig {
    nominal
        .clone()
        .with_initial(nominal.initial * 2)
        .with_cap(nominal.cap * 2)
        .with_fast_cap(nominal.fast_cap * 2)
}

/// Host watchers' streams stalled by a lost message, over and over: a
/// crashed host comes back (a put) while both watchers are cut off from
/// etcd's replies for 600 ms, so each watcher's stream silently loses that
/// event and must notice by its own probe (quiet for the probe interval,
/// then unanswered for a request timeout). Eight times, at phases that
/// drift against the watchers' probe cycle.
pub(crate) fn stalled_streams_case() -> Case {
    let mut faults = Vec::new();
    for k in 0..8u64 {
        let at = 20_000 + k * 23_300;
        faults.push(TimedFault {
            at_ms: at,
            fault: Fault::Crash {
                target: Target::Host(usize::try_from(k % 3).unwrap_or(0)),
                down_ms: 1_000,
            },
        });
        for watcher in 0..2 {
            faults.push(TimedFault {
                at_ms: at + 900,
                fault: Fault::Partition {
                    target: Target::Watcher(watcher),
                    direction: Direction::FromEtcd,
                    ms: 600,
                },
            });
        }
    }
    Case {
        seed: 11,
        ttls: vec![2; 3],
        faults,
        phase1_ms: 220_000,
        contenders: Vec::new(),
        pool_names: 0,
        generator: Generator::V6,
    }
}

/// Runs the pinned `case` with `slowed` and asserts one of `invariants`
/// failed.
pub(crate) fn assert_caught_on(case: &Case, what: &str, slowed: Slowed, invariants: &[Invariant]) {
    let r = run_case_with(case, slowed);
    let caught = r
        .verdict
        .violations
        .iter()
        .find(|v| invariants.contains(&v.invariant));
    assert!(
        caught.is_some(),
        "{slowed:?} twice as slow went unnoticed on {what}: {:?}",
        r.verdict.violations
    );
    println!("{slowed:?} on {what}: {caught:?}");
}

// Reports every grant's TTL a second longer than etcd granted (as a
// client mis-decoding the reply might): hosts register with a TTL etcd
// never gave.
newtype_wrapper!(LongerTtl, LongerTtlApi);

impl EtcdApi for LongerTtlApi {
    type Keeper = SimKeeper;
    type Replies = SimReplies;
    type WatchControl = SimWatchControl;
    type WatchEvents = SimWatchEvents;
    delegate!(revoke);
    delegate!(keep_alive);
    delegate!(watch);
    async fn lease_grant(&self, ttl_secs: i64) -> Result<Granted, EtcdError> {
        let granted = self.0.lease_grant(ttl_secs).await?;
        Ok(Granted {
            ttl_secs: granted.ttl_secs + 1,
            ..granted
        })
    }
    async fn txn(&self, txn: Txn) -> Result<TxnResponse, EtcdError> {
        self.0.txn(txn).await
    }
    async fn range(&self, request: RangeRequest) -> Result<Listing, EtcdError> {
        self.0.range(request).await
    }
}

// Reports every key a transaction reads under an election or lock name
// with its create revision one higher (as a client mis-decoding the reply
// might): candidates take a token etcd never gave their key.
newtype_wrapper!(ShiftedTokens, ShiftedTokensApi);

impl EtcdApi for ShiftedTokensApi {
    type Keeper = SimKeeper;
    type Replies = SimReplies;
    type WatchControl = SimWatchControl;
    type WatchEvents = SimWatchEvents;
    delegate!(revoke);
    delegate!(keep_alive);
    delegate!(watch);
    async fn lease_grant(&self, ttl_secs: i64) -> Result<Granted, EtcdError> {
        self.0.lease_grant(ttl_secs).await
    }
    async fn txn(&self, txn: Txn) -> Result<TxnResponse, EtcdError> {
        let mut response = self.0.txn(txn).await?;
        for op in &mut response.responses {
            if let coord_core::io::TxnOpResponse::Get(kvs) = op {
                for kv in kvs.iter_mut() {
                    if !kv
                        .key
                        .as_bytes()
                        .starts_with(coord::DEFAULT_PREFIX.as_bytes())
                    {
                        kv.create_revision = Revision(kv.create_revision.0 + 1);
                    }
                }
            }
        }
        Ok(response)
    }
    async fn range(&self, request: RangeRequest) -> Result<Listing, EtcdError> {
        self.0.range(request).await
    }
}

/// Election and lock processes whose sessions lose their lease over and
/// over: every 17.3 s (drifting against their keep-alive interval) a
/// name's leader has its lease revoked from outside, a process is paused
/// for 4.5 s and another cut off from etcd for 6 s (each longer than the
/// TTL), in turn, and etcd loses its leader for 1.5-3.9 s.
pub(crate) fn session_faults_case() -> Case {
    let contenders = vec![
        ContenderSpec {
            kind: ContenderKind::Candidate,
            ttl: 3,
        },
        ContenderSpec {
            kind: ContenderKind::Candidate,
            ttl: 3,
        },
        ContenderSpec {
            kind: ContenderKind::Locker,
            ttl: 3,
        },
        ContenderSpec {
            kind: ContenderKind::Pool,
            ttl: 3,
        },
    ];
    let mut faults = Vec::new();
    for k in 0..7u64 {
        let at = 15_000 + k * 17_300;
        let i = usize::try_from(k).unwrap_or(0);
        faults.push(TimedFault {
            at_ms: at,
            fault: Fault::RevokeLeaderLease { name: i % 4 },
        });
        faults.push(TimedFault {
            at_ms: at + 6_000,
            fault: Fault::Partition {
                target: Target::Contender(i % 4),
                direction: Direction::Both,
                ms: 6_000,
            },
        });
        faults.push(TimedFault {
            at_ms: at + 11_000,
            fault: Fault::LeaderChange {
                unavailable_ms: 1_500 + k * 400,
            },
        });
        faults.push(TimedFault {
            at_ms: at + 4_000,
            fault: Fault::Pause {
                target: Target::Contender((i + 2) % 4),
                ms: 4_500,
            },
        });
    }
    Case {
        seed: 13,
        ttls: vec![2; 2],
        faults,
        phase1_ms: 140_000,
        contenders,
        pool_names: 2,
        generator: Generator::V6,
    }
}

/// Election and lock processes (TTL 2 s) through etcd leader changes
/// longer than their TTL: every session loses its lease and retries
/// against an etcd that refuses at once, so its backoff climbs to the fast
/// cap, and the retry due when etcd answers again is the backoff's. The
/// outages last 2.5-9.5 s, against 2 s and 4 s cycles of backoff.
pub(crate) fn leader_changes_case() -> Case {
    let contenders = [
        ContenderKind::Candidate,
        ContenderKind::Candidate,
        ContenderKind::Locker,
        ContenderKind::Pool,
    ]
    .into_iter()
    .map(|kind| ContenderSpec { kind, ttl: 2 })
    .collect();
    let faults = (0..12u64)
        .map(|k| TimedFault {
            at_ms: 10_000 + k * 14_000,
            fault: Fault::LeaderChange {
                unavailable_ms: 2_500 + (k * 1_700) % 7_000,
            },
        })
        .collect();
    Case {
        seed: 17,
        ttls: vec![2; 2],
        faults,
        phase1_ms: 180_000,
        contenders,
        pool_names: 2,
        generator: Generator::V6,
    }
}
