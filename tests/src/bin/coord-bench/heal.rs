//! Benchmark 3, heal: etcd out (killed and restarted, SIGSTOPped and
//! continued, blackholed through a TCP proxy, or unreachable because the
//! `etcd grpc-proxy` the hosts use was killed and started again) for a
//! while, then the time
//! from etcd answering again to each host's lease kept alive again: the
//! first live keep-alive reply that came after that instant or answers a
//! keep-alive sent once the outage began (0 if etcd answered it before the
//! probe for its return). Replies are paired with their sends in stream
//! order, so a reply still in flight when the outage began is not taken
//! for a heal. By then the
//! key is on that lease (a resumed lease kept it; a new one is attached
//! before its stream opens).
//!
//! Each round registers hosts of both policies side by side through the
//! same proxy, so they live through the very same outage: coord's
//! (adaptive pacing, resume), and the go-coord-style baseline run through
//! the same driver with only the policy swapped ([`Pacing::Plain`](coord::Pacing::Plain):
//! 100 ms doubling to 30 s, no jitter, no fast class, blind to etcd's
//! return; a lost lease replaced, not resumed). Each host has its own
//! client (its own connection), and the outage begins at a random phase
//! of their keep-alive cycle. After a SIGSTOP, the table's note gives
//! etcd's own answer after SIGCONT to a read queued while it was stopped:
//! about the least time in which any policy can heal.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use coord::etcd::{Intercept, Intercepted, KeepAliveStream};
use coord::{
    ConnectOptions, EtcdApi, EtcdError, HostLiveness, HostMetadata, KeepAliveReplies,
    KeepAliveSender,
};
use coord_tests::etcd::EtcdCluster;
use coord_tests::grpc_proxy::GrpcProxy;
use coord_tests::proxy::{Mode, Proxy};

use crate::policy::Policy;
use crate::stats::{summary, Comparison, Series, Statistic};
use crate::{ms_since, Rng, Settings};

const PREFIX: &str = "/bench/heal/hosts/";
/// How long after etcd answers a host may take before its trial is left
/// out: the baseline's 30 s cap, a request timeout and margin.
const DEADLINE: Duration = Duration::from_secs(120);

/// How etcd is taken out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outage {
    /// kill -9, then started again on its data (leases kept).
    Restart,
    /// SIGSTOP, then SIGCONT.
    Stop,
    /// The proxy forwards nothing (connections stay open), then passes
    /// again, closing the stale connections.
    Blackhole,
    /// The hosts reach etcd through `etcd grpc-proxy`, which is killed,
    /// then started again on its port (etcd itself runs throughout).
    GrpcProxy,
}

impl Outage {
    const ALL: [Outage; 4] = [
        Outage::Restart,
        Outage::Stop,
        Outage::Blackhole,
        Outage::GrpcProxy,
    ];

    /// The outage whose [`id`](Self::id) is `id`.
    pub fn named(id: &str) -> Option<Outage> {
        Outage::ALL.into_iter().find(|o| o.id() == id)
    }

    fn id(self) -> &'static str {
        match self {
            Outage::Restart => "restart",
            Outage::Stop => "sigstop",
            Outage::Blackhole => "blackhole",
            Outage::GrpcProxy => "grpc-proxy",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Outage::Restart => "killed and restarted",
            Outage::Stop => "SIGSTOPped",
            Outage::Blackhole => "blackholed",
            Outage::GrpcProxy => "behind a grpc-proxy killed and restarted",
        }
    }
}

/// Runs the benchmark: every outage kind for every length of the settings.
pub async fn run(etcd: &mut EtcdCluster, s: &Settings, rng: &mut Rng) -> Vec<Comparison> {
    let member = etcd.members()[0].endpoint();
    let proxy = Proxy::start(&member).await;
    let mut grpc = GrpcProxy::start(std::slice::from_ref(&member)).await;
    let mut out = Vec::new();
    for outage in Outage::ALL {
        if s.heal_only.is_some_and(|only| only != outage) {
            continue;
        }
        for &secs in &s.outages {
            let mut coord_ms = Vec::new();
            let mut plain_ms = Vec::new();
            let mut floor_ms = Vec::new();
            for round in 0..s.heal_rounds {
                let length = Duration::from_secs(secs);
                let (heals, floor) = trial(etcd, (&proxy, &mut grpc), outage, length, s, rng).await;
                eprintln!(
                    "coord-bench heal: {} {secs} s, round {round}: {heals:?}, etcd's first answer {floor:?} ms",
                    outage.id()
                );
                floor_ms.extend(floor);
                for (policy, ms) in heals {
                    match (policy, ms) {
                        (Policy::Coord, Some(ms)) => coord_ms.push(ms),
                        (Policy::Plain, Some(ms)) => plain_ms.push(ms),
                        (_, None) => eprintln!("coord-bench: a host did not heal; left out"),
                    }
                }
            }
            let p99 = |v: &[f64]| summary(v).map(|s| s.p99);
            let mut note = match (p99(&coord_ms), p99(&plain_ms)) {
                (Some(c), Some(b)) if b > 0.0 => {
                    format!("p99 ratio {:.3} (goal: under 0.1)", c / b)
                }
                _ => String::new(),
            };
            if let (Some(f), Some(b)) = (summary(&floor_ms), p99(&plain_ms)) {
                let _ = write!(
                    note,
                    "\n  etcd's own answer after SIGCONT to a read queued while it was stopped: \
                     min {:.1}, median {:.1}, max {:.1} ms (a tenth of the baseline's p99 is {:.1} ms)",
                    f.min,
                    f.median,
                    f.max,
                    b / 10.0,
                );
            }
            let note = (!note.is_empty()).then_some(note);
            out.push(Comparison {
                id: format!("heal-{}-{secs}s", outage.id()),
                title: format!(
                    "Heal: etcd {} for {secs} s, etcd answering to the lease kept alive again",
                    outage.what()
                ),
                unit: "ms",
                lower_is_better: true,
                coord: Series {
                    subject: "coord (adaptive, resume)".into(),
                    values: coord_ms,
                },
                baseline: Series {
                    subject: "go-coord-style policy (plain doubling, replace)".into(),
                    values: plain_ms,
                },
                ratio_of: Statistic::Median,
                note,
            });
        }
    }
    out
}

/// One outage with `hosts` hosts of each policy: each host's heal, ms
/// (`None`: not healed within [`DEADLINE`]), and after a SIGSTOP etcd's
/// own first answer after SIGCONT, ms (see [`take_out`]).
async fn trial(
    etcd: &mut EtcdCluster,
    (proxy, grpc): (&Proxy, &mut GrpcProxy),
    outage: Outage,
    length: Duration,
    s: &Settings,
    rng: &mut Rng,
) -> (Vec<(Policy, Option<f64>)>, Option<f64>) {
    let (hosts, ttl) = (s.heal_hosts, s.heal_ttl);
    let run = rng.below(u64::MAX);
    let started = Instant::now();
    let endpoint = match outage {
        Outage::GrpcProxy => grpc.endpoint(),
        Outage::Restart | Outage::Stop | Outage::Blackhole => proxy.endpoint(),
    };
    let mut fleet = Vec::new();
    for policy in [Policy::Coord, Policy::Plain] {
        for j in 0..hosts {
            let id = format!("heal-{run:x}-{policy:?}-{j}");
            let seed = rng.below(u64::MAX);
            fleet.push(Subject::register(&endpoint, &id, policy, ttl, seed).await);
        }
    }
    // Every host kept alive at least once, then a random phase of the
    // keep-alive cycle.
    for h in &fleet {
        h.heal(started, started, DEADLINE).await;
    }
    // A fleet in its steady state has taken its census (`--heal-settle`).
    tokio::time::sleep(s.heal_settle).await;
    let refresh_ms = u64::try_from((ttl / 3).as_millis()).unwrap_or(3_333);
    tokio::time::sleep(Duration::from_millis(rng.below(refresh_ms))).await;
    let began = Instant::now();
    let (answering, floor) = take_out(etcd, (proxy, grpc), outage, length).await;
    // etcd may answer a host's retry a little before the probe for its
    // return does: such a heal counts as 0.
    let mut heals = Vec::new();
    for h in &fleet {
        let healed = h.heal(began, answering, DEADLINE).await;
        heals.push((h.policy, healed.map(|at| ms_since(at, answering))));
    }
    for h in fleet {
        let _ = tokio::time::timeout(Duration::from_secs(10), h.host.stop()).await;
    }
    (heals, floor.map(|d| d.as_secs_f64() * 1e3))
}

/// Takes etcd out for `length`; returns when it answered again, and after
/// a SIGSTOP how long after SIGCONT etcd answered a read sent to it a
/// second before (over a connection of its own, opened before the stop):
/// about the least time in which a client hears from it, whatever it had
/// queued (a request queued earlier may be answered a little sooner).
async fn take_out(
    etcd: &mut EtcdCluster,
    (proxy, grpc): (&Proxy, &mut GrpcProxy),
    outage: Outage,
    length: Duration,
) -> (Instant, Option<Duration>) {
    match outage {
        Outage::Restart => {
            etcd.kill(0);
            tokio::time::sleep(length).await;
            let endpoint = etcd.members()[0].endpoint();
            let answered = tokio::spawn(first_answer(endpoint));
            etcd.restart(0).await;
            (answered.await.unwrap_or_else(|_| Instant::now()), None)
        }
        Outage::Stop => {
            let endpoint = etcd.members()[0].endpoint();
            let queued = etcd_client::Client::connect([endpoint.as_str()], None)
                .await
                .ok();
            etcd.pause(0);
            // Sent a second before SIGCONT: queued in the stopped etcd.
            tokio::time::sleep(length.saturating_sub(Duration::from_secs(1))).await;
            let read = queued.map(|mut c| {
                tokio::spawn(async move {
                    c.get("/bench/heal/probe", None).await.ok()?;
                    Some(Instant::now())
                })
            });
            tokio::time::sleep(length.min(Duration::from_secs(1))).await;
            etcd.resume(0);
            let continued = Instant::now();
            let floor = match read {
                Some(task) => tokio::time::timeout(DEADLINE, task)
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .flatten()
                    .map(|at| at.saturating_duration_since(continued)),
                None => None,
            };
            (continued, floor)
        }
        Outage::Blackhole => {
            proxy.set(Mode::Blackhole);
            tokio::time::sleep(length).await;
            proxy.set(Mode::Pass);
            (Instant::now(), None)
        }
        Outage::GrpcProxy => {
            grpc.kill();
            tokio::time::sleep(length).await;
            let answered = tokio::spawn(first_answer(grpc.endpoint()));
            grpc.restart().await;
            (answered.await.unwrap_or_else(|_| Instant::now()), None)
        }
    }
}

/// When etcd at `endpoint` first answers a read, polled every 5 ms over a
/// fresh connection each time (so no client's reconnect pacing delays it).
async fn first_answer(endpoint: String) -> Instant {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(100))
        .with_timeout(Duration::from_millis(200));
    loop {
        if let Ok(mut c) =
            etcd_client::Client::connect([endpoint.as_str()], Some(options.clone())).await
        {
            if c.get("/bench/heal/probe", None).await.is_ok() {
                return Instant::now();
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A live keep-alive reply: when the keep-alive it answers was sent (the
/// stream's open sends the first), and when the reply was read.
#[derive(Debug, Clone, Copy)]
struct Reply {
    sent: Instant,
    read: Instant,
}

/// A registered host and its live keep-alive replies.
struct Subject {
    policy: Policy,
    host: HostLiveness,
    replies: Arc<Mutex<Vec<Reply>>>,
}

impl Subject {
    async fn register(
        endpoint: &str,
        id: &str,
        policy: Policy,
        ttl: Duration,
        seed: u64,
    ) -> Subject {
        let client = coord::connect(&[endpoint], ConnectOptions::default())
            .await
            .expect("connect through the proxy");
        let tapped = Tapped::default();
        let replies = Arc::clone(&tapped.replies);
        let host = HostLiveness::register(
            Intercepted::new(client, tapped),
            HostMetadata::new(id, "bench"),
            policy.options(PREFIX, ttl, seed),
        )
        .await
        .expect("register");
        Subject {
            policy,
            host,
            replies,
        }
    }

    /// When the lease was first kept alive after an outage that began at
    /// `began` and ended when etcd answered at `answered`: the first live
    /// reply read after `answered`, or answering a keep-alive sent after
    /// `began` (read before `answered`: etcd answered the host first).
    /// Waits up to `deadline` after `answered`.
    async fn heal(&self, began: Instant, answered: Instant, deadline: Duration) -> Option<Instant> {
        let until = answered.max(Instant::now()) + deadline;
        loop {
            let first = self.replies.lock().ok().and_then(|r| {
                r.iter()
                    .find(|x| x.read >= answered || x.sent >= began)
                    .map(|x| x.read)
            });
            if first.is_some() {
                return first;
            }
            if Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Records each live keep-alive reply of a coord client with the send it
/// answers.
#[derive(Clone, Default)]
struct Tapped {
    /// The send instants of each stream's keep-alives not answered yet,
    /// oldest first (etcd answers a stream's keep-alives in order), by
    /// stream.
    sends: Arc<Mutex<HashMap<u64, VecDeque<Instant>>>>,
    replies: Arc<Mutex<Vec<Reply>>>,
}

impl Tapped {
    fn sent(&self, stream: &KeepAliveStream) {
        if let Ok(mut s) = self.sends.lock() {
            s.entry(stream.id).or_default().push_back(Instant::now());
        }
    }
}

impl Intercept for Tapped {
    async fn lease_keep_alive<A: EtcdApi>(
        &self,
        api: &A,
        stream: &KeepAliveStream,
    ) -> Result<(A::Keeper, A::Replies), EtcdError> {
        // The open sends the stream's first keep-alive.
        self.sent(stream);
        api.lease_keep_alive(stream.lease).await
    }

    async fn keep_alive_send<K: KeepAliveSender>(
        &self,
        stream: &KeepAliveStream,
        keeper: &mut K,
    ) -> Result<(), EtcdError> {
        self.sent(stream);
        keeper.send().await
    }

    async fn keep_alive_next<R: KeepAliveReplies>(
        &self,
        stream: &KeepAliveStream,
        replies: &mut R,
    ) -> Option<Result<i64, EtcdError>> {
        let reply = replies.next().await;
        if let Some(Ok(ttl)) = &reply {
            let read = Instant::now();
            let sent = self
                .sends
                .lock()
                .ok()
                .and_then(|mut s| s.get_mut(&stream.id)?.pop_front())
                .unwrap_or(read);
            if *ttl > 0 {
                if let Ok(mut r) = self.replies.lock() {
                    r.push(Reply { sent, read });
                }
            }
        }
        reply
    }
}
