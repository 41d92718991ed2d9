//! Benchmark 6, election failover and handover. A leader and one queued
//! candidate per trial (each trial on a name of its own, side by side):
//! - failover: the leader killed with -9 at a random phase, timed until
//!   the candidate prints that it leads (the ratio is of these times; the
//!   medians minus the TTL are printed under the table). coord:
//!   `coord-agent elect`. Baseline: `etcdctl lock --ttl` (the Go
//!   `concurrency` package's queue: `etcdctl elect` has no TTL flag, its
//!   session lives 60 s, and `lock` waits on its predecessor the same way);
//! - handover: the leader told to resign (SIGINT), timed until the
//!   candidate leads. coord: `coord-agent elect`. Baseline: `etcdctl elect`.

use std::time::{Duration, Instant};

use coord_tests::etcd::EtcdCluster;
use coord_tests::etcdctl::Peer;
use etcd_client::GetOptions;
use tokio::process::Command;

use crate::stats::{summary, Comparison, Series, Statistic};
use crate::{collect, Rng, Settings};

const DEADLINE: Duration = Duration::from_secs(60);

/// Who contends.
#[derive(Debug, Clone, Copy)]
enum Contender {
    /// `coord-agent elect`.
    Coord,
    /// `etcdctl lock --ttl`.
    EtcdctlLock,
    /// `etcdctl elect`.
    EtcdctlElect,
}

impl Contender {
    fn start(self, endpoint: &str, name: &str, value: &str, ttl: u64) -> Peer {
        let ttl_s = ttl.to_string();
        match self {
            Contender::Coord => {
                let mut c = Command::new(crate::sibling("coord-agent"));
                c.args(["elect", endpoint, name, value, &ttl_s]);
                Peer::spawn(c)
            }
            Contender::EtcdctlLock => Peer::run(
                &[endpoint.to_string()],
                &["lock", name, &format!("--ttl={ttl}")],
            ),
            Contender::EtcdctlElect => Peer::run(&[endpoint.to_string()], &["elect", name, value]),
        }
    }

    /// Whether `line` says this contender leads.
    fn leads(self, line: &str, name: &str) -> bool {
        match self {
            Contender::Coord => line.starts_with("elected "),
            // Both print the key, `<name>/<lease hex>`, once they hold it.
            Contender::EtcdctlLock | Contender::EtcdctlElect => {
                line.starts_with(&format!("{name}/"))
            }
        }
    }
}

/// Runs failover (with `ttl` 3 s) and handover.
pub async fn run(etcd: &EtcdCluster, s: &Settings, rng: &mut Rng) -> Vec<Comparison> {
    let ttl = 3;
    let failover = (
        trials(etcd, Contender::Coord, true, ttl, s.trials, rng).await,
        trials(etcd, Contender::EtcdctlLock, true, ttl, s.trials, rng).await,
    );
    let handover = (
        trials(etcd, Contender::Coord, false, ttl, s.trials, rng).await,
        trials(etcd, Contender::EtcdctlElect, false, ttl, s.trials, rng).await,
    );
    let ttl_ms = (ttl * 1000) as f64;
    let minus_ttl = |v: &[f64]| {
        summary(v).map_or("n/a".to_string(), |m| {
            format!("{:.0} ms", m.median - ttl_ms)
        })
    };
    let note = format!(
        "medians minus the TTL: coord {}, baseline {}",
        minus_ttl(&failover.0),
        minus_ttl(&failover.1)
    );
    vec![
        Comparison {
            id: "failover".into(),
            title: format!("Election failover, TTL {ttl} s: leader killed -9 to successor leading"),
            unit: "ms",
            lower_is_better: true,
            coord: Series {
                subject: "coord (Election)".into(),
                values: failover.0,
            },
            baseline: Series {
                subject: "etcdctl lock --ttl".into(),
                values: failover.1,
            },
            ratio_of: Statistic::Median,
            note: Some(note),
        },
        Comparison {
            id: "handover".into(),
            title: "Election handover: resign to successor leading".into(),
            unit: "ms",
            lower_is_better: true,
            coord: Series {
                subject: "coord (Election)".into(),
                values: handover.0,
            },
            baseline: Series {
                subject: "etcdctl elect".into(),
                values: handover.1,
            },
            ratio_of: Statistic::Median,
            note: None,
        },
    ]
}

/// `n` trials side by side; each a leader and a queued candidate on a name
/// of its own; the leader killed (`kill`) or told to resign.
async fn trials(
    etcd: &EtcdCluster,
    who: Contender,
    kill: bool,
    ttl: u64,
    n: usize,
    rng: &mut Rng,
) -> Vec<f64> {
    let endpoint = etcd.endpoints()[0].clone();
    let run = rng.below(u64::MAX);
    let mut tasks = Vec::new();
    for i in 0..n {
        let name = format!("/bench/elect/{run:x}-{i}");
        let mut leader = who.start(&endpoint, &name, "a", ttl);
        if !wait_leads(&mut leader, who, &name).await {
            eprintln!("coord-bench: {name}: the first contender never led; trial left out");
            continue;
        }
        let mut next = who.start(&endpoint, &name, "b", ttl);
        if !queued(etcd, &name, 2).await {
            eprintln!("coord-bench: {name}: the second contender never queued; trial left out");
            continue;
        }
        let wait = Duration::from_millis(rng.below(ttl * 1000 / 3 + 500));
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let start = Instant::now();
            if kill {
                leader.kill9().await;
            } else {
                // Not waiting for its exit: the clock stops when the
                // successor leads.
                leader.sigint();
            }
            let led = wait_leads(&mut next, who, &name)
                .await
                .then(|| start.elapsed().as_secs_f64() * 1000.0);
            drop(leader);
            led
        }));
    }
    collect(tasks).await
}

/// Reads `peer`'s lines until one says it leads (false after the deadline).
async fn wait_leads(peer: &mut Peer, who: Contender, name: &str) -> bool {
    let until = Instant::now() + DEADLINE;
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match peer.try_line(left).await {
            Some(line) if who.leads(&line, name) => return true,
            Some(_) => {}
            None => return false,
        }
    }
    false
}

/// Waits until `name`'s queue holds `n` keys.
async fn queued(etcd: &EtcdCluster, name: &str, n: i64) -> bool {
    let mut client = etcd.client().await;
    let until = Instant::now() + DEADLINE;
    while Instant::now() < until {
        let count = client
            .get(
                format!("{name}/"),
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
            .map_or(0, |r| r.count());
        if count >= n {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}
