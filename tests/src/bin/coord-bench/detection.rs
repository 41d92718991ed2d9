//! Benchmark 1, crash detection: a host process killed with -9, timed
//! until a watcher sees it `Down` (the ratio is of these times; the
//! medians minus the TTL are printed under the table). coord: `coord-agent`
//! (a registered `HostLiveness`) and a `HostWatcher`. Baseline: a lease
//! kept alive by `etcdctl lease keep-alive`, killed the same way, timed
//! until `etcdctl watch` prints the delete. Each trial kills at a random
//! phase of the keep-alive interval and of etcd's 500 ms expiry tick (the
//! same phases for both subjects: paired trials), and the trials of one
//! subject run side by side.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use coord::{HostEvent, HostMetadata, HostWatcher, WatcherOptions};
use coord_tests::etcd::EtcdCluster;
use coord_tests::etcdctl::{output, Peer};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Notify;

use crate::stats::{Comparison, Series, Statistic};
use crate::{collect, kill9, ms_since, Rng, Settings};

/// Where the agents register (apart from every other benchmark's keys).
const PREFIX: &str = "/coord/hosts/";

/// Downs seen by the watcher: host id to when.
#[derive(Default)]
struct Downs {
    seen: Mutex<HashMap<String, Instant>>,
    changed: Notify,
}

impl Downs {
    async fn wait(&self, host: &str, deadline: Duration) -> Option<Instant> {
        let until = Instant::now() + deadline;
        loop {
            let notified = self.changed.notified();
            if let Some(t) = self.seen.lock().ok()?.get(host) {
                return Some(*t);
            }
            let left = until.checked_duration_since(Instant::now())?;
            let _ = tokio::time::timeout(left, notified).await;
        }
    }
}

/// Runs the benchmark for each TTL of `s`.
pub async fn run(etcd: &EtcdCluster, s: &Settings, rng: &mut Rng) -> Vec<Comparison> {
    let client = etcd.coord_client().await;
    let downs = Arc::new(Downs::default());
    let mut watcher =
        HostWatcher::<HostMetadata>::new(client, WatcherOptions::default().with_prefix(PREFIX))
            .await
            .expect("start the host watcher");
    let d = Arc::clone(&downs);
    let watching = tokio::spawn(async move {
        while let Some(e) = watcher.next().await {
            if let HostEvent::Down { host, .. } = e {
                if let Ok(mut seen) = d.seen.lock() {
                    seen.insert(host, Instant::now());
                }
                d.changed.notify_waiters();
            }
        }
    });
    let mut out = Vec::new();
    for &ttl in &s.ttls {
        // The same kill phases for both subjects (paired trials): the
        // phase moves detection by up to a keep-alive interval, far more
        // than the subjects differ.
        let phases: Vec<Duration> = (0..s.trials).map(|_| phase(rng, ttl)).collect();
        let coord = coord_trials(etcd, ttl, &phases, rng, &downs).await;
        let baseline = etcdctl_trials(etcd, ttl, &phases, rng).await;
        let ttl_ms = (ttl * 1000) as f64;
        let minus_ttl = |v: &[f64]| {
            crate::stats::summary(v).map_or("n/a".to_string(), |m| {
                format!("{:.0} ms", m.median - ttl_ms)
            })
        };
        let note = format!(
            "medians minus the TTL: coord {}, baseline {} (a lease expires a TTL after its last keep-alive, so a kill late in the keep-alive interval is seen sooner than a TTL after it)",
            minus_ttl(&coord),
            minus_ttl(&baseline)
        );
        out.push(Comparison {
            id: format!("detection-ttl{ttl}"),
            title: format!("Crash detection, TTL {ttl} s: kill -9 to Down"),
            unit: "ms",
            lower_is_better: true,
            coord: Series {
                subject: "coord (HostWatcher)".into(),
                values: coord,
            },
            baseline: Series {
                subject: "etcdctl keep-alive + watch".into(),
                values: baseline,
            },
            ratio_of: Statistic::Median,
            note: Some(note),
        });
    }
    watching.abort();
    out
}

/// When to kill, after the host registered: first two keep-alive
/// intervals and a second, so both subjects keep alive at their steady
/// pace (the Go client's first interval is longer: it sends from a loop
/// that wakes every 500 ms), then a random phase within a keep-alive
/// interval (TTL/3) plus etcd's 500 ms expiry tick.
fn phase(rng: &mut Rng, ttl: u64) -> Duration {
    let settle = ttl * 1000 * 2 / 3 + 1000;
    Duration::from_millis(settle + rng.below(ttl * 1000 / 3 + 500))
}

async fn spawn_agent(endpoint: &str, host: &str, ttl: u64) -> Child {
    let mut child = Command::new(crate::sibling("coord-agent"))
        .args([endpoint, host, &ttl.to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect(
            "spawn coord-agent (build it with the bench: cargo build -p coord-tests --release)",
        );
    let stdout = child.stdout.take().expect("agent stdout");
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .ok()
        .and_then(Result::ok)
        .flatten()
        .unwrap_or_default();
    assert!(
        first.starts_with("registered"),
        "coord-agent said {first:?}"
    );
    child
}

async fn coord_trials(
    etcd: &EtcdCluster,
    ttl: u64,
    phases: &[Duration],
    rng: &mut Rng,
    downs: &Arc<Downs>,
) -> Vec<f64> {
    let endpoint = etcd.endpoints()[0].clone();
    let run = rng.below(u64::MAX);
    let mut tasks = Vec::new();
    for (i, &wait) in phases.iter().enumerate() {
        let host = format!("bench-{run:x}-{ttl}-{i}");
        let agent = spawn_agent(&endpoint, &host, ttl).await;
        let downs = Arc::clone(downs);
        tasks.push(tokio::spawn(async move {
            let mut agent = agent;
            tokio::time::sleep(wait).await;
            let killed = Instant::now();
            kill9(&mut agent).await;
            let down = downs.wait(&host, Duration::from_secs(ttl + 30)).await?;
            Some(ms_since(down, killed))
        }));
    }
    collect(tasks).await
}

async fn etcdctl_trials(
    etcd: &EtcdCluster,
    ttl: u64,
    phases: &[Duration],
    rng: &mut Rng,
) -> Vec<f64> {
    let endpoints = etcd.endpoints();
    let run = rng.below(u64::MAX);
    let mut tasks = Vec::new();
    for (i, &wait) in phases.iter().enumerate() {
        let key = format!("/bench/detection/{run:x}-{ttl}-{i}");
        let granted = output(&endpoints, &["lease", "grant", &ttl.to_string()]).await;
        // "lease 694d7a1b2c3d4e5f granted with TTL(3s)"
        let lease = granted
            .split_whitespace()
            .nth(1)
            .expect("etcdctl lease grant printed its lease")
            .to_string();
        let put = output(
            &endpoints,
            &["put", &key, "up", &format!("--lease={lease}"), "-w", "json"],
        )
        .await;
        let revision = serde_json::from_str::<serde_json::Value>(&put)
            .ok()
            .and_then(|v| v["header"]["revision"].as_i64())
            .expect("etcdctl put -w json printed its revision");
        // Watching from the put's revision prints the put at once: the
        // watch is then established.
        let mut watch = Peer::run(&endpoints, &["watch", &key, &format!("--rev={revision}")]);
        assert_eq!(watch.line(Duration::from_secs(30)).await, "PUT");
        let mut keeper = Peer::run(&endpoints, &["lease", "keep-alive", &lease]);
        let first = keeper.line(Duration::from_secs(30)).await;
        assert!(
            first.contains("keepalived"),
            "etcdctl keep-alive said {first:?}"
        );
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let killed = Instant::now();
            keeper.kill9().await;
            let deadline = Instant::now() + Duration::from_secs(ttl + 30);
            loop {
                let left = deadline.checked_duration_since(Instant::now())?;
                if watch.try_line(left).await? == "DELETE" {
                    return Some(ms_since(Instant::now(), killed));
                }
            }
        }));
    }
    collect(tasks).await
}
