//! The prober one client shares among its handles (`ProbeHub`): it probes
//! only while some loop waits out a backoff, wakes every loop of the
//! client when etcd answers again, is told at once when a loop finds etcd
//! silent, and stops probing when the loops that waited are gone.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::driver_tests::test_fakes::{block_on_within, lock, ChannelKeeper, NoWatch};
use coord::{
    BackoffConfig, EtcdApi, EtcdError, Granted, HostLiveness, HostMetadata, KeepAliveReplies,
    LeaseId, LivenessOptions, LivenessStatus, Pacing, ProbeHub, Revision,
};
use coord_core::io::{Listing, RangeRequest, Txn, TxnOp, TxnOpResponse, TxnResponse};
use coord_core::probe::{ProbeConfig, PROBE_KEY};
use coord_core::ClusterId;
use madsim::time::Instant;
use tokio::sync::{mpsc, watch};

/// An etcd that grants leases and answers reads, transactions (each one's
/// failure branch) and keep-alives, and that can be made silent: while it
/// is, nothing sent to it is answered, ever (a request sent then stays
/// unanswered after it answers again, as a lost packet), and keep-alives
/// get no reply. Records when each probe (a read of [`PROBE_KEY`]) was
/// sent and when the client was told that etcd went silent, and shares
/// one prober among the handles made from it, as a real client does.
#[derive(Clone)]
struct Switchable {
    silent: Arc<AtomicBool>,
    leases: Arc<AtomicI64>,
    probes: Arc<Mutex<Vec<Duration>>>,
    told_silent: Arc<Mutex<Vec<Duration>>>,
    start: Instant,
    /// `None` in the probe task's own copy (it must not keep the hub
    /// alive).
    hub: Option<ProbeHub>,
}

impl Switchable {
    fn new() -> Self {
        Switchable {
            silent: Arc::default(),
            leases: Arc::default(),
            probes: Arc::default(),
            told_silent: Arc::default(),
            start: Instant::now(),
            hub: Some(ProbeHub::new()),
        }
    }

    fn set_silent(&self, silent: bool) {
        self.silent.store(silent, Ordering::SeqCst);
    }

    fn is_silent(&self) -> bool {
        self.silent.load(Ordering::SeqCst)
    }

    /// `value`, or never if etcd is silent.
    async fn answer<T>(&self, value: T) -> T {
        if self.is_silent() {
            std::future::pending::<()>().await;
        }
        value
    }

    fn probes(&self) -> usize {
        lock(&self.probes).len()
    }
}

/// A reply per keep-alive sent while etcd answers.
struct Replies(mpsc::UnboundedReceiver<()>, Arc<AtomicBool>);

impl KeepAliveReplies for Replies {
    async fn next(&mut self) -> Option<Result<i64, EtcdError>> {
        loop {
            self.0.recv().await?;
            if !self.1.load(Ordering::SeqCst) {
                return Some(Ok(10));
            }
        }
    }
}

impl EtcdApi for Switchable {
    type Keeper = ChannelKeeper;
    type Replies = Replies;
    type WatchControl = NoWatch;
    type WatchEvents = NoWatch;

    async fn range(&self, request: RangeRequest) -> Result<Listing, EtcdError> {
        if request.get.key.0 == PROBE_KEY {
            lock(&self.probes).push(self.start.elapsed());
        }
        let listing = Listing {
            cluster: ClusterId(1),
            ..Listing::complete(Vec::new(), Revision(2))
        };
        Ok(self.answer(listing).await)
    }
    async fn txn(&self, txn: Txn) -> Result<TxnResponse, EtcdError> {
        let responses = txn
            .failure
            .iter()
            .filter(|op| matches!(op, TxnOp::Put { .. }))
            .map(|_| TxnOpResponse::Put)
            .collect();
        let response = TxnResponse {
            succeeded: false,
            revision: Revision(2),
            responses,
            cluster: ClusterId(1),
        };
        Ok(self.answer(response).await)
    }
    async fn watch(
        &self,
        _key: Vec<u8>,
        _prefix: bool,
        _start: Revision,
    ) -> Result<(NoWatch, NoWatch), EtcdError> {
        Err(EtcdError::Unavailable("not in this test".into()))
    }
    async fn lease_grant(&self, ttl_secs: i64) -> Result<Granted, EtcdError> {
        let lease = LeaseId(self.leases.fetch_add(1, Ordering::SeqCst) + 1);
        Ok(self.answer(Granted { lease, ttl_secs }).await)
    }
    async fn lease_revoke(&self, _lease: LeaseId) -> Result<(), EtcdError> {
        self.answer(Ok(())).await
    }
    async fn lease_keep_alive(
        &self,
        _lease: LeaseId,
    ) -> Result<(ChannelKeeper, Replies), EtcdError> {
        self.answer(()).await;
        let (tx, rx) = mpsc::unbounded_channel();
        // The open sends the first keep-alive.
        let _ = tx.send(());
        Ok((ChannelKeeper(tx), Replies(rx, Arc::clone(&self.silent))))
    }
    fn probe_hub(&self) -> Option<ProbeHub> {
        self.hub.clone()
    }
    fn for_probe(&self) -> Self {
        Switchable {
            hub: None,
            ..self.clone()
        }
    }
    async fn silent(&self) {
        lock(&self.told_silent).push(self.start.elapsed());
    }
}

/// A slow failure (a request unanswered) waits 50-100 s: long past the
/// few seconds a loop woken by etcd's return takes to come back.
const SLOW_WAIT: Duration = Duration::from_secs(100);

/// How long etcd stays silent: past the 10 s TTL, so that each host
/// registers again, and long enough that both wait out a slow failure.
const SILENCE: Duration = Duration::from_secs(40);

/// A host's options: a 10 s TTL, 1 s request timeout, and slow failures
/// waited out for [`SLOW_WAIT`] (equal jitter).
fn options(seed: u64) -> LivenessOptions {
    LivenessOptions::default()
        .with_ttl(Duration::from_secs(10))
        .with_request_timeout(Duration::from_secs(1))
        .with_backoff(
            BackoffConfig::default()
                .with_initial(SLOW_WAIT)
                .with_multiplier(1)
                .with_cap(SLOW_WAIT)
                .with_fast_cap(Duration::from_secs(1))
                .with_pacing(Pacing::Adaptive),
        )
        .with_seed(seed)
}

/// Waits (a virtual minute at most) until `state` says what `wanted`
/// accepts.
async fn until(
    state: &mut watch::Receiver<LivenessStatus>,
    wanted: impl FnMut(&LivenessStatus) -> bool,
    what: &str,
) -> Result<(), String> {
    match madsim::time::timeout(Duration::from_secs(60), state.wait_for(wanted)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(_)) => Err(format!("the host's loop ended before {what}")),
        Err(_) => Err(format!("not {what} after a minute")),
    }
}

fn healing(s: &LivenessStatus) -> bool {
    matches!(s, LivenessStatus::Healing { .. })
}

fn registered(s: &LivenessStatus) -> bool {
    matches!(s, LivenessStatus::Registered { .. })
}

/// What the two hosts sharing one client saw.
#[derive(Debug)]
struct Seen {
    /// Probes counted once both hosts registered, and 10 s later (etcd
    /// answering everything).
    probes_while_healthy: (usize, usize),
    /// How often the client was told etcd went silent before it did.
    told_while_healthy: usize,
    /// When the client was first told etcd went silent, and when the first
    /// probe of the silence was sent (since the start).
    first_told_silent: Option<Duration>,
    first_probe: Option<Duration>,
    /// How long after etcd answered again each host was registered again.
    back_after: Vec<Duration>,
    /// Probes counted 10 s after both came back, and 30 s later.
    probes_once_back: (usize, usize),
    /// Probes counted 5 s after both hosts, waiting out a backoff in a
    /// second silence, were dropped, and 30 s later.
    probes_once_dropped: (usize, usize),
}

/// Two hosts registered through one client; 10 s later etcd goes silent
/// for [`SILENCE`], then answers again; once both are back and a while
/// has passed, etcd goes silent again and, once a probe shows a loop
/// waiting, both handles are dropped.
async fn two_hosts_through_a_silence() -> Result<Seen, String> {
    let etcd = Switchable::new();
    let mut hosts = Vec::new();
    let mut states = Vec::new();
    for (seed, id) in [(1, "h1"), (2, "h2")] {
        let meta = HostMetadata::new(id, "example");
        let host = HostLiveness::register(etcd.clone(), meta, options(seed))
            .await
            .map_err(|e| e.to_string())?;
        states.push(host.state());
        hosts.push(host);
    }
    // Registering waits on etcd: a probe may go out meanwhile.
    let once_registered = etcd.probes();
    madsim::time::sleep(Duration::from_secs(10)).await;
    let probes_while_healthy = (once_registered, etcd.probes());
    let told_while_healthy = lock(&etcd.told_silent).len();

    etcd.set_silent(true);
    let silenced = Instant::now();
    let silenced_since_start = etcd.start.elapsed();
    for state in &mut states {
        until(state, healing, "healing in the silence").await?;
    }
    madsim::time::sleep_until(silenced + SILENCE).await;
    let first_told_silent = lock(&etcd.told_silent).first().copied();
    let first_probe = lock(&etcd.probes)
        .iter()
        .copied()
        .find(|at| *at >= silenced_since_start);
    etcd.set_silent(false);
    let returned = Instant::now();
    let mut back_after = Vec::new();
    for state in &mut states {
        until(state, registered, "registered after etcd's return").await?;
        back_after.push(returned.elapsed());
    }
    madsim::time::sleep(Duration::from_secs(10)).await;
    let settled = etcd.probes();
    madsim::time::sleep(Duration::from_secs(30)).await;
    let probes_once_back = (settled, etcd.probes());

    etcd.set_silent(true);
    for state in &mut states {
        until(state, healing, "healing in the second silence").await?;
    }
    let before = etcd.probes();
    let deadline = Instant::now() + Duration::from_secs(60);
    while etcd.probes() == before {
        if Instant::now() > deadline {
            return Err("no probe in the second silence".into());
        }
        madsim::time::sleep(Duration::from_millis(100)).await;
    }
    drop(hosts);
    madsim::time::sleep(Duration::from_secs(5)).await;
    let dropped = etcd.probes();
    madsim::time::sleep(Duration::from_secs(30)).await;
    Ok(Seen {
        probes_while_healthy,
        told_while_healthy,
        first_told_silent,
        first_probe,
        back_after,
        probes_once_back,
        probes_once_dropped: (dropped, etcd.probes()),
    })
}

/// Changes nothing.
#[derive(Clone)]
struct PassThrough;

impl coord::etcd::Intercept for PassThrough {}

/// A client wrapped in an interceptor shares its hub with the handles
/// made from it, as the client itself does: the hub passed through is
/// the wrapped client's (its own probing pace shows it), not a fresh one;
/// and a silence found is told to the wrapped client.
#[test]
fn an_intercepted_client_lends_the_wrapped_clients_hub_and_hears_of_silences() {
    let paced = ProbeConfig::default().with_interval(Duration::from_secs(7));
    let told = block_on_within(17, async {
        let inner = Switchable::new();
        let told = Arc::clone(&inner.told_silent);
        coord::etcd::Intercepted::new(inner, PassThrough)
            .silent()
            .await;
        let n = lock(&told).len();
        n
    });
    assert_eq!(told, 1, "the silence was not passed through");
    let inner = Switchable {
        hub: Some(ProbeHub::with_config(paced.clone())),
        ..Switchable::new()
    };
    let wrapped = coord::etcd::Intercepted::new(inner, PassThrough);
    let lent = wrapped.probe_hub().map(|hub| format!("{hub:?}"));
    let own = format!("{:?}", ProbeHub::with_config(paced));
    assert_eq!(lent, Some(own));
    assert_ne!(
        lent,
        Some(format!("{:?}", ProbeHub::new())),
        "the paced hub's text must differ from a fresh one's"
    );
}

#[test]
fn loops_sharing_a_client_probe_only_while_one_waits_and_all_wake_when_etcd_returns() {
    let seen = match block_on_within(11, two_hosts_through_a_silence()) {
        Ok(seen) => seen,
        Err(e) => panic!("the scenario did not run: {e}"),
    };
    let (once_registered, later) = seen.probes_while_healthy;
    assert_eq!(
        once_registered, later,
        "probes with no loop waiting: {seen:?}"
    );
    assert_eq!(
        seen.told_while_healthy, 0,
        "the client told of a silence while etcd answered: {seen:?}"
    );
    // A loop that finds etcd silent tells the client at once (it may
    // re-dial), not only when a probe's own timeout says so a second later.
    match (seen.first_told_silent, seen.first_probe) {
        (Some(told), Some(probe)) => assert!(
            told <= probe,
            "told of the silence at {told:?}, after the first probe at {probe:?}"
        ),
        _ => panic!("no silence told or no probe sent: {seen:?}"),
    }
    // Every loop of the client is woken: back within a probe interval, the
    // fast cap and a few round trips, not after its 50-100 s wait.
    assert_eq!(seen.back_after.len(), 2);
    for (host, back) in seen.back_after.iter().enumerate() {
        assert!(
            *back <= Duration::from_secs(4),
            "host {host} registered again {back:?} after etcd's return"
        );
    }
    let (settled, later) = seen.probes_once_back;
    assert_eq!(settled, later, "probes with every loop back: {seen:?}");
    let (dropped, later) = seen.probes_once_dropped;
    assert_eq!(
        dropped, later,
        "probes after the waiting loops were dropped: {seen:?}"
    );
}
