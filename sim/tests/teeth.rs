//! The simulator has teeth: deliberately broken `EtcdApi` wrappers (which
//! exist only here; nothing in core or driver has a switch for them) must
//! make the checker report violations within a bounded number of seeds.

#![cfg(madsim)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use coord::Revision;
use coord::{EtcdApi, EtcdError, Granted, KeepAliveReplies, LeaseId};
use coord_core::io::{Listing, RangeRequest, Txn, TxnResponse};
use coord_sim::check::Invariant;
use coord_sim::etcd::client::{SimEtcd, SimKeeper, SimReplies, SimWatchControl, SimWatchEvents};
use coord_sim::faults::schedule::{
    Case, ContenderKind, ContenderSpec, Direction, Fault, Generator, Shape, TimedFault,
};
use coord_sim::run::runner::run_case_with;
use coord_sim::world::Variant;

/// Runs seeds 1..=max with `wrap`; returns the first seed whose verdict
/// has a violation of `invariant`.
fn first_catch<W: Variant>(wrap: W, invariant: Invariant, max: u64) -> Option<u64> {
    first_catch_any(wrap, &[invariant], max)
}

/// Runs seeds 1..=max of `shape` with `wrap`; the first seed with a
/// violation of any of `invariants`.
fn first_catch_in<W: Variant>(
    wrap: W,
    invariants: &[Invariant],
    max: u64,
    shape: Shape,
) -> Option<u64> {
    first_catch_of(wrap, invariants, max, shape, Generator::default())
}

/// As [`first_catch_in`], over the cases of `generator`.
fn first_catch_of<W: Variant>(
    wrap: W,
    invariants: &[Invariant],
    max: u64,
    shape: Shape,
    generator: Generator,
) -> Option<u64> {
    (1..=max).find(|seed| {
        let r = run_case_with(&Case::generate_with(*seed, shape, generator), wrap.clone());
        let caught = r
            .verdict
            .violations
            .iter()
            .find(|v| invariants.contains(&v.invariant));
        if let Some(v) = caught {
            println!(
                "seed {seed}: {:?} at {} ms: {}",
                v.invariant, v.at_ms, v.detail
            );
        }
        caught.is_some()
    })
}

/// The simulated client inside a wrapper.
trait Inner {
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
        struct $wrap;
        #[derive(Clone)]
        struct $api(SimEtcd);

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

#[test]
fn a_swallowed_revoke_on_stop_is_caught_as_a_ghost() {
    let seed = first_catch(SwallowRevoke, Invariant::NoGhost, 5);
    assert!(seed.is_some(), "the checker missed keys left after stop");
}

// Answers a dead lease's keep-alive with the last live TTL (as a client
// caching TTLs might), so the host never learns its lease is gone.
newtype_wrapper!(StaleTtl, StaleTtlApi);
struct StaleReplies {
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

#[test]
fn a_stale_ttl_for_a_dead_lease_is_caught_as_a_lease_mismatch() {
    let seed = first_catch(StaleTtl, Invariant::LeaseMatches, 40);
    assert!(
        seed.is_some(),
        "the checker missed hosts claiming an expired lease"
    );
}

/// A stream layer that wedges: once any keep-alive stream of a process has
/// broken, that stream and every later one stay open but silent (the
/// etcd-client #54 shape, made permanent).
#[derive(Clone)]
struct SilentStreams;
#[derive(Clone)]
struct SilentStreamsApi {
    inner: SimEtcd,
    wedged: Arc<AtomicBool>,
}
struct SilentReplies {
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

#[test]
fn a_wedged_silent_stream_is_caught_as_a_host_that_never_comes_back() {
    let seed = first_catch(SilentStreams, Invariant::BackAfterHeal, 10);
    assert!(
        seed.is_some(),
        "the checker missed hosts that could not re-register"
    );
}

#[test]
fn the_real_client_passes_the_seeds_the_broken_ones_fail() {
    for seed in 1..=10 {
        let r = coord_sim::run::runner::run_case(&Case::generate(seed, Shape::default()));
        assert!(r.passed(), "seed {seed}: {:?}", r.verdict.violations);
    }
}

/// Edits every message of every watch stream with `.0` (as a buggy proxy
/// or filter might); a message for which it returns true is delivered a
/// second late (as a lagging watch would), and every one after it too.
#[derive(Clone)]
struct WatchEdited(Edit);
type Edit = fn(&mut coord::WatchMessage) -> bool;
#[derive(Clone)]
struct WatchEditedApi(SimEtcd, Edit);
struct EditedEvents(SimWatchEvents, Edit);

/// Drops the delete events whose key `drop` selects (on time).
fn drop_deletes(msg: &mut coord::WatchMessage, drop: fn(&coord::Key) -> bool) -> bool {
    msg.events.retain(|e| match e {
        coord_core::kv::WatchEvent::Delete { key, .. } => !drop(key),
        coord_core::kv::WatchEvent::Put { .. } => true,
    });
    false
}

/// An election or lock key (not a host's).
fn queue_key(key: &coord::Key) -> bool {
    !key.as_bytes().starts_with(coord::DEFAULT_PREFIX.as_bytes())
}

/// Every delete: host watchers never see a host go down.
const ALL_DELETES: WatchEdited = WatchEdited(|msg| drop_deletes(msg, |_| true));

/// The election and lock queues' deletes: waiters and leaders never learn
/// their key was deleted, waiters never see predecessors go, observers
/// keep leaders that left.
const QUEUE_DELETES: WatchEdited = WatchEdited(|msg| drop_deletes(msg, queue_key));

/// Every message that deletes an election or lock key, a second late:
/// successors learn late that they lead.
const LATE_QUEUE_DELETES: WatchEdited = WatchEdited(|msg| {
    msg.events.iter().any(|e| match e {
        coord_core::kv::WatchEvent::Delete { key, .. } => queue_key(key),
        coord_core::kv::WatchEvent::Put { .. } => false,
    })
});

/// Every put of a host key with a space appended to its value (still
/// valid JSON, decoding to the same metadata): only the records' raw
/// values show it.
const VALUES_PADDED: WatchEdited = WatchEdited(|msg| {
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

#[test]
fn a_watch_that_drops_deletes_is_caught_as_an_incomplete_watcher() {
    let seed = first_catch(ALL_DELETES, Invariant::WatcherComplete, 5);
    assert!(
        seed.is_some(),
        "the checker missed watchers that never saw a Down"
    );
}

/// Runs seeds 1..=max with `wrap`; the first seed with a violation of any
/// of `invariants`.
fn first_catch_any<W: Variant>(wrap: W, invariants: &[Invariant], max: u64) -> Option<u64> {
    first_catch_in(wrap, invariants, max, Shape::default())
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

#[test]
fn an_unguarded_leader_transaction_is_caught_as_a_fencing_violation() {
    // Generator 8 with the census within 50 ms of registering: the first
    // catch is seed 237 (97 under generator 6).
    let seed = first_catch(UnguardedTxn, Invariant::Fenced, 400);
    assert!(seed.is_some(), "the checker missed a stale leader's write");
}

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

#[test]
fn a_try_that_falls_through_to_a_campaign_is_caught() {
    let seed = first_catch(TryFallsThrough, Invariant::TryWritesNothing, 20);
    assert!(
        seed.is_some(),
        "the checker missed a try that wrote its key"
    );
}

#[test]
fn candidates_that_never_see_deletes_are_caught() {
    let seed = first_catch_any(
        QUEUE_DELETES,
        &[
            Invariant::BeliefEnds,
            Invariant::NoZombie,
            Invariant::LeaderAfterHeal,
        ],
        20,
    );
    assert!(
        seed.is_some(),
        "the checker missed leaders and waiters blind to deletes"
    );
}

#[test]
fn a_session_that_keeps_a_dead_lease_is_caught() {
    // The stale-TTL client also makes sessions (a pool's among them) keep
    // handing out a lease etcd revoked.
    let seed = first_catch(StaleTtl, Invariant::SessionLeaseLives, 40);
    assert!(
        seed.is_some(),
        "the checker missed a session reporting a dead lease"
    );
}

#[test]
fn an_observer_blind_to_deletes_is_caught() {
    let seed = first_catch_any(
        QUEUE_DELETES,
        &[Invariant::ObserverSound, Invariant::ObserverConverges],
        10,
    );
    assert!(
        seed.is_some(),
        "the checker missed observers reporting stale leaders"
    );
}

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

#[test]
fn a_stale_member_answering_every_read_is_caught_as_a_view_going_back() {
    let seed = first_catch(AllReadsSerializable, Invariant::WatcherSound, 200);
    assert!(
        seed.is_some(),
        "the checker missed views taken back by a stale member"
    );
}

#[test]
fn a_watch_that_misreports_values_is_caught_by_the_record_checks() {
    let seed = first_catch(VALUES_PADDED, Invariant::WatcherRecords, 5);
    assert!(
        seed.is_some(),
        "the checker missed watchers reporting values etcd never wrote"
    );
}

/// Every host of the fleet draws the same backoff jitter (one seed for
/// all), as a fleet without jitter would, and counts no fleet (no slots,
/// which would spread it by rank on their own): after a fleet-wide loss
/// they retry in step.
#[derive(Clone)]
struct Unjittered;

impl Variant for Unjittered {
    type Api = SimEtcd;
    fn wrap(&self, etcd: SimEtcd) -> SimEtcd {
        etcd
    }
    fn host_options(&self, nominal: coord::LivenessOptions) -> coord::LivenessOptions {
        nominal.with_seed(7).with_fleet_spacing(None)
    }
}

/// A herd is caught at 1,000 hosts: a fleet that draws no jitter of its
/// own retries in step after a fleet-wide loss.
#[test]
fn a_fleet_without_jitter_is_caught_as_a_herd() {
    let shape = Shape {
        max_hosts: 1000,
        ..Shape::default()
    };
    let seed = first_catch_in(Unjittered, &[Invariant::HerdSpread], 20, shape);
    assert!(
        seed.is_some(),
        "the checker missed a fleet retrying in step"
    );
}

/// One heal or detection path of every simulated process running twice as
/// slow as configured. The checker's bounds stay derived from the
/// configured options, as they would for a bug that slows the path.
#[derive(Clone, Copy, Debug)]
enum Slowed {
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
fn twice_as_slow(nominal: &coord::BackoffConfig) -> coord::BackoffConfig {
    nominal
        .clone()
        .with_initial(nominal.initial * 2)
        .with_cap(nominal.cap * 2)
        .with_fast_cap(nominal.fast_cap * 2)
}

/// Each path run twice as slow fails a seed within 300, with the heal
/// over its path's bound (or, for the keep-alive interval, a lease
/// claimed after its revoke was due to be noticed). The hosts' request
/// timeout bounds no heal: when etcd answers again, the prober gives up
/// requests sent into the silence, so no host waits one out.
#[test]
fn every_heal_path_run_twice_as_slow_is_caught() {
    for (slowed, invariants) in [
        (Slowed::Backoff, &[Invariant::HealOnTime][..]),
        (Slowed::Probe, &[Invariant::HealOnTime][..]),
        (
            Slowed::Refresh,
            &[Invariant::HealOnTime, Invariant::LeaseMatches][..],
        ),
    ] {
        let seed = first_catch_any(slowed, invariants, 300);
        assert!(seed.is_some(), "{slowed:?} twice as slow went unnoticed");
        println!("{slowed:?}: caught by seed {seed:?}");
    }
}

/// Host watchers' streams stalled by a lost message, over and over: a
/// crashed host comes back (a put) while both watchers are cut off from
/// etcd's replies for 600 ms, so each watcher's stream silently loses that
/// event and must notice by its own probe (quiet for the probe interval,
/// then unanswered for a request timeout). Eight times, at phases that
/// drift against the watchers' probe cycle.
fn stalled_streams_case() -> Case {
    let mut faults = Vec::new();
    for k in 0..8u64 {
        let at = 20_000 + k * 23_300;
        faults.push(TimedFault {
            at_ms: at,
            fault: Fault::Crash {
                host: usize::try_from(k % 3).unwrap_or(0),
                down_ms: 1_000,
            },
        });
        for watcher in 0..2 {
            faults.push(TimedFault {
                at_ms: at + 900,
                fault: Fault::PartitionWatcher {
                    watcher,
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

#[test]
fn the_real_watchers_notice_every_stalled_stream_in_time() {
    let r = coord_sim::run::runner::run_case(&stalled_streams_case());
    assert!(r.passed(), "{:?}", r.verdict.violations);
}

/// Each host watcher path run twice as slow fails: a view still
/// incomplete past its path's bound, or a stale view while its status
/// says it is watching. The probe interval and the backoff within 800
/// generated seeds; the request timeout, which only the probe of a
/// stalled stream waits out (when etcd answers again, the prober gives up
/// requests sent into the silence), on [`stalled_streams_case`]. The
/// backoff is sought among generator 7's cases, whose wiped etcd answers
/// "no leader" while down: from generator 8 on it refuses, so the prober
/// finds it back within 50 ms and cuts the watchers' waits before a
/// doubled backoff shows.
#[test]
fn every_watcher_path_run_twice_as_slow_is_caught() {
    let invariants = [Invariant::WatcherComplete, Invariant::WatcherSaysStale];
    for (slowed, generator) in [
        (Slowed::WatcherProbe, Generator::V8),
        (Slowed::WatcherBackoff, Generator::V7),
    ] {
        let seed = first_catch_of(slowed, &invariants, 800, Shape::default(), generator);
        assert!(seed.is_some(), "{slowed:?} twice as slow went unnoticed");
        println!("{slowed:?}: caught by seed {seed:?}");
    }
    for slowed in [Slowed::WatcherProbe, Slowed::WatcherRequest] {
        assert_caught_on(
            &stalled_streams_case(),
            "stalled streams",
            slowed,
            &invariants,
        );
    }
}

/// Runs the pinned `case` with `slowed` and asserts one of `invariants`
/// failed.
fn assert_caught_on(case: &Case, what: &str, slowed: Slowed, invariants: &[Invariant]) {
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

#[test]
fn a_grant_misreporting_its_ttl_is_caught_by_the_record_checks() {
    let seed = first_catch(LongerTtl, Invariant::LivenessRecords, 5);
    assert!(
        seed.is_some(),
        "the checker missed a TTL etcd never granted"
    );
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

#[test]
fn a_misread_fencing_token_is_caught_by_the_record_checks() {
    let seed = first_catch(ShiftedTokens, Invariant::ElectionRecords, 20);
    assert!(
        seed.is_some(),
        "the checker missed a token etcd never gave the key"
    );
}

/// Successors that learn a second late that they lead (failover and
/// handover slowed) are caught by the succession bound.
#[test]
fn successors_that_learn_late_are_caught() {
    let seed = first_catch(LATE_QUEUE_DELETES, Invariant::PromptSuccession, 20);
    assert!(
        seed.is_some(),
        "the checker missed successors elected a second late"
    );
}

/// Election and lock processes whose sessions lose their lease over and
/// over: every 17.3 s (drifting against their keep-alive interval) a
/// name's leader has its lease revoked from outside, a process is paused
/// for 4.5 s and another cut off from etcd for 6 s (each longer than the
/// TTL), in turn, and etcd loses its leader for 1.5-3.9 s.
fn session_faults_case() -> Case {
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
            fault: Fault::ContenderPartition {
                contender: i % 4,
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
            fault: Fault::ContenderPause {
                contender: (i + 2) % 4,
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
fn leader_changes_case() -> Case {
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

/// The real sessions heal within their paths' bounds on
/// [`session_faults_case`], and the checker times their heals.
#[test]
fn the_real_sessions_heal_in_time() {
    for case in [session_faults_case(), leader_changes_case()] {
        let r = coord_sim::run::runner::run_case(&case);
        assert!(r.passed(), "{:?}", r.verdict.violations);
        let heals = r.verdict.session_heal_by_kind.len();
        assert!(heals >= 20, "only {heals} session heals timed");
    }
}

/// Each session heal path run twice as slow fails: the election and lock
/// processes' keep-alive interval within 300 seeds (a session still
/// reporting a lease etcd revoked after a keep-alive interval, or one
/// registered again past its path's bound); their backoff on
/// [`leader_changes_case`], where the retry due when etcd answers again is
/// the backoff's (across random seeds it is hard to see: most of a
/// session's heal is the prober's interval and round trips, which the
/// backoff does not slow). A run of that case shows it once at most (one
/// retry landing past its bound), in about 3 of 4 of its seeds, and which
/// seeds moves with any change in the run loop's scheduling: the first
/// of 10 seeds must catch it.
#[test]
fn every_session_heal_path_run_twice_as_slow_is_caught() {
    let invariants = [Invariant::SessionHealOnTime, Invariant::SessionLeaseLives];
    let seed = first_catch_any(Slowed::SessionRefresh, &invariants, 300);
    assert!(
        seed.is_some(),
        "SessionRefresh twice as slow went unnoticed"
    );
    println!("SessionRefresh: caught by seed {seed:?}");
    let seed = (1..=10).find(|seed| {
        let case = Case {
            seed: *seed,
            ..leader_changes_case()
        };
        let r = run_case_with(&case, Slowed::SessionBackoff);
        r.verdict
            .violations
            .iter()
            .any(|v| invariants.contains(&v.invariant))
    });
    assert!(
        seed.is_some(),
        "SessionBackoff twice as slow went unnoticed on leader changes (seeds 1-10)"
    );
    println!("SessionBackoff on leader changes: caught by seed {seed:?}");
}

/// Observers that see a leader's key deleted a second late report the
/// change of leader late: caught by the observers' promptness check.
#[test]
fn observers_that_learn_late_are_caught() {
    let seed = first_catch(LATE_QUEUE_DELETES, Invariant::ObserverPrompt, 20);
    assert!(
        seed.is_some(),
        "the checker missed observers reporting a second late"
    );
}
