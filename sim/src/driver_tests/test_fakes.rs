//! Stand-ins shared by the simulator's tests of single handles against
//! hand-written etcds, for the parts a test does not exercise, and the
//! pieces shared by tests that bend the simulated etcd's watch streams.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;

use coord::{
    ElectionPool, EtcdApi, EtcdError, Granted, KeepAliveReplies, KeepAliveSender, Leadership,
    LeaseId, Revision, SessionOptions, WatchControl, WatchEvents, WatchMessage,
};
use coord_core::io::{Listing, MessageKind, RangeRequest, Txn, TxnResponse};
use coord_core::ClusterId;
use madsim::net::Endpoint;
use madsim::runtime::Handle;
use madsim::time::Instant;

use crate::etcd::client::{
    ClientLog, SimEtcd, SimKeeper, SimReplies, SimWatchControl, SimWatchEvents,
};
use crate::etcd::server;

/// `m`'s guard, even if a panicking thread poisoned it (a test's records
/// are still worth reading).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A keep-alive stream of a lease etcd does not know: sends fail with
/// "lease not found", and no reply ever comes.
pub(crate) struct NoLease;

impl KeepAliveSender for NoLease {
    async fn send(&mut self) -> Result<(), EtcdError> {
        Err(EtcdError::LeaseNotFound)
    }
}

impl KeepAliveReplies for NoLease {
    async fn next(&mut self) -> Option<Result<i64, EtcdError>> {
        None
    }
}

/// A keep-alive sender whose keep-alives go down a channel, for a fake's
/// replies to answer; a send fails once the replying side is gone.
pub(crate) struct ChannelKeeper(pub(crate) tokio::sync::mpsc::UnboundedSender<()>);

impl KeepAliveSender for ChannelKeeper {
    async fn send(&mut self) -> Result<(), EtcdError> {
        self.0
            .send(())
            .map_err(|_| EtcdError::Unavailable("gone".into()))
    }
}

/// A watch that takes progress requests and ends at once.
pub(crate) struct NoWatch;

impl WatchControl for NoWatch {
    async fn request_progress(&mut self) -> Result<(), EtcdError> {
        Ok(())
    }
    async fn cancel(&mut self) {}
}

impl WatchEvents for NoWatch {
    async fn next(&mut self) -> Option<Result<WatchMessage, EtcdError>> {
        None
    }
}

/// How a test bends the simulated etcd: what its watch streams deliver
/// and what its keep-alive senders do. Everything else passes through
/// unchanged (see [`Bent`]). For a stream that keeps one read in flight
/// across calls, which an [`Intercept`](coord::etcd::Intercept) (one call
/// at a time on the stream it is lent) cannot; every other test that edits
/// or observes traffic intercepts it.
pub(crate) trait Bend: Clone + Send + Sync + 'static {
    /// The bent watch stream's messages.
    type WatchEvents: WatchEvents;
    /// The bent keep-alive sender.
    type Keeper: KeepAliveSender;

    /// The stream a watch of `key` from `start` delivers, made of the real
    /// one.
    fn watch(&self, key: &[u8], start: Revision, events: SimWatchEvents) -> Self::WatchEvents;

    /// The keep-alive sender of a lease's stream, made of the real one.
    fn keeper(&self, keeper: SimKeeper) -> Self::Keeper;
}

/// A client of the simulated etcd, bent by `B`; the rest of its API passes
/// through to the real client.
#[derive(Clone)]
pub(crate) struct Bent<B> {
    pub(crate) inner: SimEtcd,
    pub(crate) bend: B,
}

impl<B: Bend> EtcdApi for Bent<B> {
    type Keeper = B::Keeper;
    type Replies = SimReplies;
    type WatchControl = SimWatchControl;
    type WatchEvents = B::WatchEvents;

    async fn range(&self, request: RangeRequest) -> Result<Listing, EtcdError> {
        self.inner.range(request).await
    }
    async fn txn(&self, txn: Txn) -> Result<TxnResponse, EtcdError> {
        self.inner.txn(txn).await
    }
    async fn watch(
        &self,
        key: Vec<u8>,
        prefix: bool,
        start: Revision,
    ) -> Result<(SimWatchControl, B::WatchEvents), EtcdError> {
        let bent_key = key.clone();
        let (control, events) = self.inner.watch(key, prefix, start).await?;
        Ok((control, self.bend.watch(&bent_key, start, events)))
    }
    async fn lease_grant(&self, ttl_secs: i64) -> Result<Granted, EtcdError> {
        self.inner.lease_grant(ttl_secs).await
    }
    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), EtcdError> {
        self.inner.lease_revoke(lease).await
    }
    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<(B::Keeper, SimReplies), EtcdError> {
        let (keeper, replies) = self.inner.lease_keep_alive(lease).await?;
        Ok((self.bend.keeper(keeper), replies))
    }
    fn probe_hub(&self) -> Option<coord::ProbeHub> {
        self.inner.probe_hub()
    }
    fn for_probe(&self) -> Self {
        Bent {
            inner: self.inner.for_probe(),
            bend: self.bend.clone(),
        }
    }
    async fn silent(&self) {
        self.inner.silent().await;
    }
}

/// The longest a simulator unit test may wait, in virtual time: far
/// beyond what any of them takes (a minute at most), so that a test whose
/// awaited future never completes (a loop that misses a wake-up, say)
/// fails at once instead of hanging its test binary in wall-clock time
/// while the virtual clock runs on.
pub(crate) const TEST_LIMIT: std::time::Duration = std::time::Duration::from_secs(3600);

/// Runs `test` to its end in a fresh madsim runtime seeded with `seed`.
/// Panics if it has not ended after [`TEST_LIMIT`] of virtual time.
pub(crate) fn block_on_within<T>(seed: u64, test: impl Future<Output = T>) -> T {
    let rt = madsim::runtime::Runtime::with_seed_and_config(seed, madsim::Config::default());
    rt.block_on(async move {
        match madsim::time::timeout(TEST_LIMIT, test).await {
            Ok(out) => out,
            Err(_) => panic!("the test still waited after {TEST_LIMIT:?} of virtual time"),
        }
    })
}

/// Runs `test` in a madsim runtime seeded with `seed`, on a client node
/// of its own beside a simulated etcd (see [`simulated_etcd`]), and
/// returns what it returns; `test` gets etcd's address and the time it
/// started. Panics as [`block_on_within`] does.
pub(crate) fn run_beside_etcd<T, F, Fut>(seed: u64, test: F) -> Result<T, String>
where
    F: FnOnce(SocketAddr, Instant) -> Fut,
    Fut: Future<Output = Result<T, String>> + Send + 'static,
    T: Send + 'static,
{
    block_on_within(seed, async move {
        let (etcd_addr, start) = simulated_etcd().await?;
        let client = Handle::current()
            .create_node()
            .name("client")
            .ip(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10)))
            .build();
        let run = client.spawn(test(etcd_addr, start));
        run.await.map_err(|e| format!("{e:?}"))?
    })
}

/// A client of the simulated etcd at `etcd`, numbered `client` in its
/// history.
pub(crate) async fn sim_client(
    etcd: SocketAddr,
    client: u64,
    start: Instant,
) -> Result<SimEtcd, String> {
    SimEtcd::connect(etcd, client, ClientLog::new(start))
        .await
        .map_err(|e| e.to_string())
}

/// A rival: a pool of its own (client 2) leading each of `names`, in
/// order. Returns the pool and its leaderships.
pub(crate) async fn rival_leading(
    etcd: SocketAddr,
    start: Instant,
    opts: &SessionOptions,
    names: &[&str],
) -> Result<(ElectionPool, Vec<Leadership>), String> {
    let fail = |e: coord::Error| e.to_string();
    let rival = ElectionPool::new(sim_client(etcd, 2, start).await?, opts.clone())
        .await
        .map_err(fail)?;
    let mut held = Vec::new();
    for name in names {
        let election = rival.election(name).map_err(fail)?;
        held.push(election.campaign("rival").await.map_err(fail)?);
    }
    Ok((rival, held))
}

/// Starts the simulated etcd on a node of its own; returns its address
/// and the time it started.
pub(crate) async fn simulated_etcd() -> Result<(SocketAddr, Instant), String> {
    let etcd = simulated_etcd_node().await?;
    Ok((etcd.addr, etcd.start))
}

/// A simulated etcd on a node of its own, with what a test needs to act
/// on it (a leader change, say).
pub(crate) struct SimulatedEtcd {
    pub(crate) addr: SocketAddr,
    pub(crate) start: Instant,
    pub(crate) state: server::SharedEtcd,
    pub(crate) ep: Endpoint,
    pub(crate) node: madsim::runtime::NodeHandle,
}

/// Starts the simulated etcd on a node of its own.
pub(crate) async fn simulated_etcd_node() -> Result<SimulatedEtcd, String> {
    let start = Instant::now();
    let etcd_addr = SocketAddr::from((Ipv4Addr::new(192, 0, 2, 1), 2379));
    let etcd = server::new_state();
    let etcd_node = Handle::current()
        .create_node()
        .name("etcd")
        .ip(etcd_addr.ip())
        .build();
    let Ok(Ok(ep)) = etcd_node.spawn(Endpoint::bind(etcd_addr)).await else {
        return Err("etcd's endpoint".to_string());
    };
    etcd_node.spawn(server::serve(etcd.clone(), ep.clone(), start));
    etcd_node.spawn(server::lessor(etcd.clone(), start));
    etcd_node.spawn(server::flush_watches(etcd.clone(), ep.clone()));
    Ok(SimulatedEtcd {
        addr: etcd_addr,
        start,
        state: etcd,
        ep,
        node: etcd_node,
    })
}

/// A simulated watch stream's next message, read by a future that owns
/// the stream: dropping the wait for it loses nothing.
pub(crate) type NextMessage =
    Pin<Box<dyn Future<Output = (SimWatchEvents, Option<Result<WatchMessage, EtcdError>>)> + Send>>;

/// Waits for `events`' next message.
pub(crate) fn next_message(mut events: SimWatchEvents) -> NextMessage {
    Box::pin(async move {
        let m = events.next().await;
        (events, m)
    })
}

/// What a watch stream has delivered so far, so that a progress
/// notification made up by a test claims no more than that: every event
/// up to the last one delivered, or, before any, up to the revision before
/// the watch's start (a `Created` header names etcd's revision, not what
/// the stream has sent).
pub(crate) struct Delivered {
    /// The revision every event up to which was delivered, and the
    /// cluster; `None` until `Created`.
    last: Option<(Revision, ClusterId)>,
    start: Revision,
}

impl Delivered {
    /// Nothing delivered yet from a watch that starts at `start`.
    pub(crate) fn new(start: Revision) -> Self {
        Delivered { last: None, start }
    }

    /// Whether the stream was created (a progress can be made up).
    pub(crate) fn created(&self) -> bool {
        self.last.is_some()
    }

    /// Notes a message the stream delivered.
    pub(crate) fn saw(&mut self, m: &WatchMessage) {
        let delivered = match m.kind {
            MessageKind::Created => Revision(self.start.0.saturating_sub(1)),
            MessageKind::Progress => m.revision,
            _ => m
                .events
                .iter()
                .map(|e| e.revision())
                .max()
                .unwrap_or(m.revision),
        };
        let before = self.last.map_or(Revision(0), |(r, _)| r);
        self.last = Some((delivered.max(before), m.cluster));
    }

    /// A true progress notification of what was delivered; `None` before
    /// `Created`.
    pub(crate) fn progress(&self) -> Option<WatchMessage> {
        self.last.map(|(revision, cluster)| WatchMessage {
            kind: MessageKind::Progress,
            events: Vec::new(),
            revision,
            cluster,
        })
    }
}

/// Puts each of `hosts` under the default prefix (`{}`, no lease) in one
/// transaction through `api`; returns the revision it made.
pub(crate) async fn put_hosts<A: coord::EtcdApi>(
    api: &A,
    hosts: impl IntoIterator<Item = String>,
) -> Result<coord::Revision, String> {
    let success = hosts
        .into_iter()
        .map(|h| coord_core::io::TxnOp::Put {
            key: coord::Key(format!("/coord/hosts/{h}").into_bytes()),
            value: b"{}".to_vec(),
            lease: coord::LeaseId(0),
        })
        .collect();
    let txn = coord_core::io::Txn {
        compares: Vec::new(),
        success,
        failure: Vec::new(),
    };
    api.txn(txn)
        .await
        .map(|r| r.revision)
        .map_err(|e| e.to_string())
}

/// A host event as the watcher tests compare it: `up <host>`, `synced`,
/// or its Debug text.
pub(crate) fn event_label(event: coord::HostEvent<serde_json::Value>) -> String {
    match event {
        coord::HostEvent::Up { host, .. } => format!("up {host}"),
        coord::HostEvent::Synced { .. } => "synced".to_string(),
        other => format!("{other:?}"),
    }
}
