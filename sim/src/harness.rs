//! Runs one [`Case`]: a simulated etcd node, one node per host running the
//! real `HostLiveness` (core + driver) over [`SimEtcd`], [`WATCHERS`] nodes
//! running the real `HostWatcher`, the fault injector, and the observer
//! that records the [`History`].
//!
//! Phase 1 injects the case's faults. Phase 2 heals everything and waits
//! for the longer of [`heal_bound`] and [`watcher_bound`], plus a settled
//! stretch; then every host is stopped and the run goes on for two TTLs so
//! that a key reappearing after stop (or a watcher missing the Downs) would
//! be seen.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use coord::{
    EtcdApi, HostEvent, HostLiveness, HostMetadata, HostWatcher, LivenessOptions, LivenessStatus,
    WatcherOptions,
};
use madsim::net::Endpoint;
use madsim::runtime::Handle;
use madsim::task::NodeId;
use madsim::time::{sleep, sleep_until, Instant};
use tokio::sync::{broadcast, watch};

use crate::client::SimEtcd;
use crate::history::{
    host_index, Condition, History, HostSample, HostView, Recorder, SeenRecord, WatcherEventKind,
    WatcherEventRecord, WatcherSample, What, SAMPLE_EVERY,
};
pub(crate) use crate::process::Proc;
use crate::schedule::{Case, Fault, Generator, WATCHERS};
use crate::server::{self, lock, now_ms, SharedEtcd};

/// Turns the simulated client into the `EtcdApi` the hosts use. The real
/// runs use [`Real`]; the simulator's own tests wrap it in deliberately
/// broken variants to show the checker catches them.
pub trait Wrap: Clone + Send + Sync + 'static {
    /// The API handed to `HostLiveness` and `HostWatcher`.
    type Api: EtcdApi;
    /// Wraps one process's client.
    fn wrap(&self, etcd: SimEtcd) -> Self::Api;
    /// The options a host really runs with, given the nominal ones (which
    /// the checker derives its bounds from). Unchanged but in the
    /// simulator's own tests, where a variant runs slower than configured.
    fn host_options(&self, nominal: LivenessOptions) -> LivenessOptions {
        nominal
    }
    /// The options a host watcher really runs with, given the nominal
    /// ones (as [`host_options`](Wrap::host_options) for hosts).
    fn watcher_options(&self, nominal: WatcherOptions) -> WatcherOptions {
        nominal
    }
    /// The options an election or lock process's session really runs
    /// with, given the nominal ones.
    fn session_options(&self, nominal: coord::SessionOptions) -> coord::SessionOptions {
        nominal
    }
}

/// No wrapping: the real driver on the simulated etcd.
#[derive(Debug, Clone, Copy, Default)]
pub struct Real;

impl Wrap for Real {
    type Api = SimEtcd;
    fn wrap(&self, etcd: SimEtcd) -> SimEtcd {
        etcd
    }
}

// Virtual addresses inside the simulator (documentation range, RFC 5737):
// madsim routes them between simulated nodes; no real socket is opened.
const ETCD_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const ETCD_PORT: u16 = 2379;

/// Hosts 0-89 as always (so runs keep their histories); larger fleets (up
/// to 1,000 hosts and more) continue in 10.1.0.0/16.
fn host_ip(i: usize) -> IpAddr {
    if let Some(last) = u8::try_from(10 + i).ok().filter(|l| *l < 100) {
        return IpAddr::V4(Ipv4Addr::new(192, 0, 2, last));
    }
    let n = i - 90;
    let third = u8::try_from(n / 250).unwrap_or(u8::MAX);
    let fourth = u8::try_from(n % 250 + 1).unwrap_or(u8::MAX);
    IpAddr::V4(Ipv4Addr::new(10, 1, third, fourth))
}

fn watcher_ip(i: usize) -> IpAddr {
    let last = u8::try_from(200 + i).unwrap_or(u8::MAX);
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
}

/// The key of host `i`.
pub fn host_key(i: usize) -> String {
    format!("{}host-{i}", coord::DEFAULT_PREFIX)
}

/// The driver options every simulated host uses (coord's defaults, but the
/// TTL, a seed per process, and retrying the first registration).
pub fn host_options(ttl_secs: u64, seed: u64) -> LivenessOptions {
    LivenessOptions::default()
        .with_ttl(Duration::from_secs(ttl_secs))
        .with_seed(seed)
        .with_retry_first_registration(true)
}

/// The options every simulated watcher uses: coord's defaults, a seed,
/// retrying the first snapshot, and pages of 1-3 keys, so every listing of
/// a fleet is read in several pages (and compactions land between them).
pub fn watcher_options(seed: u64) -> WatcherOptions {
    WatcherOptions::default()
        .with_seed(seed)
        .with_retry_first_snapshot(true)
        .with_page_size(1 + u32::try_from(seed % 3).unwrap_or(0))
}

/// How long after the heal every host must be registered again: one
/// request deadline (a request lost at the heal), the backoff cap (jitter
/// included: equal jitter never exceeds the ceiling), and 4 s for the round
/// trips of a registration.
pub fn heal_bound() -> Duration {
    let o = LivenessOptions::default();
    o.request_timeout + o.backoff.cap + Duration::from_secs(4)
}

/// How long after the heal (or after its last disturbance) a watcher's
/// view must equal etcd's: a silent stream is noticed within the probe
/// interval plus a request timeout, the retry waits at most the backoff
/// cap, and 4 s covers the round trips of a resume or re-list.
pub fn watcher_bound() -> Duration {
    let o = WatcherOptions::default();
    o.probe_interval + o.request_timeout + o.backoff.cap + Duration::from_secs(4)
}

/// How long a watcher's view may be stale while its `status()` still says
/// `Watching`: a silent stream is noticed within the probe interval plus a
/// request timeout; 1 s more for delivery.
pub fn says_stale_bound() -> Duration {
    let o = WatcherOptions::default();
    o.probe_interval + o.request_timeout + Duration::from_secs(1)
}

/// How long after the heal every name with a live contender must have a
/// leader: the longest TTL (a dead leader's key expires) plus expiry slack,
/// then a silent queue watch noticed within the probe interval plus a
/// request timeout, the retry waiting at most the backoff cap, and 4 s for
/// the round trips of a join.
pub fn election_bound(case: &Case) -> Duration {
    let o = coord::SessionOptions::default();
    let ttl = case
        .contenders
        .iter()
        .map(|c| c.ttl)
        .max()
        .unwrap_or(2)
        .max(2);
    Duration::from_secs(ttl)
        + EXPIRY_SLACK
        + o.probe_interval
        + o.request_timeout
        + o.backoff.cap
        + Duration::from_secs(4)
}

/// Extra time after a host's TTL before its crashed key must be gone: the
/// lessor checks every 500 ms, plus 1 s of slack.
pub const EXPIRY_SLACK: Duration = Duration::from_millis(1500);

/// How long the run stays healed before the hosts are stopped, beyond the
/// bounds, so the checker sees a settled stretch.
pub const SETTLED: Duration = Duration::from_secs(10);

struct Slot {
    proc: Proc,
    status: Option<watch::Receiver<LivenessStatus>>,
    incarnation: u64,
    stop: watch::Sender<bool>,
    /// Told to stop; never restarted after that.
    stopped: bool,
}

struct WatcherSlot {
    proc: Proc,
    view: Option<Arc<HostView>>,
    status: Option<tokio::sync::watch::Receiver<coord::ViewStatus>>,
    /// Its consumer takes no event before this virtual ms.
    stall_until: u64,
}

#[derive(Default)]
pub(crate) struct Fleet {
    hosts: Vec<Slot>,
    watchers: Vec<WatcherSlot>,
    pub(crate) contenders: Vec<crate::contenders::ContenderSlot>,
}

pub(crate) type Shared = Arc<Mutex<Fleet>>;

pub(crate) fn fleet(s: &Shared) -> MutexGuard<'_, Fleet> {
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Clone)]
pub(crate) struct World {
    pub(crate) start: Instant,
    pub(crate) etcd: SharedEtcd,
    pub(crate) etcd_node: NodeId,
    etcd_ep: Endpoint,
    pub(crate) fleet: Shared,
    recorder: Recorder,
    log: crate::client::ClientLog,
}

impl World {
    pub(crate) fn now(&self) -> u64 {
        now_ms(self.start)
    }

    pub(crate) fn record(&self, what: What) {
        self.recorder.record(self.now(), what);
    }

    pub(crate) async fn client(&self, id: u64) -> Option<SimEtcd> {
        let server = SocketAddr::from((ETCD_IP, ETCD_PORT));
        SimEtcd::connect(server, id, self.log.clone()).await.ok()
    }
}

/// Runs `case` inside the current madsim runtime and returns its history.
pub async fn run<W: Wrap>(case: &Case, wrap: W) -> History {
    let handle = Handle::current();
    let start = Instant::now();
    let etcd = server::new_state();
    let etcd_node = handle
        .create_node()
        .name("etcd")
        .ip(IpAddr::V4(ETCD_IP))
        .build();
    let etcd_ep = match etcd_node
        .spawn(Endpoint::bind(SocketAddr::from((ETCD_IP, ETCD_PORT))))
        .await
    {
        Ok(Ok(ep)) => ep,
        _ => return History::default(),
    };
    etcd_node.spawn(server::serve(etcd.clone(), etcd_ep.clone(), start));
    etcd_node.spawn(server::lessor(etcd.clone(), start));
    etcd_node.spawn(server::flush_watches(etcd.clone(), etcd_ep.clone()));

    let world = World {
        start,
        etcd,
        etcd_node: etcd_node.id(),
        etcd_ep,
        fleet: Arc::default(),
        recorder: Recorder::default(),
        log: crate::client::ClientLog::new(start),
    };
    for i in 0..WATCHERS {
        let w = world.clone();
        let wrap = wrap.clone();
        let seed = case.seed;
        let names = case.names();
        let generator = case.generator;
        // The slot exists before the node, whose init reads it.
        fleet(&world.fleet).watchers.push(WatcherSlot {
            proc: Proc::new(etcd_node.id()),
            view: None,
            status: None,
            stall_until: 0,
        });
        let node = handle
            .create_node()
            .name(format!("watcher-{i}"))
            .ip(watcher_ip(i))
            .init(move || {
                let opts = (i, seed, generator);
                watcher_agent(w.clone(), wrap.clone(), opts, names.clone())
            })
            .build();
        fleet(&world.fleet).watchers[i].proc.node = node.id();
    }
    for (i, ttl) in case.ttls.iter().copied().enumerate() {
        let (stop, _) = watch::channel(false);
        fleet(&world.fleet).hosts.push(Slot {
            proc: Proc::new(etcd_node.id()),
            status: None,
            incarnation: 0,
            stop,
            stopped: false,
        });
        let w = world.clone();
        let wrap = wrap.clone();
        let seed = case.seed;
        let node = handle
            .create_node()
            .name(format!("host-{i}"))
            .ip(host_ip(i))
            .init(move || agent(w.clone(), wrap.clone(), i, ttl, seed))
            .build();
        fleet(&world.fleet).hosts[i].proc.node = node.id();
    }
    crate::contenders::spawn_all(&world, &wrap, case);
    let sampler = madsim::task::spawn(sample_forever(world.clone()));

    for tf in &case.faults {
        sleep_until(start + Duration::from_millis(tf.at_ms)).await;
        inject(&world, case, &tf.fault);
    }
    sleep_until(start + Duration::from_millis(case.phase1_ms)).await;
    heal_all(&world);
    world.record(What::HealAll);
    let mut settle = heal_bound().max(watcher_bound()) + SETTLED;
    if !case.contenders.is_empty() {
        // Room for the election checks' windows after their bound.
        settle = settle.max(election_bound(case) + 2 * SETTLED);
    }
    sleep(settle).await;

    world.record(What::StopAll);
    for slot in fleet(&world.fleet).hosts.iter_mut() {
        slot.stopped = true;
        slot.stop.send_replace(true);
    }
    crate::contenders::stop_all(&world);
    let max_ttl = case.ttls.iter().copied().max().unwrap_or(2).max(2);
    sleep(Duration::from_secs(2 * max_ttl) + Duration::from_secs(10)).await;
    sampler.abort();
    let anomalies = world
        .log
        .anomalies
        .load(std::sync::atomic::Ordering::Relaxed);
    world.record(What::SimulatorAnomalies(anomalies));
    let (times, grants, changes, puts, lease_log) = {
        let st = lock(&world.etcd);
        let prefix = coord::DEFAULT_PREFIX.as_bytes();
        let changes = st
            .key_changes
            .iter()
            .filter_map(|(at, key, rev, present)| {
                let host = std::str::from_utf8(key.strip_prefix(prefix)?).ok()?;
                Some((*at, host_index(host)?, *rev, *present))
            })
            .collect();
        let puts: Vec<(u64, usize, SeenRecord)> = st
            .host_puts
            .iter()
            .filter_map(|p| {
                let host = std::str::from_utf8(p.key.strip_prefix(prefix)?).ok()?;
                Some((p.at_ms, host_index(host)?, p.record.clone()))
            })
            .collect();
        (
            st.revision_times.clone(),
            st.grant_times.clone(),
            changes,
            puts,
            st.lease_log.clone(),
        )
    };
    let heal_requests = world
        .log
        .heal_sends
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    world.record(What::HostPuts(puts));
    world.record(What::RevisionTimes(times));
    if !case.contenders.is_empty() {
        let log = lock(&world.etcd).other_changes.clone();
        world.record(What::ElectionLog(log));
    }
    world.record(What::LeaseLog(lease_log));
    world.record(What::GrantTimes(grants));
    world.record(What::HealRequests(heal_requests));
    world.record(What::KeyChanges(changes));
    let history = world.recorder.snapshot();
    // Tear the simulation down: the nodes' tasks and init closures hold the
    // world (and madsim handles) in cycles that dropping the runtime alone
    // does not free.
    let nodes: Vec<NodeId> = {
        let f = fleet(&world.fleet);
        f.hosts
            .iter()
            .map(|s| s.proc.node)
            .chain(f.watchers.iter().map(|s| s.proc.node))
            .chain(f.contenders.iter().map(|s| s.proc.node))
            .collect()
    };
    for node in nodes {
        handle.kill(node);
    }
    handle.kill(world.etcd_node);
    history
}

/// One host process: registers, records every event, stops when told.
async fn agent<W: Wrap>(w: World, wrap: W, i: usize, ttl: u64, seed: u64) {
    let (incarnation, mut stop) = {
        let mut f = fleet(&w.fleet);
        f.hosts[i].incarnation += 1;
        (f.hosts[i].incarnation, f.hosts[i].stop.subscribe())
    };
    let client = (u64::try_from(i).unwrap_or(0) << 32) | incarnation;
    let Some(etcd) = w.client(client).await else {
        return;
    };
    let meta = HostMetadata {
        host_uuid: format!("host-{i}"),
        hostname: format!("host-{i}.sim"),
        hypervisor: "madsim".into(),
        version: String::new(),
        started_at_unix_ns: i64::try_from(incarnation).unwrap_or(1),
        extra: serde_json::Map::new(),
    };
    let process_seed = seed ^ client.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let opts = wrap.host_options(host_options(ttl, process_seed));
    let host = match HostLiveness::register(wrap.wrap(etcd), meta, opts).await {
        Ok(h) => h,
        Err(e) => {
            w.record(What::Stopped {
                host: i,
                result: Err(e),
            });
            return;
        }
    };
    let mut events = host.subscribe();
    let status = host.state();
    fleet(&w.fleet).hosts[i].status = Some(status.clone());
    loop {
        tokio::select! {
            biased;
            ev = events.recv() => match ev {
                Ok(event) => {
                    w.record(What::Event { host: i, incarnation, event });
                    let state_lease = match &*status.borrow() {
                        LivenessStatus::Registered { lease } => Some(lease.0),
                        _ => None,
                    };
                    w.record(What::LeaseIdRead {
                        host: i,
                        lease_id: host.lease_id().map(|l| l.0),
                        state_lease,
                    });
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    w.record(What::EventsLagged { host: i });
                }
                Err(broadcast::error::RecvError::Closed) => break,
            },
            res = stop.wait_for(|s| *s) => {
                if res.is_ok() {
                    break;
                }
            }
        }
    }
    let result = host.stop().await;
    while let Ok(event) = events.try_recv() {
        w.record(What::Event {
            host: i,
            incarnation,
            event,
        });
    }
    w.record(What::Stopped { host: i, result });
    let mut state = host.state();
    let ended = madsim::time::timeout(Duration::from_secs(2), async {
        while state.changed().await.is_ok() {}
    })
    .await
    .is_ok();
    w.record(What::TaskEnded { host: i, ended });
}

/// The options of watcher `i` in a case of `generator`: from V6 on,
/// watcher 0 lists serializably (a stale member may answer it) and every
/// buffer holds one event (a stalled consumer soon fills it, so the
/// watcher stops reading its stream); from V7 on, watcher 1's loop runs
/// inside its consumer's `next()`.
fn watcher_options_for(i: usize, mixed: u64, generator: Generator) -> WatcherOptions {
    let opts = watcher_options(mixed);
    match generator {
        Generator::V1 | Generator::V2 | Generator::V3 | Generator::V4 | Generator::V5 => opts,
        Generator::V6 => opts.with_serializable(i == 0).with_buffer(1),
        Generator::V7 | Generator::V8 => opts
            .with_serializable(i == 0)
            .with_buffer(1)
            .with_driving(if i == 1 {
                coord::Driving::InNext
            } else {
                coord::Driving::Background
            }),
    }
}

/// Waits while watcher `i`'s consumer is stalled.
async fn consumer_stall(w: &World, i: usize) {
    loop {
        let until = fleet(&w.fleet).watchers[i].stall_until;
        let now = w.now();
        if now >= until {
            return;
        }
        // In steps: the heal may end the stall early.
        sleep(Duration::from_millis((until - now).min(100))).await;
    }
}

/// One watcher process: records every event its consumer takes, and
/// publishes its `view()` for the observer; it also observes every
/// election name and records what it sees.
async fn watcher_agent<W: Wrap>(
    w: World,
    wrap: W,
    (i, seed, generator): (usize, u64, Generator),
    names: Vec<String>,
) {
    let id = (1 << 48) | u64::try_from(i).unwrap_or(0);
    let Some(etcd) = w.client(id).await else {
        return;
    };
    let api = wrap.wrap(etcd);
    let mixed = seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for name in names {
        let opts = coord::SessionOptions::default().with_seed(
            name.bytes()
                .fold(mixed, |h, b| h.wrapping_mul(31) ^ u64::from(b)),
        );
        let Ok(mut observe) = coord::Observe::start_with(api.clone(), &name, &opts) else {
            continue;
        };
        let w = w.clone();
        madsim::task::spawn(async move {
            while let Some(seen) = observe.next().await {
                w.record(What::Observed {
                    watcher: i,
                    name: name.clone(),
                    leader: seen.leader.map(|l| (l.key.to_string(), l.token.0, l.value)),
                    revision: seen.revision.0,
                });
            }
        });
    }
    let opts = wrap.watcher_options(watcher_options_for(i, mixed, generator));
    let Ok(mut watcher) = HostWatcher::<HostMetadata>::new(api, opts).await else {
        return;
    };
    loop {
        // The view changes only as events are taken: publish it then. A
        // key that is not a simulated host is published as index MAX, which
        // no host has, so the checker sees the invention.
        let view: HostView = watcher
            .view()
            .into_iter()
            .map(|(h, r)| (host_index(&h).unwrap_or(usize::MAX), r.mod_revision.0))
            .collect();
        {
            let mut f = fleet(&w.fleet);
            f.watchers[i].view = Some(Arc::new(view));
            f.watchers[i].status.get_or_insert_with(|| watcher.status());
        }
        consumer_stall(&w, i).await;
        let Some(event) = watcher.next().await else {
            return;
        };
        let seen = |r: &coord::HostRecord<HostMetadata>| SeenRecord {
            mod_revision: r.mod_revision.0,
            lease: r.lease.0,
            raw: r.raw.clone(),
        };
        let bare = |kind, revision: coord::Revision| WatcherEventRecord {
            kind,
            host: None,
            mod_revision: None,
            revision: revision.0,
            record: None,
            previous: None,
        };
        let record = match event {
            HostEvent::Up {
                host,
                record,
                revision,
            } => WatcherEventRecord {
                kind: WatcherEventKind::Up,
                host: Some(host),
                mod_revision: Some(record.mod_revision.0),
                revision: revision.0,
                record: Some(seen(&record)),
                previous: None,
            },
            HostEvent::Updated {
                host,
                record,
                previous,
                revision,
            } => WatcherEventRecord {
                kind: WatcherEventKind::Updated,
                host: Some(host),
                mod_revision: Some(record.mod_revision.0),
                revision: revision.0,
                record: Some(seen(&record)),
                previous: Some(seen(&previous)),
            },
            HostEvent::Down {
                host,
                last_seen,
                revision,
            } => WatcherEventRecord {
                kind: WatcherEventKind::Down,
                host: Some(host),
                mod_revision: None,
                revision: revision.0,
                record: Some(seen(&last_seen)),
                previous: None,
            },
            HostEvent::Synced { revision } => bare(WatcherEventKind::Synced, revision),
            HostEvent::Resynced { revision, reason } => bare(
                match reason {
                    coord::ResyncReason::Compacted { .. } => WatcherEventKind::Resynced,
                    coord::ResyncReason::RevisionWentBack { .. }
                    | coord::ResyncReason::HistoryDiverged { .. }
                    | coord::ResyncReason::ClusterChanged { .. } => WatcherEventKind::Restored,
                    other => panic!("a resync reason the checker cannot judge: {other:?}"),
                },
                revision,
            ),
            HostEvent::Retrying { .. } => bare(WatcherEventKind::Retrying, coord::Revision(0)),
            other => panic!("a watcher event the checker cannot judge: {other:?}"),
        };
        w.record(What::WatcherEvent {
            watcher: i,
            event: record,
        });
    }
}

async fn sample_forever(w: World) {
    loop {
        let (hosts, watchers) = {
            let st = lock(&w.etcd);
            let f = fleet(&w.fleet);
            let hosts = f
                .hosts
                .iter()
                .enumerate()
                .map(|(i, slot)| {
                    let kv = st.model.get(host_key(i).as_bytes());
                    HostSample {
                        condition: slot.proc.condition,
                        status: match slot.proc.condition {
                            Condition::Crashed => None,
                            _ => slot.status.as_ref().map(|rx| rx.borrow().clone()),
                        },
                        key_lease: kv.map(|kv| kv.lease),
                        key_mod_revision: kv.map(|kv| kv.mod_revision),
                    }
                })
                .collect();
            let watchers = f
                .watchers
                .iter()
                .map(|slot| WatcherSample {
                    condition: slot.proc.condition,
                    view: slot.view.clone(),
                    says_current: slot
                        .status
                        .as_ref()
                        .map(|s| matches!(*s.borrow(), coord::ViewStatus::Watching { .. })),
                })
                .collect();
            (hosts, watchers)
        };
        w.record(What::Sample(hosts));
        w.record(What::WatcherSample(watchers));
        let contenders = {
            let st = lock(&w.etcd);
            crate::contenders::sample(&w, &st)
        };
        if !contenders.is_empty() {
            w.record(What::ContenderSample(contenders));
        }
        sleep(SAMPLE_EVERY).await;
    }
}

fn inject(w: &World, case: &Case, fault: &Fault) {
    let handle = Handle::current();
    let now = w.now();
    if let Some(applied) = crate::contenders::inject(w, case, fault) {
        if applied {
            w.record(What::Fault(fault.clone()));
        }
        return;
    }
    let applied = match fault.clone() {
        Fault::LeaderChange { unavailable_ms } => {
            let window = Duration::from_millis(unavailable_ms);
            if let Some(node) = handle.get_node(w.etcd_node) {
                node.spawn(server::leader_change(
                    w.etcd.clone(),
                    w.etcd_ep.clone(),
                    w.start,
                    window,
                ));
            }
            true
        }
        Fault::Compact => {
            let mut st = lock(&w.etcd);
            let rev = st.model.revision();
            let done = st.model.compact(rev).is_ok();
            if done {
                w.record(What::Compacted { revision: rev });
            }
            done
        }
        Fault::DropReplies { ms } => {
            let mut st = lock(&w.etcd);
            st.drop_replies_until = st.drop_replies_until.max(now + ms);
            true
        }
        Fault::RevokeLease { host } => {
            let mut st = lock(&w.etcd);
            let lease = st.model.get(host_key(host).as_bytes()).map(|kv| kv.lease);
            let revoked = matches!(lease, Some(l) if l != 0 && st.revoke_lease(now, l).is_ok());
            st.after_change(now);
            revoked
        }
        Fault::Stop { host } => {
            let mut f = fleet(&w.fleet);
            let slot = &mut f.hosts[host];
            if slot.stopped || slot.proc.condition == Condition::Crashed {
                false
            } else {
                slot.stopped = true;
                slot.stop.send_replace(true);
                true
            }
        }
        Fault::Partition {
            host,
            direction,
            ms,
        } => {
            fleet(&w.fleet).hosts[host]
                .proc
                .partition(w.etcd_node, direction);
            let w2 = w.clone();
            madsim::task::spawn(async move {
                sleep(Duration::from_millis(ms)).await;
                let ended = fleet(&w2.fleet).hosts[host]
                    .proc
                    .end_partition(w2.etcd_node, direction);
                if ended {
                    w2.record(What::PartitionEnded { host });
                }
            });
            true
        }
        Fault::PartitionWatcher {
            watcher,
            direction,
            ms,
        } => {
            fleet(&w.fleet).watchers[watcher]
                .proc
                .partition(w.etcd_node, direction);
            let w2 = w.clone();
            madsim::task::spawn(async move {
                sleep(Duration::from_millis(ms)).await;
                let ended = fleet(&w2.fleet).watchers[watcher]
                    .proc
                    .end_partition(w2.etcd_node, direction);
                if ended {
                    w2.record(What::WatcherPartitionEnded { watcher });
                }
            });
            true
        }
        Fault::Pause { host, ms } => {
            let paused = fleet(&w.fleet).hosts[host].proc.pause();
            if paused {
                let w2 = w.clone();
                madsim::task::spawn(async move {
                    sleep(Duration::from_millis(ms)).await;
                    if fleet(&w2.fleet).hosts[host].proc.end_pause() {
                        w2.record(What::Resumed { host });
                    }
                });
            }
            paused
        }
        Fault::PauseWatcher { watcher, ms } => {
            let paused = fleet(&w.fleet).watchers[watcher].proc.pause();
            if paused {
                let w2 = w.clone();
                madsim::task::spawn(async move {
                    sleep(Duration::from_millis(ms)).await;
                    if fleet(&w2.fleet).watchers[watcher].proc.end_pause() {
                        w2.record(What::WatcherResumed { watcher });
                    }
                });
            }
            paused
        }
        Fault::Crash { host, down_ms } => {
            let node = {
                let mut f = fleet(&w.fleet);
                let slot = &mut f.hosts[host];
                if slot.proc.condition == Condition::Alive && !slot.stopped {
                    slot.proc.condition = Condition::Crashed;
                    slot.status = None;
                    Some(slot.proc.node)
                } else {
                    None
                }
            };
            crash_for(w, node, down_ms, move |w| restart(w, host))
        }
        Fault::WatcherCrash { watcher, down_ms } => {
            let node = {
                let mut f = fleet(&w.fleet);
                let slot = &mut f.watchers[watcher];
                if slot.proc.condition == Condition::Alive {
                    slot.proc.condition = Condition::Crashed;
                    slot.view = None;
                    slot.status = None;
                    Some(slot.proc.node)
                } else {
                    None
                }
            };
            crash_for(w, node, down_ms, move |w| restart_watcher(w, watcher))
        }
        Fault::StaleReads {
            ms,
            lag_ms,
            frozen,
            relist,
        } => {
            let compacted = {
                let mut st = lock(&w.etcd);
                let behind = if frozen {
                    st.frozen_member(now, lag_ms)
                } else {
                    server::Behind::Lag(lag_ms)
                };
                st.stale_reads = Some(server::StaleReads {
                    until_ms: now + ms,
                    behind,
                });
                relist
                    .then(|| server::bump_and_compact(&mut st, now))
                    .flatten()
            };
            if let Some(revision) = compacted {
                w.record(What::Fault(Fault::Compact));
                w.record(What::Compacted { revision });
                if let Some(node) = handle.get_node(w.etcd_node) {
                    node.spawn(server::break_watches(
                        w.etcd.clone(),
                        w.etcd_ep.clone(),
                        coord::DEFAULT_PREFIX.as_bytes().to_vec(),
                    ));
                }
            }
            true
        }
        Fault::ConsumerStall { watcher, ms } => {
            {
                let mut f = fleet(&w.fleet);
                let slot = &mut f.watchers[watcher];
                slot.stall_until = slot.stall_until.max(now + ms);
            }
            let w2 = w.clone();
            madsim::task::spawn(async move {
                sleep(Duration::from_millis(ms)).await;
                // Not if a later stall extended it or the heal ended it.
                let ended = fleet(&w2.fleet).watchers[watcher].stall_until == now + ms;
                if ended {
                    w2.record(What::ConsumerStallEnded { watcher });
                }
            });
            true
        }
        Fault::Wipe {
            new_cluster,
            down_ms,
        } => {
            if let Some(node) = handle.get_node(w.etcd_node) {
                node.spawn(server::wipe(
                    w.etcd.clone(),
                    w.etcd_ep.clone(),
                    w.start,
                    Duration::from_millis(down_ms),
                    server::Wiped {
                        new_cluster,
                        refusing: case.generator.wipes_refuse(),
                    },
                ));
            }
            true
        }
        // Taken by the contenders above.
        Fault::ContenderCrash { .. }
        | Fault::ContenderPartition { .. }
        | Fault::ContenderPause { .. }
        | Fault::DeleteLeaderKey { .. }
        | Fault::DeleteWaiterKey { .. }
        | Fault::RevokeLeaderLease { .. } => false,
    };
    if applied {
        w.record(What::Fault(fault.clone()));
    }
}

/// Kills `node` (a process that could crash), and runs `restart` after
/// `down_ms`. True if it crashed.
fn crash_for(
    w: &World,
    node: Option<NodeId>,
    down_ms: u64,
    restart: impl FnOnce(&World) + Send + 'static,
) -> bool {
    let Some(node) = node else {
        return false;
    };
    Handle::current().kill(node);
    let w2 = w.clone();
    madsim::task::spawn(async move {
        sleep(Duration::from_millis(down_ms)).await;
        restart(&w2);
    });
    true
}

fn restart_watcher(w: &World, watcher: usize) {
    let node = {
        let mut f = fleet(&w.fleet);
        let slot = &mut f.watchers[watcher];
        if slot.proc.condition != Condition::Crashed {
            return;
        }
        slot.proc.condition = Condition::Alive;
        slot.proc.node
    };
    Handle::current().restart(node);
    w.record(What::WatcherRestarted { watcher });
}

fn restart(w: &World, host: usize) {
    let node = {
        let mut f = fleet(&w.fleet);
        let slot = &mut f.hosts[host];
        if slot.proc.condition != Condition::Crashed {
            return;
        }
        slot.proc.condition = Condition::Alive;
        slot.proc.node
    };
    Handle::current().restart(node);
    w.record(What::Restarted { host });
}

fn heal_all(w: &World) {
    crate::contenders::heal_all(w);
    let (hosts, watchers) = {
        let mut f = fleet(&w.fleet);
        let hosts: Vec<(bool, bool)> = f
            .hosts
            .iter_mut()
            .map(|s| s.proc.heal(w.etcd_node))
            .collect();
        let watchers: Vec<(bool, bool, bool)> = f
            .watchers
            .iter_mut()
            .map(|s| {
                let (partition_ended, resumed) = s.proc.heal(w.etcd_node);
                let stall_ended = s.stall_until > w.now();
                s.stall_until = s.stall_until.min(w.now());
                (partition_ended, resumed, stall_ended)
            })
            .collect();
        (hosts, watchers)
    };
    for (host, (partition_ended, resumed)) in hosts.into_iter().enumerate() {
        if partition_ended {
            w.record(What::PartitionEnded { host });
        }
        if resumed {
            w.record(What::Resumed { host });
        }
        restart(w, host);
    }
    for (watcher, (partition_ended, resumed, stall_ended)) in watchers.into_iter().enumerate() {
        if partition_ended {
            w.record(What::WatcherPartitionEnded { watcher });
        }
        if stall_ended {
            w.record(What::ConsumerStallEnded { watcher });
        }
        if resumed {
            w.record(What::WatcherResumed { watcher });
        }
        restart_watcher(w, watcher);
    }
    let now = w.now();
    let mut st = lock(&w.etcd);
    st.unavailable_until = st.unavailable_until.min(now);
    st.refused_until = st.refused_until.min(now);
    st.drop_replies_until = st.drop_replies_until.min(now);
    st.stale_reads = None;
}
