//! Runs one [`Case`]: a simulated etcd node, one node per host running the
//! real `HostLiveness` (core + driver) over [`SimEtcd`], the fault injector,
//! and the observer that records the [`History`].
//!
//! Phase 1 injects the case's faults. Phase 2 heals everything and waits
//! [`heal_bound`]; then every host is stopped and the run goes on for two
//! TTLs so that a key reappearing after stop would be seen.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use coord::{EtcdApi, HostLiveness, HostMetadata, LivenessOptions, LivenessStatus};
use madsim::net::{Endpoint, NetSim};
use madsim::runtime::Handle;
use madsim::task::NodeId;
use madsim::time::{sleep, sleep_until, Instant};
use tokio::sync::{broadcast, watch};

use crate::client::SimEtcd;
use crate::history::{Condition, History, HostSample, Recorder, What, SAMPLE_EVERY};
use crate::schedule::{Case, Direction, Fault};
use crate::server::{self, lock, now_ms, SharedEtcd};

/// Turns the simulated client into the `EtcdApi` the hosts use. The real
/// runs use [`Real`]; the simulator's own tests wrap it in deliberately
/// broken variants to show the checker catches them.
pub trait Wrap: Clone + Send + Sync + 'static {
    /// The API handed to `HostLiveness`.
    type Api: EtcdApi;
    /// Wraps one process's client.
    fn wrap(&self, etcd: SimEtcd) -> Self::Api;
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

fn host_ip(i: usize) -> IpAddr {
    let last = u8::try_from(10 + i).unwrap_or(u8::MAX);
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
}

/// The key of host `i`.
pub fn host_key(i: usize) -> String {
    format!("{}host-{i}", coord::DEFAULT_PREFIX)
}

/// The driver options every simulated host uses (coord's defaults, but the
/// TTL, a seed per process, and retrying the first registration).
pub fn host_options(ttl_secs: u64, seed: u64) -> LivenessOptions {
    LivenessOptions {
        ttl: Duration::from_secs(ttl_secs),
        seed: Some(seed),
        retry_first_registration: true,
        ..LivenessOptions::default()
    }
}

/// How long after the heal every host must be registered again: one
/// request deadline (a request lost at the heal), the backoff cap (jitter
/// included: equal jitter never exceeds the ceiling), and 4 s for the round
/// trips of a registration.
pub fn heal_bound() -> Duration {
    let o = LivenessOptions::default();
    o.request_timeout + o.backoff.cap + Duration::from_secs(4)
}

/// Extra time after a host's TTL before its crashed key must be gone: the
/// lessor checks every 500 ms, plus 1 s of slack.
pub const EXPIRY_SLACK: Duration = Duration::from_millis(1500);

struct Slot {
    node: NodeId,
    condition: Condition,
    status: Option<watch::Receiver<LivenessStatus>>,
    to_etcd: u32,
    from_etcd: u32,
    pauses: u32,
    incarnation: u64,
    stop: watch::Sender<bool>,
    /// Told to stop; never restarted after that.
    stopped: bool,
}

type Slots = Arc<Mutex<Vec<Slot>>>;

fn slots(s: &Slots) -> MutexGuard<'_, Vec<Slot>> {
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Clone)]
struct World {
    start: Instant,
    etcd: SharedEtcd,
    etcd_node: NodeId,
    etcd_ep: Endpoint,
    slots: Slots,
    recorder: Recorder,
    anomalies: Arc<std::sync::atomic::AtomicU64>,
}

impl World {
    fn now(&self) -> u64 {
        now_ms(self.start)
    }

    fn record(&self, what: What) {
        self.recorder.record(self.now(), what);
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
        slots: Arc::new(Mutex::new(Vec::new())),
        recorder: Recorder::default(),
        anomalies: Arc::default(),
    };
    for (i, ttl) in case.ttls.iter().copied().enumerate() {
        let (stop, _) = watch::channel(false);
        // The slot exists before the node, whose init reads it.
        slots(&world.slots).push(Slot {
            node: etcd_node.id(),
            condition: Condition::Alive,
            status: None,
            to_etcd: 0,
            from_etcd: 0,
            pauses: 0,
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
        slots(&world.slots)[i].node = node.id();
    }
    let sampler = madsim::task::spawn(sample_forever(world.clone()));

    for tf in &case.faults {
        sleep_until(start + Duration::from_millis(tf.at_ms)).await;
        inject(&world, &tf.fault);
    }
    sleep_until(start + Duration::from_millis(case.phase1_ms)).await;
    heal_all(&world);
    world.record(What::HealAll);
    sleep(heal_bound() + SAMPLE_EVERY).await;

    world.record(What::StopAll);
    for slot in slots(&world.slots).iter_mut() {
        slot.stopped = true;
        slot.stop.send_replace(true);
    }
    let max_ttl = case.ttls.iter().copied().max().unwrap_or(2).max(2);
    sleep(Duration::from_secs(2 * max_ttl) + Duration::from_secs(10)).await;
    sampler.abort();
    let anomalies = world.anomalies.load(std::sync::atomic::Ordering::Relaxed);
    world.record(What::SimulatorAnomalies(anomalies));
    world.recorder.snapshot()
}

/// One host process: registers, records every event, stops when told.
async fn agent<W: Wrap>(w: World, wrap: W, i: usize, ttl: u64, seed: u64) {
    let (incarnation, mut stop) = {
        let mut s = slots(&w.slots);
        s[i].incarnation += 1;
        (s[i].incarnation, s[i].stop.subscribe())
    };
    let client = (u64::try_from(i).unwrap_or(0) << 32) | incarnation;
    let server = SocketAddr::from((ETCD_IP, ETCD_PORT));
    let Ok(etcd) = SimEtcd::connect(server, client, Arc::clone(&w.anomalies)).await else {
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
    let opts = host_options(ttl, process_seed);
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
    slots(&w.slots)[i].status = Some(host.state());
    loop {
        tokio::select! {
            biased;
            ev = events.recv() => match ev {
                Ok(event) => w.record(What::Event { host: i, incarnation, event }),
                Err(broadcast::error::RecvError::Lagged(_)) => {}
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

async fn sample_forever(w: World) {
    loop {
        let sample = {
            let st = lock(&w.etcd);
            slots(&w.slots)
                .iter()
                .enumerate()
                .map(|(i, slot)| HostSample {
                    condition: slot.condition,
                    status: match slot.condition {
                        Condition::Crashed => None,
                        _ => slot.status.as_ref().map(|rx| rx.borrow().clone()),
                    },
                    key_lease: st.model.get(host_key(i).as_bytes()).map(|kv| kv.lease),
                })
                .collect()
        };
        w.record(What::Sample(sample));
        sleep(SAMPLE_EVERY).await;
    }
}

fn inject(w: &World, fault: &Fault) {
    let handle = Handle::current();
    let net = NetSim::current();
    let now = w.now();
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
            st.model.compact(rev).is_ok()
        }
        Fault::DropReplies { ms } => {
            let mut st = lock(&w.etcd);
            st.drop_replies_until = st.drop_replies_until.max(now + ms);
            true
        }
        Fault::Partition {
            host,
            direction,
            ms,
        } => {
            let node = {
                let mut s = slots(&w.slots);
                let slot = &mut s[host];
                if matches!(direction, Direction::ToEtcd | Direction::Both) {
                    slot.to_etcd += 1;
                }
                if matches!(direction, Direction::FromEtcd | Direction::Both) {
                    slot.from_etcd += 1;
                }
                slot.node
            };
            if matches!(direction, Direction::ToEtcd | Direction::Both) {
                net.clog_link(node, w.etcd_node);
            }
            if matches!(direction, Direction::FromEtcd | Direction::Both) {
                net.clog_link(w.etcd_node, node);
            }
            let w2 = w.clone();
            madsim::task::spawn(async move {
                sleep(Duration::from_millis(ms)).await;
                end_partition(&w2, host, direction);
            });
            true
        }
        Fault::Pause { host, ms } => {
            let node = {
                let mut s = slots(&w.slots);
                let slot = &mut s[host];
                if slot.condition == Condition::Crashed {
                    None
                } else {
                    slot.pauses += 1;
                    slot.condition = Condition::Paused;
                    Some(slot.node)
                }
            };
            if let Some(node) = node {
                handle.pause(node);
                let w2 = w.clone();
                madsim::task::spawn(async move {
                    sleep(Duration::from_millis(ms)).await;
                    end_pause(&w2, host);
                });
            }
            node.is_some()
        }
        Fault::RevokeLease { host } => {
            let mut st = lock(&w.etcd);
            let lease = st.model.get(host_key(host).as_bytes()).map(|kv| kv.lease);
            let revoked = matches!(lease, Some(l) if l != 0 && st.model.revoke(l).is_ok());
            st.after_change(now);
            revoked
        }
        Fault::Stop { host } => {
            let mut s = slots(&w.slots);
            let slot = &mut s[host];
            if slot.stopped || slot.condition == Condition::Crashed {
                false
            } else {
                slot.stopped = true;
                slot.stop.send_replace(true);
                true
            }
        }
        Fault::Crash { host, down_ms } => {
            let node = {
                let mut s = slots(&w.slots);
                let slot = &mut s[host];
                if slot.condition == Condition::Alive && !slot.stopped {
                    slot.condition = Condition::Crashed;
                    slot.status = None;
                    Some(slot.node)
                } else {
                    None
                }
            };
            if let Some(node) = node {
                handle.kill(node);
                let w2 = w.clone();
                madsim::task::spawn(async move {
                    sleep(Duration::from_millis(down_ms)).await;
                    restart(&w2, host);
                });
            }
            node.is_some()
        }
    };
    if applied {
        w.record(What::Fault(fault.clone()));
    }
}

fn end_partition(w: &World, host: usize, direction: Direction) {
    let net = NetSim::current();
    let (node, ended) = {
        let mut s = slots(&w.slots);
        let slot = &mut s[host];
        let before = slot.to_etcd + slot.from_etcd;
        if matches!(direction, Direction::ToEtcd | Direction::Both) {
            slot.to_etcd = slot.to_etcd.saturating_sub(1);
            if slot.to_etcd == 0 {
                net.unclog_link(slot.node, w.etcd_node);
            }
        }
        if matches!(direction, Direction::FromEtcd | Direction::Both) {
            slot.from_etcd = slot.from_etcd.saturating_sub(1);
            if slot.from_etcd == 0 {
                net.unclog_link(w.etcd_node, slot.node);
            }
        }
        (slot.node, before > 0 && slot.to_etcd + slot.from_etcd == 0)
    };
    let _ = node;
    if ended {
        w.record(What::PartitionEnded { host });
    }
}

fn end_pause(w: &World, host: usize) {
    let node = {
        let mut s = slots(&w.slots);
        let slot = &mut s[host];
        if slot.pauses == 0 {
            return;
        }
        slot.pauses -= 1;
        if slot.pauses > 0 {
            return;
        }
        slot.condition = Condition::Alive;
        slot.node
    };
    Handle::current().resume(node);
    w.record(What::Resumed { host });
}

fn restart(w: &World, host: usize) {
    let node = {
        let mut s = slots(&w.slots);
        let slot = &mut s[host];
        if slot.condition != Condition::Crashed {
            return;
        }
        slot.condition = Condition::Alive;
        slot.node
    };
    Handle::current().restart(node);
    w.record(What::Restarted { host });
}

fn heal_all(w: &World) {
    let n = slots(&w.slots).len();
    for host in 0..n {
        let (to, from) = {
            let s = slots(&w.slots);
            (s[host].to_etcd, s[host].from_etcd)
        };
        for _ in 0..to {
            end_partition(w, host, Direction::ToEtcd);
        }
        for _ in 0..from {
            end_partition(w, host, Direction::FromEtcd);
        }
        let pauses = slots(&w.slots)[host].pauses;
        for _ in 0..pauses {
            end_pause(w, host);
        }
        restart(w, host);
    }
    let now = w.now();
    let mut st = lock(&w.etcd);
    st.unavailable_until = st.unavailable_until.min(now);
    st.drop_replies_until = st.drop_replies_until.min(now);
}
