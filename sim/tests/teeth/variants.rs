//! The broken variants the teeth run: interceptors of the simulated
//! client and option changes that exist only here (nothing in core or
//! driver has a switch for them), each breaking one thing the checker must
//! catch.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use coord::etcd::{Intercept, KeepAliveStream, WatchStream};
use coord::{EtcdApi, EtcdError, Granted, KeepAliveReplies, LeaseId, Revision, WatchEvents};
use coord_core::io::{Listing, RangeRequest, Txn, TxnResponse};
use coord_sim::check::Invariant;
use coord_sim::etcd::client::SimEtcd;
use coord_sim::faults::schedule::{
    Case, ContenderKind, ContenderSpec, Direction, Fault, Generator, Target, TimedFault,
};
use coord_sim::run::runner::run_case_with;
use coord_sim::world::{Intercepting, Variant};

/// Locks `m`, taking over a lock a panicked test poisoned.
fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Claims every revoke succeeded without sending it: stop leaves the key.
#[derive(Clone)]
pub(crate) struct SwallowRevoke;

impl Intercept for SwallowRevoke {
    async fn lease_revoke<A: EtcdApi>(&self, _api: &A, _lease: LeaseId) -> Result<(), EtcdError> {
        Ok(())
    }
}

/// Answers a dead lease's keep-alive with the stream's last live TTL (as
/// a client caching TTLs might), so the host never learns its lease is
/// gone.
#[derive(Clone, Default)]
pub(crate) struct StaleTtl {
    /// Each stream's last live TTL, by stream.
    last: Arc<Mutex<HashMap<u64, i64>>>,
}

impl Intercept for StaleTtl {
    async fn keep_alive_next<R: KeepAliveReplies>(
        &self,
        stream: &KeepAliveStream,
        replies: &mut R,
    ) -> Option<Result<i64, EtcdError>> {
        let reply = replies.next().await;
        let mut last = locked(&self.last);
        let last = last.entry(stream.id).or_insert(0);
        match reply {
            Some(Ok(0)) if *last > 0 => Some(Ok(*last)),
            Some(Ok(ttl)) => {
                *last = ttl;
                Some(Ok(ttl))
            }
            other => other,
        }
    }
}

/// A stream layer that wedges: once any keep-alive stream of a process has
/// broken, that stream and every later one stay open but silent (the
/// etcd-client #54 shape, made permanent).
#[derive(Clone, Default)]
pub(crate) struct SilentStreams {
    wedged: Arc<AtomicBool>,
}

impl Intercept for SilentStreams {
    async fn keep_alive_next<R: KeepAliveReplies>(
        &self,
        _stream: &KeepAliveStream,
        replies: &mut R,
    ) -> Option<Result<i64, EtcdError>> {
        if self.wedged.load(Ordering::Relaxed) {
            return std::future::pending().await;
        }
        match replies.next().await {
            Some(Ok(ttl)) => Some(Ok(ttl)),
            _ => {
                self.wedged.store(true, Ordering::Relaxed);
                std::future::pending().await
            }
        }
    }
}

/// Edits every message of every watch stream with `.0` (as a buggy proxy
/// or filter might); a message for which it returns true is delivered a
/// second late (as a lagging watch would), and every one after it too.
#[derive(Clone)]
pub(crate) struct WatchEdited(Edit);

pub(crate) type Edit = fn(&mut coord::WatchMessage) -> bool;

impl Intercept for WatchEdited {
    async fn watch_next<E: WatchEvents>(
        &self,
        _stream: &WatchStream,
        events: &mut E,
    ) -> Option<Result<coord::WatchMessage, EtcdError>> {
        let mut m = events.next().await?;
        let late = match &mut m {
            Ok(msg) => (self.0)(msg),
            Err(_) => false,
        };
        if late {
            madsim::time::sleep(std::time::Duration::from_secs(1)).await;
        }
        Some(m)
    }
}

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
pub(crate) const ALL_DELETES: Intercepting<WatchEdited> =
    Intercepting(|| WatchEdited(|msg| drop_deletes(msg, |_| true)));

/// The election and lock queues' deletes: waiters and leaders never learn
/// their key was deleted, waiters never see predecessors go, observers
/// keep leaders that left.
pub(crate) const QUEUE_DELETES: Intercepting<WatchEdited> =
    Intercepting(|| WatchEdited(|msg| drop_deletes(msg, queue_key)));

/// Every message that deletes an election or lock key, a second late:
/// successors learn late that they lead.
pub(crate) const LATE_QUEUE_DELETES: Intercepting<WatchEdited> = Intercepting(|| {
    WatchEdited(|msg| {
        msg.events.iter().any(|e| match e {
            coord_core::kv::WatchEvent::Delete { key, .. } => queue_key(key),
            coord_core::kv::WatchEvent::Put { .. } => false,
        })
    })
});

/// Every put of a host key with a space appended to its value (still
/// valid JSON, decoding to the same metadata): only the records' raw
/// values show it.
pub(crate) const VALUES_PADDED: Intercepting<WatchEdited> = Intercepting(|| {
    WatchEdited(|msg| {
        for e in &mut msg.events {
            if let coord_core::kv::WatchEvent::Put { kv, .. } = e {
                if !queue_key(&kv.key) {
                    kv.value.push(b' ');
                }
            }
        }
        false
    })
});

/// Runs a leader's guarded transaction without its guard: a stale
/// leader's write lands after a newer leader's.
#[derive(Clone)]
pub(crate) struct UnguardedTxn;

impl Intercept for UnguardedTxn {
    async fn txn<A: EtcdApi>(&self, api: &A, mut txn: Txn) -> Result<TxnResponse, EtcdError> {
        let guarded = txn.compares.len() == 1
            && txn.success.len() == 1
            && matches!(txn.success[0], coord::TxnOp::Txn(_));
        if guarded {
            txn.compares.clear();
        }
        api.txn(txn).await
    }
}

/// A try whose "nobody queued" compare looks at its own key only: it
/// joins the queue like a campaign (and the core then leaves it again).
#[derive(Clone)]
pub(crate) struct TryFallsThrough;

impl Intercept for TryFallsThrough {
    async fn txn<A: EtcdApi>(&self, api: &A, mut txn: Txn) -> Result<TxnResponse, EtcdError> {
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
        api.txn(txn).await
    }
}

/// Sends every read as serializable (a proxy that answers all reads from
/// whichever member it reaches): the linearizable re-read of a stale
/// listing then comes from the stale member too.
#[derive(Clone)]
pub(crate) struct AllReadsSerializable;

impl Intercept for AllReadsSerializable {
    async fn range<A: EtcdApi>(
        &self,
        api: &A,
        request: RangeRequest,
    ) -> Result<Listing, EtcdError> {
        api.range(RangeRequest {
            consistency: coord_core::io::Consistency::Serializable,
            ..request
        })
        .await
    }
}

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

/// Reports every grant's TTL a second longer than etcd granted (as a
/// client mis-decoding the reply might): hosts register with a TTL etcd
/// never gave.
#[derive(Clone)]
pub(crate) struct LongerTtl;

impl Intercept for LongerTtl {
    async fn lease_grant<A: EtcdApi>(&self, api: &A, ttl_secs: i64) -> Result<Granted, EtcdError> {
        let granted = api.lease_grant(ttl_secs).await?;
        Ok(Granted {
            ttl_secs: granted.ttl_secs + 1,
            ..granted
        })
    }
}

/// Reports every key a transaction reads under an election or lock name
/// with its create revision one higher (as a client mis-decoding the reply
/// might): candidates take a token etcd never gave their key.
#[derive(Clone)]
pub(crate) struct ShiftedTokens;

impl Intercept for ShiftedTokens {
    async fn txn<A: EtcdApi>(&self, api: &A, txn: Txn) -> Result<TxnResponse, EtcdError> {
        let mut response = api.txn(txn).await?;
        for op in &mut response.responses {
            if let coord_core::io::TxnOpResponse::Get(kvs) = op {
                for kv in kvs.iter_mut() {
                    if queue_key(&kv.key) {
                        kv.create_revision = Revision(kv.create_revision.0 + 1);
                    }
                }
            }
        }
        Ok(response)
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

/// A session that keeps a lost lease instead of replacing it: every
/// revoke is swallowed and the lease kept, and the next grant hands that
/// lease back (as a session resuming its lost lease would), so a later
/// campaign adopts the lost campaign's key and token while etcd still
/// holds them.
#[derive(Clone, Default)]
pub(crate) struct RecycledLease {
    /// Each lease granted, with its TTL.
    granted: Arc<Mutex<HashMap<i64, i64>>>,
    /// The lease last "revoked", kept for the next grant.
    kept: Arc<Mutex<Option<Granted>>>,
}

impl Intercept for RecycledLease {
    async fn lease_grant<A: EtcdApi>(&self, api: &A, ttl_secs: i64) -> Result<Granted, EtcdError> {
        let kept = locked(&self.kept).take();
        if let Some(kept) = kept {
            return Ok(kept);
        }
        let granted = api.lease_grant(ttl_secs).await?;
        locked(&self.granted).insert(granted.lease.0, granted.ttl_secs);
        Ok(granted)
    }

    async fn lease_revoke<A: EtcdApi>(&self, _api: &A, lease: LeaseId) -> Result<(), EtcdError> {
        let ttl_secs = locked(&self.granted).get(&lease.0).copied();
        if let Some(ttl_secs) = ttl_secs {
            *locked(&self.kept) = Some(Granted { lease, ttl_secs });
        }
        Ok(())
    }
}

/// A join's retry that finds the campaign's own key (etcd applied the
/// first attempt) reports that key with the response's revision as its
/// create revision (as a candidate taking the header's revision for its
/// token would): with anything written since, its token is not its key's.
#[derive(Clone)]
pub(crate) struct RetriedJoinTakesHeaderRevision;

impl Intercept for RetriedJoinTakesHeaderRevision {
    async fn txn<A: EtcdApi>(&self, api: &A, txn: Txn) -> Result<TxnResponse, EtcdError> {
        let own = match (txn.compares.as_slice(), txn.success.first()) {
            ([c], Some(coord::TxnOp::Put { key, .. }))
                if !c.prefix
                    && c.target == coord_core::io::CompareTarget::CreateRevision(Revision(0)) =>
            {
                Some(key.clone())
            }
            _ => None,
        };
        let mut response = api.txn(txn).await?;
        let Some(own) = own.filter(|_| !response.succeeded) else {
            return Ok(response);
        };
        let header = response.revision;
        for op in &mut response.responses {
            if let coord_core::io::TxnOpResponse::Get(kvs) = op {
                for kv in kvs.iter_mut().filter(|kv| kv.key == own) {
                    kv.create_revision = header;
                }
            }
        }
        Ok(response)
    }
}

/// A listing that lands exactly at the revision its prefix's watch had
/// reached reports the revision before it (as a watcher taking a listing
/// at its own revision for one behind would): the watcher reports a
/// restore that never happened.
#[derive(Clone, Default)]
pub(crate) struct OwnRevisionTakenForBehind {
    /// Per watched key: the revision its watches have shown (each watch's
    /// start less one, its events, its progress notifications).
    seen: Arc<Mutex<HashMap<Vec<u8>, i64>>>,
}

impl Intercept for OwnRevisionTakenForBehind {
    async fn watch_next<E: WatchEvents>(
        &self,
        stream: &WatchStream,
        events: &mut E,
    ) -> Option<Result<coord::WatchMessage, EtcdError>> {
        let m = events.next().await?;
        let mut seen = locked(&self.seen);
        let at = seen.entry(stream.key.clone()).or_insert(0);
        *at = (*at).max(stream.start_revision.0 - 1);
        if let Ok(msg) = &m {
            for e in &msg.events {
                *at = (*at).max(e.revision().0);
            }
            if msg.kind == coord_core::io::MessageKind::Progress {
                *at = (*at).max(msg.revision.0);
            }
        }
        Some(m)
    }

    async fn range<A: EtcdApi>(
        &self,
        api: &A,
        request: RangeRequest,
    ) -> Result<Listing, EtcdError> {
        let fresh = request.revision.0 == 0 && request.get.prefix;
        let key = request.get.key.0.clone();
        let mut listing = api.range(request).await?;
        let seen = locked(&self.seen).get(&key).copied();
        if fresh && seen == Some(listing.revision.0) {
            listing.revision = Revision(listing.revision.0 - 1);
        }
        Ok(listing)
    }
}

/// Reads every later page of a listing at etcd's current revision instead
/// of the first page's, and reports it at the first page's (as a client
/// dropping the pinned revision would): a listing across changes mixes
/// two states of etcd.
#[derive(Clone)]
pub(crate) struct UnpinnedPages;

impl Intercept for UnpinnedPages {
    async fn range<A: EtcdApi>(
        &self,
        api: &A,
        request: RangeRequest,
    ) -> Result<Listing, EtcdError> {
        if request.after.is_none() || request.revision.0 == 0 {
            return api.range(request).await;
        }
        let pinned = request.revision;
        let mut listing = api
            .range(RangeRequest {
                revision: Revision(0),
                ..request
            })
            .await?;
        listing.revision = pinned;
        Ok(listing)
    }
}

/// Counts a keep-alive's acknowledgement from its arrival instead of its
/// keep-alive's send (as a lease deadline taken from the reply's receive
/// time would): each live TTL is stretched by the reply's latency,
/// rounded to whole seconds, so a late acknowledgement keeps the lease
/// believed alive past etcd's expiry.
#[derive(Clone, Default)]
pub(crate) struct AckCountedFromArrival {
    /// Each stream's keep-alives not yet acknowledged: when each was sent.
    sent: Arc<Mutex<HashMap<u64, std::collections::VecDeque<madsim::time::Instant>>>>,
}

impl AckCountedFromArrival {
    fn sending(&self, stream: &KeepAliveStream) {
        locked(&self.sent)
            .entry(stream.id)
            .or_default()
            .push_back(madsim::time::Instant::now());
    }
}

impl Intercept for AckCountedFromArrival {
    async fn lease_keep_alive<A: EtcdApi>(
        &self,
        api: &A,
        stream: &KeepAliveStream,
    ) -> Result<(A::Keeper, A::Replies), EtcdError> {
        self.sending(stream);
        api.lease_keep_alive(stream.lease).await
    }

    async fn keep_alive_send<K: coord::KeepAliveSender>(
        &self,
        stream: &KeepAliveStream,
        keeper: &mut K,
    ) -> Result<(), EtcdError> {
        self.sending(stream);
        keeper.send().await
    }

    async fn keep_alive_next<R: KeepAliveReplies>(
        &self,
        stream: &KeepAliveStream,
        replies: &mut R,
    ) -> Option<Result<i64, EtcdError>> {
        let reply = replies.next().await;
        let sent = locked(&self.sent)
            .get_mut(&stream.id)
            .and_then(std::collections::VecDeque::pop_front);
        match (reply, sent) {
            (Some(Ok(ttl)), Some(sent)) if ttl > 0 => {
                let late = sent.elapsed().as_secs_f64().round();
                Some(Ok(ttl + late as i64))
            }
            (reply, _) => reply,
        }
    }
}
