//! A testkit for your own fault-injection tests: your async code, written
//! against coord's handles, runs in simulated nodes against the simulator's
//! model of etcd, under faults you inject by name, in virtual time, and a
//! seed replays a run exactly.
//!
//! # Setting it up
//!
//! madsim replaces tokio's clock, tasks and network when the whole build
//! has `--cfg madsim`, so a test crate that uses the testkit is built that
//! way, in a target directory of its own (a normal build cannot share it):
//!
//! ```toml
//! # Cargo.toml of the crate with your simulation tests
//! [dependencies]
//! coord = { package = "etcd-coord", version = "0.1" }
//! # madsim's tokio: real tokio normally, the simulator under --cfg madsim.
//! tokio = { package = "madsim-tokio", version = "0.2.30", features = ["full"] }
//!
//! [target.'cfg(madsim)'.dev-dependencies]
//! # Before its first release, a path to a clone: { path = "coord/sim" }
//! coord-sim = "0.1"
//! ```
//!
//! Under `--cfg madsim`, coord needs no etcd-client and so no protoc.
//!
//! ```sh
//! RUSTFLAGS="--cfg madsim" CARGO_TARGET_DIR=target/sim cargo test --release
//! ```
//!
//! Put `#![cfg(madsim)]` at the top of each simulation test file, so that
//! the normal build skips them. Under madsim, your code must avoid what
//! madsim cannot simulate: OS threads, `spawn_blocking`, `tokio::fs`,
//! `JoinSet`, and unbiased `select!` (write `select! { biased; .. }`), or a
//! run stops being a function of its seed.
//!
//! # A run
//!
//! [`run`] builds a fresh simulated world from a seed, with an etcd model on
//! a node of its own, and runs your scenario in it. The scenario gets a
//! [`Cluster`]: it starts [`Node`]s (each runs your code with a
//! [`SimEtcd`] client, the `EtcdApi` every coord handle takes), injects
//! faults, sleeps in virtual time, and returns whatever it wants to check.
//! Your code records what it did in a [`Recorder`] (each entry stamped with
//! the virtual time); your invariant reads it after the run. [`find_failure`]
//! runs a scenario over many seeds and returns the first that fails, which
//! [`run`] with the same seed replays exactly.
//!
//! Faults, by name: [`Cluster::partition`] (and one-way
//! [`Cluster::partition_toward_etcd`] / [`Cluster::partition_from_etcd`]),
//! [`Cluster::pause`] (a GC pause), [`Cluster::crash`] and
//! [`Cluster::restart`], [`Cluster::heal`], and on etcd:
//! [`Cluster::etcd_leader_change`], [`Cluster::compact`],
//! [`Cluster::wipe`], [`Cluster::unanswered_requests`].
//!
//! # Example: a job scheduler whose leader must never run a job twice
//!
//! `sim/tests/testkit.rs` in coord's repository runs this example, and the
//! same scheduler with a planted double-run bug (it checks that a job is
//! not done, runs it, then marks it done), which the same scenario catches
//! on the first seed: a leader paused mid-job loses the lead, and its
//! successor runs that job again.
//!
//! ```ignore
//! use std::collections::BTreeMap;
//! use std::time::Duration;
//!
//! use coord::{Compare, CompareOp, Election, Revision, SessionOptions, Txn, TxnOp};
//! use coord_sim::testkit::{self, Cluster, Recorder, SimEtcd};
//!
//! const JOBS: u32 = 20;
//!
//! /// While it leads, the scheduler claims each job with one transaction
//! /// fenced by its leadership (put only if nobody claimed the job, and only
//! /// while this leadership holds), and runs the job only if it got it.
//! async fn scheduler(etcd: SimEtcd, me: String, ran: Recorder<(u32, String)>) {
//!     let opts = SessionOptions::default().with_ttl(Duration::from_secs(2));
//!     let Ok(election) = Election::new(etcd, "scheduler", opts).await else { return };
//!     loop {
//!         let Ok(leader) = election.campaign(me.clone()).await else {
//!             tokio::time::sleep(Duration::from_millis(100)).await;
//!             continue;
//!         };
//!         for job in 0..JOBS {
//!             let key = format!("/jobs/{job}");
//!             let claim = Txn::new()
//!                 .when([Compare::create_revision(key.as_str(), CompareOp::Equal, Revision(0))])
//!                 .and_then([TxnOp::put(key.as_str(), me.clone())]);
//!             match leader.txn(claim).await {
//!                 Ok(claimed) if claimed.succeeded => {
//!                     ran.record((job, me.clone())); // the job runs here
//!                     tokio::time::sleep(Duration::from_millis(300)).await;
//!                 }
//!                 Ok(_) => {}      // claimed before: run already
//!                 Err(_) => break, // not the leader any more
//!             }
//!         }
//!         let _ = leader.lost().await;
//!     }
//! }
//!
//! /// Three schedulers, each paused in turn for twice its TTL: every job
//! /// must run exactly once.
//! async fn scenario(cluster: Cluster) -> Result<(), String> {
//!     let ran = Recorder::new(&cluster);
//!     let nodes: Vec<_> = (0..3)
//!         .map(|i| {
//!             let ran = ran.clone();
//!             cluster.node(&format!("scheduler-{i}"), move |etcd| {
//!                 scheduler(etcd, format!("s{i}"), ran.clone())
//!             })
//!         })
//!         .collect();
//!     for node in &nodes {
//!         cluster.sleep(Duration::from_millis(700)).await;
//!         cluster.pause(node); // a paused leader loses the lead
//!         cluster.sleep(Duration::from_secs(4)).await;
//!         cluster.resume(node);
//!     }
//!     cluster.sleep(Duration::from_secs(15)).await;
//!     let mut runs = BTreeMap::new();
//!     for entry in ran.entries() {
//!         let (job, by) = entry.event;
//!         if let Some(first) = runs.insert(job, (entry.at, by.clone())) {
//!             return Err(format!("job {job} ran twice: {first:?}, then {by} at {:?}", entry.at));
//!         }
//!     }
//!     if runs.len() < JOBS as usize {
//!         return Err(format!("only {} jobs ran", runs.len()));
//!     }
//!     Ok(())
//! }
//!
//! #[test]
//! fn no_job_runs_twice() {
//!     // The first failing seed, if any: `testkit::run(seed, scenario)`
//!     // replays it exactly.
//!     let failure = testkit::find_failure(1..=20, scenario);
//!     assert_eq!(failure, None);
//! }
//! ```

use std::fmt;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use madsim::net::{Endpoint, NetSim};
use madsim::runtime::Handle;
use madsim::task::NodeId;
use madsim::time::Instant;

use crate::etcd::client::ClientLog;
use crate::etcd::hooks::{self, Wiped};
use crate::etcd::server::{self, lock, SharedEtcd};

pub use crate::etcd::client::SimEtcd;

/// etcd's address in a testkit world.
const ETCD: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 2379);

/// Clients of testkit nodes are numbered from here in the model's lease log
/// (a node's incarnation is added), apart from the simulator's own.
const CLIENT_BASE: u64 = 1 << 40;

/// Runs `scenario` in a fresh simulated world made from `seed`, with an
/// etcd model serving on a node of its own, and returns what the scenario
/// returned. The same seed gives the same run, event for event, as long as
/// the code under test takes all its time, tasks, randomness and network
/// from madsim.
///
/// Fails with [`RunError::Panicked`] when the scenario, or a task it
/// spawned, panics, and with [`RunError::NotStarted`] when the world could
/// not be built. Runs on a thread of its own (madsim's determinism needs a
/// fresh thread per runtime), so it may be called from a `#[test]` as it is.
pub fn run<T, F, Fut>(seed: u64, scenario: F) -> Result<T, RunError>
where
    T: Send + 'static,
    F: FnOnce(Cluster) -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
{
    let joined = std::thread::Builder::new()
        .name(format!("testkit-{seed}"))
        .spawn(move || {
            let rt =
                madsim::runtime::Runtime::with_seed_and_config(seed, madsim::Config::default());
            rt.block_on(async move {
                let cluster = Cluster::start().await?;
                let out = scenario(cluster.clone()).await;
                cluster.tear_down();
                Some(out)
            })
        })
        .map_err(|e| RunError::NotStarted {
            seed,
            why: format!("no thread for the simulation: {e}"),
        })?;
    match joined.join() {
        Ok(Some(out)) => Ok(out),
        Ok(None) => Err(RunError::NotStarted {
            seed,
            why: "the etcd model could not bind its address".into(),
        }),
        Err(panic) => Err(RunError::Panicked {
            seed,
            message: crate::run::runner::panic_message(panic),
        }),
    }
}

/// Runs `scenario` once per seed of `seeds`, in order, and returns the
/// first seed whose run returned `Err` or panicked, with why. `None` when
/// every run returned `Ok`. Replay a failure with [`run`] and its seed.
pub fn find_failure<E, F, Fut>(
    seeds: impl IntoIterator<Item = u64>,
    scenario: F,
) -> Option<Failure<E>>
where
    E: Send + 'static,
    F: Fn(Cluster) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), E>> + 'static,
{
    seeds.into_iter().find_map(|seed| {
        let outcome = match run(seed, scenario.clone()) {
            Ok(Ok(())) => return None,
            Ok(Err(e)) => Outcome::Failed(e),
            Err(RunError::Panicked { message, .. }) => Outcome::Panicked(message),
            Err(RunError::NotStarted { why, .. }) => Outcome::NotStarted(why),
        };
        Some(Failure { seed, outcome })
    })
}

/// A seed whose run failed, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure<E> {
    /// The seed: [`run`] with it replays the failure.
    pub seed: u64,
    /// What the run came to.
    pub outcome: Outcome<E>,
}

/// How a failed run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome<E> {
    /// The scenario returned this error (your invariant said no).
    Failed(E),
    /// The scenario, or a task of the world, panicked with this message.
    Panicked(String),
    /// The world could not be built, for this reason.
    NotStarted(String),
}

/// Why a run gave no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The scenario, or a task of the world, panicked.
    #[error("the simulation of seed {seed} panicked: {message}")]
    Panicked {
        /// The seed that replays it.
        seed: u64,
        /// The panic's message.
        message: String,
    },
    /// The world could not be built (no thread for it, or the etcd model
    /// could not bind its address); nothing of the scenario ran.
    #[error("the simulation of seed {seed} could not start: {why}")]
    NotStarted {
        /// The seed.
        seed: u64,
        /// Why.
        why: String,
    },
}

/// The world a scenario runs in: the etcd model and the nodes started in it.
/// Cheap to clone; every clone is the same world.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    start: Instant,
    etcd: SharedEtcd,
    etcd_node: NodeId,
    etcd_ep: Endpoint,
    log: ClientLog,
    nodes: Mutex<Vec<NodeState>>,
}

/// What the cluster knows of one node.
struct NodeState {
    id: NodeId,
    condition: Condition,
}

/// Where a node stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Condition {
    Running,
    Paused,
    Crashed,
}

/// A node started by [`Cluster::node`]: a process of your code with its
/// own address, which the faults act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Node(usize);

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("nodes", &self.nodes().len())
            .finish()
    }
}

impl Cluster {
    async fn start() -> Option<Cluster> {
        let handle = Handle::current();
        let start = Instant::now();
        let etcd = server::new_state();
        let node = handle.create_node().name("etcd").ip(ETCD.ip()).build();
        let ep = match node.spawn(Endpoint::bind(ETCD)).await {
            Ok(Ok(ep)) => ep,
            _ => return None,
        };
        node.spawn(server::serve(etcd.clone(), ep.clone(), start));
        node.spawn(server::lessor(etcd.clone(), start));
        node.spawn(server::flush_watches(etcd.clone(), ep.clone()));
        Some(Cluster {
            inner: Arc::new(Inner {
                start,
                etcd,
                etcd_node: node.id(),
                etcd_ep: ep,
                log: ClientLog::new(start),
                nodes: Mutex::new(Vec::new()),
            }),
        })
    }

    fn nodes(&self) -> MutexGuard<'_, Vec<NodeState>> {
        self.inner
            .nodes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Virtual time since the world began.
    pub fn elapsed(&self) -> Duration {
        self.inner.start.elapsed()
    }

    /// Sleeps `duration` of virtual time.
    pub async fn sleep(&self, duration: Duration) {
        madsim::time::sleep(duration).await;
    }

    /// Starts a node named `name` that runs `main` with a client of the
    /// simulated etcd; after [`Cluster::restart`] it runs `main` again,
    /// with a new client, as a restarted process would. A node whose
    /// client cannot be made (it never can while etcd's node is up) runs
    /// nothing.
    pub fn node<F, Fut>(&self, name: &str, main: F) -> Node
    where
        F: Fn(SimEtcd) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let mut nodes = self.nodes();
        let index = nodes.len();
        let log = self.inner.log.clone();
        let main = Arc::new(main);
        // How many times the node has started: each start is a process
        // of its own in etcd's lease log.
        let starts = AtomicU64::new(0);
        let id = Handle::current()
            .create_node()
            .name(name)
            .ip(node_ip(index))
            .init(move || {
                let n = starts.fetch_add(1, Ordering::Relaxed);
                let client = CLIENT_BASE + ((index as u64) << 16) + n;
                let (log, main) = (log.clone(), Arc::clone(&main));
                async move {
                    if let Ok(etcd) = SimEtcd::connect(ETCD, client, log).await {
                        main(etcd).await;
                    }
                }
            })
            .build()
            .id();
        nodes.push(NodeState {
            id,
            condition: Condition::Running,
        });
        Node(index)
    }

    /// Cuts `node` off from etcd both ways until [`Cluster::heal`]: its
    /// requests and etcd's answers are lost, as with a partition or a
    /// blackholed network.
    pub fn partition(&self, node: &Node) {
        self.partition_toward_etcd(node);
        self.partition_from_etcd(node);
    }

    /// Loses what `node` sends to etcd (etcd's answers to what got through
    /// before still arrive), until [`Cluster::heal`].
    pub fn partition_toward_etcd(&self, node: &Node) {
        if let Some(id) = self.id(node) {
            NetSim::current().clog_link(id, self.inner.etcd_node);
        }
    }

    /// Loses what etcd sends to `node` (its requests still reach etcd and
    /// are applied: keep-alives renew, writes land unanswered), until
    /// [`Cluster::heal`].
    pub fn partition_from_etcd(&self, node: &Node) {
        if let Some(id) = self.id(node) {
            NetSim::current().clog_link(self.inner.etcd_node, id);
        }
    }

    /// Stops every task of `node` where it stands, as a long GC pause or a
    /// SIGSTOP does, until [`Cluster::resume`] or [`Cluster::heal`]. A
    /// crashed or paused node is left as it is.
    pub fn pause(&self, node: &Node) {
        self.shift(
            node,
            |c| c == Condition::Running,
            Condition::Paused,
            |h, id| h.pause(id),
        );
    }

    /// Lets a paused `node` run on from where it stood.
    pub fn resume(&self, node: &Node) {
        self.shift(
            node,
            |c| c == Condition::Paused,
            Condition::Running,
            |h, id| h.resume(id),
        );
    }

    /// Kills `node` at once, as kill -9 does: its tasks stop, nothing is
    /// cleaned up, its leases are left to expire. [`Cluster::restart`]
    /// starts its code again.
    pub fn crash(&self, node: &Node) {
        self.shift(
            node,
            |c| c != Condition::Crashed,
            Condition::Crashed,
            |h, id| h.kill(id),
        );
    }

    /// Starts `node`'s code again, with a new client, whether it crashed
    /// or not (a running node is killed first, as a restart by a
    /// supervisor would).
    pub fn restart(&self, node: &Node) {
        self.shift(node, |_| true, Condition::Running, |h, id| h.restart(id));
    }

    /// Moves `node` to `to`, doing `act` to its madsim node, if `from`
    /// accepts the condition it is in.
    fn shift(
        &self,
        node: &Node,
        from: fn(Condition) -> bool,
        to: Condition,
        act: fn(&Handle, NodeId),
    ) {
        let mut nodes = self.nodes();
        if let Some(n) = nodes.get_mut(node.0).filter(|n| from(n.condition)) {
            n.condition = to;
            act(&Handle::current(), n.id);
        }
    }

    /// Ends every partition of `node` and resumes it if it was paused.
    pub fn heal(&self, node: &Node) {
        if let Some(id) = self.id(node) {
            let net = NetSim::current();
            net.unclog_link(id, self.inner.etcd_node);
            net.unclog_link(self.inner.etcd_node, id);
        }
        self.resume(node);
    }

    /// etcd's leader changes: every request fails with "no leader" for
    /// `unavailable`, every open watch and keep-alive stream breaks, and
    /// every lease's TTL starts over (as a new etcd leader does), so a
    /// lease may outlive its holder by up to that long.
    pub fn etcd_leader_change(&self, unavailable: Duration) {
        self.on_etcd(hooks::leader_change(
            self.inner.etcd.clone(),
            self.inner.etcd_ep.clone(),
            self.inner.start,
            unavailable,
        ));
    }

    /// Compacts etcd's history at its current revision: a watch resumed
    /// from an older revision is told it was compacted. Returns that
    /// revision, or `None` when there is nothing to compact yet.
    pub fn compact(&self) -> Option<i64> {
        let mut st = lock(&self.inner.etcd);
        let revision = st.model.revision();
        st.model.compact(revision).ok().map(|()| revision)
    }

    /// etcd is wiped (or restored from a snapshot older than anything
    /// written): down for `down`, refusing connections, then back empty at
    /// revision 1, with no lease and under a new cluster id.
    pub fn wipe(&self, down: Duration) {
        self.on_etcd(hooks::wipe(
            self.inner.etcd.clone(),
            self.inner.etcd_ep.clone(),
            self.inner.start,
            down,
            Wiped {
                new_cluster: true,
                refusing: true,
            },
        ));
    }

    /// For `duration`, etcd applies every request but answers none (its
    /// answers are lost on the way): each outcome is unknown to its client.
    pub fn unanswered_requests(&self, duration: Duration) {
        let now = self.now_ms();
        let mut st = lock(&self.inner.etcd);
        let until = now.saturating_add(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
        st.drop_replies_until = st.drop_replies_until.max(until);
    }

    fn on_etcd(&self, hook: impl Future<Output = ()> + Send + 'static) {
        if let Some(node) = Handle::current().get_node(self.inner.etcd_node) {
            node.spawn(hook);
        }
    }

    fn id(&self, node: &Node) -> Option<NodeId> {
        self.nodes().get(node.0).map(|n| n.id)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Kills every node, so that their tasks (and the world they hold)
    /// are freed with the runtime.
    fn tear_down(&self) {
        let handle = Handle::current();
        let ids: Vec<NodeId> = self.nodes().iter().map(|n| n.id).collect();
        for id in ids {
            handle.kill(id);
        }
        handle.kill(self.inner.etcd_node);
    }
}

/// The address of the `index`th node: 10.1.x.y.
fn node_ip(index: usize) -> IpAddr {
    let [_, _, hi, lo] = u32::try_from(index + 1).unwrap_or(u32::MAX).to_be_bytes();
    IpAddr::V4(Ipv4Addr::new(10, 1, hi, lo))
}

/// What your code did, each entry stamped with the virtual time and the
/// order it was recorded in: record from any node, read after (or during)
/// the run. Cheap to clone; every clone is the same log.
pub struct Recorder<E> {
    start: Instant,
    entries: Arc<Mutex<Vec<Recorded<E>>>>,
}

impl<E> Clone for Recorder<E> {
    fn clone(&self) -> Self {
        Recorder {
            start: self.start,
            entries: Arc::clone(&self.entries),
        }
    }
}

impl<E> fmt::Debug for Recorder<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("entries", &self.lock().len())
            .finish()
    }
}

/// One entry of a [`Recorder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded<E> {
    /// Virtual time since the world began.
    pub at: Duration,
    /// What was recorded.
    pub event: E,
}

impl<E: Clone> Recorder<E> {
    /// An empty log for `cluster`'s world.
    pub fn new(cluster: &Cluster) -> Self {
        Recorder {
            start: cluster.inner.start,
            entries: Arc::default(),
        }
    }

    /// Records `event` now.
    pub fn record(&self, event: E) {
        let at = self.start.elapsed();
        self.lock().push(Recorded { at, event });
    }

    /// Every entry so far, in the order recorded.
    pub fn entries(&self) -> Vec<Recorded<E>> {
        self.lock().clone()
    }
}

impl<E> Recorder<E> {
    fn lock(&self) -> MutexGuard<'_, Vec<Recorded<E>>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
