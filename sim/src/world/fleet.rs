//! The world a run builds: the fleet of processes under test (hosts,
//! watchers, election and lock processes) as the run tracks them, their
//! addresses, and the [`Variant`] that sets up what they run.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};

use coord::{EtcdApi, LeaderProbe, LivenessOptions, LivenessStatus, WatcherOptions};
use madsim::net::Endpoint;
use madsim::task::NodeId;
use madsim::time::Instant;
use tokio::sync::watch;

use crate::etcd::client::SimEtcd;
use crate::faults::schedule::Target;
use crate::history::{Condition, Entry, HostView, Recorder};

use crate::etcd::server::{now_ms, SharedEtcd};
pub(crate) use crate::world::process::Proc;

/// What the processes under test run: the `EtcdApi` each one's simulated
/// client is turned into, and the options it really runs with. The
/// campaign runs coord as shipped ([`Shipped`]); the side-by-side
/// comparison runs the go-coord-style policy, and the simulator's own tests
/// run deliberately broken variants to show the checker catches them.
pub trait Variant: Clone + Send + Sync + 'static {
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
    /// ones (as [`host_options`](Variant::host_options) for hosts).
    fn watcher_options(&self, nominal: WatcherOptions) -> WatcherOptions {
        nominal
    }
    /// The options an election or lock process's session really runs
    /// with, given the nominal ones.
    fn session_options(&self, nominal: coord::SessionOptions) -> coord::SessionOptions {
        nominal
    }
}

/// coord as shipped: the real driver on the simulated client, unwrapped,
/// with the nominal options.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shipped;

impl Variant for Shipped {
    type Api = SimEtcd;
    fn wrap(&self, etcd: SimEtcd) -> SimEtcd {
        etcd
    }
}

/// A variant whose processes' clients pass their traffic through an
/// [`Intercept`](coord::etcd::Intercept): each client gets a fresh one
/// from the function (so what it keeps per stream or per process is its
/// client's own), and every process runs with the nominal options.
#[derive(Debug, Clone, Copy)]
pub struct Intercepting<I>(pub fn() -> I);

impl<I: coord::etcd::Intercept> Variant for Intercepting<I> {
    type Api = coord::etcd::Intercepted<SimEtcd, I>;
    fn wrap(&self, etcd: SimEtcd) -> Self::Api {
        coord::etcd::Intercepted::new(etcd, (self.0)())
    }
}

// Virtual addresses inside the simulator (documentation range, RFC 5737):
// madsim routes them between simulated nodes; no real socket is opened.
pub(crate) const ETCD_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub(crate) const ETCD_PORT: u16 = 2379;

/// Hosts 0-89 as always (so runs keep their histories); larger fleets (up
/// to 1,000 hosts and more) continue in 10.1.0.0/16.
pub(crate) fn host_ip(i: usize) -> IpAddr {
    if let Some(last) = u8::try_from(10 + i).ok().filter(|l| *l < 100) {
        return IpAddr::V4(Ipv4Addr::new(192, 0, 2, last));
    }
    let n = i - 90;
    let third = u8::try_from(n / 250).unwrap_or(u8::MAX);
    let fourth = u8::try_from(n % 250 + 1).unwrap_or(u8::MAX);
    IpAddr::V4(Ipv4Addr::new(10, 1, third, fourth))
}

pub(crate) fn watcher_ip(i: usize) -> IpAddr {
    let last = u8::try_from(200 + i).unwrap_or(u8::MAX);
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
}

/// The address of election or lock process `c`.
pub(crate) fn contender_ip(c: usize) -> IpAddr {
    let last = u8::try_from(100 + c).unwrap_or(u8::MAX);
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
}

/// The address of a process of the world.
pub(crate) fn target_ip(target: Target) -> IpAddr {
    match target {
        Target::Host(i) => host_ip(i),
        Target::Watcher(i) => watcher_ip(i),
        Target::Contender(c) => contender_ip(c),
    }
}

pub(crate) struct Slot {
    pub(crate) proc: Proc,
    pub(crate) status: Option<watch::Receiver<LivenessStatus>>,
    pub(crate) incarnation: u64,
    pub(crate) stop: watch::Sender<bool>,
    /// Told to stop; never restarted after that.
    pub(crate) stopped: bool,
}

pub(crate) struct WatcherSlot {
    pub(crate) proc: Proc,
    pub(crate) view: Option<Arc<HostView>>,
    pub(crate) status: Option<tokio::sync::watch::Receiver<coord::ViewStatus>>,
    /// Its consumer takes no event before this virtual ms.
    pub(crate) stall_until: u64,
}

#[derive(Default)]
pub(crate) struct Fleet {
    pub(crate) hosts: Vec<Slot>,
    pub(crate) watchers: Vec<WatcherSlot>,
    pub(crate) contenders: Vec<ContenderSlot>,
}

impl Fleet {
    /// The process `target` names (a schedule's indexes are in range).
    pub(crate) fn proc_mut(&mut self, target: Target) -> &mut Proc {
        match target {
            Target::Host(i) => &mut self.hosts[i].proc,
            Target::Watcher(i) => &mut self.watchers[i].proc,
            Target::Contender(i) => &mut self.contenders[i].proc,
        }
    }

    /// Marks `target` crashed and forgets what its process held (a host's
    /// status, a watcher's view, a contender's leaderships and session);
    /// its node to kill, or `None` when it is not running (crashed, or a
    /// host or contender told to stop).
    pub(crate) fn crash(&mut self, target: Target) -> Option<NodeId> {
        let running = match target {
            Target::Host(i) => !self.hosts[i].stopped,
            Target::Watcher(_) => true,
            Target::Contender(i) => !self.contenders[i].stopped,
        };
        let proc = self.proc_mut(target);
        if !running || proc.condition != Condition::Alive {
            return None;
        }
        proc.condition = Condition::Crashed;
        let node = proc.node;
        match target {
            Target::Host(i) => self.hosts[i].status = None,
            Target::Watcher(i) => {
                let slot = &mut self.watchers[i];
                slot.view = None;
                slot.status = None;
            }
            Target::Contender(i) => {
                let slot = &mut self.contenders[i];
                slot.probes.clear();
                slot.session = None;
            }
        }
        Some(node)
    }

    /// Marks a crashed `target` alive again; its node to restart, or
    /// `None` when it is not crashed or is a contender told to stop since.
    pub(crate) fn revive(&mut self, target: Target) -> Option<NodeId> {
        let stopped = matches!(target, Target::Contender(i) if self.contenders[i].stopped);
        let proc = self.proc_mut(target);
        if stopped || proc.condition != Condition::Crashed {
            return None;
        }
        proc.condition = Condition::Alive;
        Some(proc.node)
    }
}

pub(crate) type SharedFleet = Arc<Mutex<Fleet>>;

pub(crate) fn fleet(s: &SharedFleet) -> MutexGuard<'_, Fleet> {
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Clone)]
pub(crate) struct World {
    pub(crate) start: Instant,
    pub(crate) etcd: SharedEtcd,
    pub(crate) etcd_node: NodeId,
    pub(crate) etcd_ep: Endpoint,
    pub(crate) fleet: SharedFleet,
    pub(crate) recorder: Recorder,
    pub(crate) log: crate::etcd::client::ClientLog,
}

impl World {
    pub(crate) fn now(&self) -> u64 {
        now_ms(self.start)
    }

    pub(crate) fn record(&self, what: Entry) {
        self.recorder.record(self.now(), what);
    }

    pub(crate) async fn client(&self, id: u64) -> Option<SimEtcd> {
        let server = SocketAddr::from((ETCD_IP, ETCD_PORT));
        SimEtcd::connect(server, id, self.log.clone()).await.ok()
    }
}

/// One election or lock process as the harness tracks it.
pub(crate) struct ContenderSlot {
    pub(crate) proc: Proc,
    pub(crate) incarnation: u64,
    /// The leaderships it holds now, by name.
    pub(crate) probes: BTreeMap<String, LeaderProbe>,
    /// Its session, once made.
    pub(crate) session: Option<coord::Session>,
    pub(crate) stop: watch::Sender<bool>,
    /// Told to stop; never restarted after that.
    pub(crate) stopped: bool,
}
