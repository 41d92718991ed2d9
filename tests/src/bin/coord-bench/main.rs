//! `coord-bench`: coord against its baselines on a real etcd, each
//! benchmark a ratio to a baseline measured in the same run (these
//! machines are noisy; absolute times mean little).
//!
//! ```text
//! coord-bench detection|stop|heal|herd|failover|watcher|pool|all [--quick] [--out DIR] [--seed N] [--trials N]
//!             [--heal-settle SECS] [--heal-only restart|sigstop|blackhole|grpc-proxy:SECS]
//! ```
//!
//! Each benchmark prints a table (min, median, p99 and max of coord and of
//! its baseline, and the ratio of medians) and writes `<id>.csv` and
//! `<id>.svg` (a CDF of both) into `--out` (default `target/coord-bench`).
//! It starts its own single-node etcd (Debian's `etcd-server`) on free
//! loopback ports. `--quick` runs each in seconds, as the suite's smoke.
//! With `RUST_LOG` set (`RUST_LOG=coord=debug`, say), the library's logs
//! go to stderr: a heal's retries, the prober's verdicts.
//!
//! - `detection`: kill -9 of a registered host to `Down` at a watcher,
//!   minus the TTL (TTL 3 and 10 s), against `etcdctl lease keep-alive`
//!   killed the same way and `etcdctl watch`;
//! - `stop`: `stop()` to `Down`, against an etcd-client revoke to the
//!   delete event;
//! - `heal`: etcd killed and restarted, SIGSTOPped, or blackholed through
//!   a TCP proxy, for 5, 20 and 60 s; etcd answering again to each host's
//!   lease kept alive again, against the go-coord-style policy (plain
//!   doubling to 30 s, no jitter, no fast class, no resume) through the
//!   same driver. Each round's hosts are young (taken out within seconds
//!   of registering) unless `--heal-settle` lets them run past their
//!   first census (26 s or more: a fleet in its steady state);
//!   `--heal-only` runs one outage kind and length;
//! - `herd`: 1,000 hosts, each with its own client, in several processes,
//!   through etcd killed and restarted: lease grants and keep-alive opens
//!   (together, and each alone) and every gRPC call per 100 ms after its
//!   return (etcd's `/metrics`),
//!   against the go-coord-style policy;
//! - `failover`: a leader killed -9 to its successor leading (TTL 3 s),
//!   against `etcdctl lock --ttl`; resign to successor, against `etcdctl
//!   elect`;
//! - `watcher`: events/s and CPU µs per event of a `HostWatcher`, against
//!   a raw etcd-client watch loop decoding the same JSON;
//! - `pool`: 1,000 elections through one `ElectionPool` against a session
//!   per name: leases held and lease renewals per minute at etcd.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
#![allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]

mod detection;
mod failover;
mod heal;
mod herd;
mod metrics;
mod plot;
mod policy;
mod pool;
mod stats;
mod stop;
mod throughput;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use coord_tests::etcd::EtcdCluster;
use stats::Comparison;

const USAGE: &str = "usage: coord-bench detection|stop|heal|herd|failover|watcher|pool|all \
     [--quick] [--out DIR] [--seed N] [--trials N] [--heal-settle SECS] \
     [--heal-only restart|sigstop|blackhole|grpc-proxy:SECS]";

/// What a run measures, from the flags.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Trials per subject (detection, stop).
    pub trials: usize,
    /// TTLs of the detection benchmark, s.
    pub ttls: Vec<u64>,
    /// Watcher benchmark: hosts, puts and rounds.
    pub hosts: usize,
    pub puts: usize,
    pub rounds: usize,
    /// Pool benchmark: names, and the windows measured.
    pub names: usize,
    pub windows: usize,
    pub window: std::time::Duration,
    /// Heal benchmark: outage lengths (s), rounds per length, hosts of
    /// each policy per round, and their TTL.
    pub outages: Vec<u64>,
    pub heal_rounds: usize,
    pub heal_hosts: usize,
    pub heal_ttl: std::time::Duration,
    /// How long a heal round's hosts run before etcd is taken out (0 by
    /// default: young hosts; 26 s or more: past their first census, a
    /// fleet in its steady state).
    pub heal_settle: std::time::Duration,
    /// Only this outage kind, if set (`--heal-only`, whose length goes
    /// into `outages`).
    pub heal_only: Option<heal::Outage>,
    /// Herd benchmark: hosts, the processes they are spread over, their
    /// TTL, how long etcd is down, and how long after its return is
    /// measured.
    pub herd_hosts: usize,
    pub herd_ttl: std::time::Duration,
    pub herd_processes: usize,
    /// How long the fleet runs before etcd is taken out: long enough for
    /// every host's first census (due 12-24 s after it registers).
    pub herd_settle: std::time::Duration,
    pub herd_outage: std::time::Duration,
    pub herd_window: std::time::Duration,
}

impl Settings {
    fn full() -> Settings {
        Settings {
            trials: 20,
            ttls: vec![3, 10],
            hosts: 2_000,
            puts: 20_000,
            rounds: 5,
            names: 1_000,
            windows: 6,
            window: std::time::Duration::from_secs(10),
            outages: vec![5, 20, 60],
            heal_rounds: 4,
            heal_hosts: 5,
            heal_ttl: std::time::Duration::from_secs(10),
            heal_settle: std::time::Duration::ZERO,
            heal_only: None,
            herd_hosts: 1_000,
            herd_ttl: std::time::Duration::from_secs(10),
            herd_processes: 4,
            herd_settle: std::time::Duration::from_secs(30),
            herd_outage: std::time::Duration::from_secs(20),
            herd_window: std::time::Duration::from_secs(40),
        }
    }

    fn quick() -> Settings {
        Settings {
            trials: 3,
            ttls: vec![3],
            hosts: 200,
            puts: 2_000,
            rounds: 1,
            names: 50,
            windows: 2,
            window: std::time::Duration::from_secs(5),
            outages: vec![3],
            heal_rounds: 1,
            heal_hosts: 2,
            heal_ttl: std::time::Duration::from_secs(2),
            heal_settle: std::time::Duration::ZERO,
            heal_only: None,
            herd_hosts: 60,
            herd_ttl: std::time::Duration::from_secs(2),
            herd_processes: 2,
            herd_settle: std::time::Duration::from_secs(1),
            herd_outage: std::time::Duration::from_secs(3),
            herd_window: std::time::Duration::from_secs(6),
        }
    }
}

/// A small seeded generator (xorshift64*) for trial phases and run tags.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        if n == 0 {
            0
        } else {
            x % n
        }
    }
}

/// A binary built next to this one (`coord-agent`).
pub fn sibling(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)))
        .unwrap_or_else(|| PathBuf::from(name))
}

/// kill -9 and reap.
pub async fn kill9(child: &mut tokio::process::Child) {
    let _ = child.start_kill();
    let _ = child.wait().await;
}

/// Milliseconds from `earlier` to `later` (0 if `later` is earlier).
pub fn ms_since(later: std::time::Instant, earlier: std::time::Instant) -> f64 {
    later.saturating_duration_since(earlier).as_secs_f64() * 1000.0
}

/// The values of the trials that completed (a trial that timed out or
/// failed is reported and left out).
pub async fn collect(tasks: Vec<tokio::task::JoinHandle<Option<f64>>>) -> Vec<f64> {
    let mut out = Vec::new();
    for t in tasks {
        match t.await {
            Ok(Some(v)) => out.push(v),
            Ok(None) => eprintln!("coord-bench: a trial timed out; left out"),
            Err(e) => eprintln!("coord-bench: a trial failed: {e}"),
        }
    }
    out
}

struct Args {
    bench: String,
    quick: bool,
    out: PathBuf,
    seed: u64,
    trials: Option<usize>,
    heal_settle: Option<u64>,
    heal_only: Option<(heal::Outage, u64)>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut it = args.iter();
    let bench = it.next().ok_or(USAGE)?.clone();
    if !matches!(
        bench.as_str(),
        "detection" | "stop" | "heal" | "herd" | "failover" | "watcher" | "pool" | "all"
    ) {
        return Err(format!("unknown benchmark {bench:?}\n{USAGE}"));
    }
    let mut a = Args {
        bench,
        quick: false,
        out: PathBuf::from("target/coord-bench"),
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
        trials: None,
        heal_settle: None,
        heal_only: None,
    };
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--quick" => a.quick = true,
            "--out" => a.out = PathBuf::from(value()?),
            "--seed" => a.seed = value()?.parse().map_err(|_| "--seed: a number")?,
            "--trials" => {
                let n: usize = value()?.parse().map_err(|_| "--trials: a number")?;
                if n == 0 {
                    return Err("--trials: at least 1".into());
                }
                a.trials = Some(n);
            }
            "--heal-settle" => {
                let secs = value()?.parse().map_err(|_| "--heal-settle: seconds")?;
                a.heal_settle = Some(secs);
            }
            "--heal-only" => {
                let v = value()?;
                let parsed = v.split_once(':').and_then(|(kind, secs)| {
                    Some((heal::Outage::named(kind)?, secs.parse::<u64>().ok()?))
                });
                let Some(only) = parsed else {
                    return Err(format!("--heal-only: KIND:SECS, not {v:?}\n{USAGE}"));
                };
                a.heal_only = Some(only);
            }
            other => return Err(format!("unknown flag {other:?}\n{USAGE}")),
        }
    }
    Ok(a)
}

fn report(c: &Comparison, out: &Path) -> Result<(), String> {
    print!("{}", c.table());
    println!();
    c.write_csv(out)
        .map_err(|e| format!("{}: {e}", out.display()))?;
    plot::cdf(c, out)
}

#[tokio::main]
async fn main() -> ExitCode {
    // Logs only when asked (`RUST_LOG=coord=debug`, say), to stderr: the
    // tables go to stdout.
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init();
    }
    let argv: Vec<String> = std::env::args().skip(1).collect();
    // The child processes the benchmarks spawn of this binary.
    let child = match argv.first().map(String::as_str) {
        Some("__writer") => Some(("writer", throughput::write(&argv[1..]).await)),
        Some("__hosts") => Some(("hosts", herd::hosts(&argv[1..]).await)),
        _ => None,
    };
    if let Some((what, result)) = child {
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("coord-bench {what}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if matches!(argv.first().map(String::as_str), Some("-h" | "--help")) {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let args = match parse(&argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("coord-bench: {e}");
            if !e.contains(USAGE) {
                eprintln!("{USAGE}");
            }
            return ExitCode::from(2);
        }
    };
    let mut settings = if args.quick {
        Settings::quick()
    } else {
        Settings::full()
    };
    if let Some(n) = args.trials {
        settings.trials = n;
    }
    if let Some(secs) = args.heal_settle {
        settings.heal_settle = std::time::Duration::from_secs(secs);
    }
    if let Some((kind, secs)) = args.heal_only {
        settings.outages = vec![secs];
        settings.heal_only = Some(kind);
    }
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!("coord-bench: {}: {e}", args.out.display());
        return ExitCode::FAILURE;
    }
    println!(
        "coord-bench {} (seed {}, {} trials{}); results in {}\n",
        args.bench,
        args.seed,
        settings.trials,
        if args.quick { ", quick" } else { "" },
        args.out.display()
    );
    let mut rng = Rng::new(args.seed);
    let mut etcd = EtcdCluster::single().await;
    let all = args.bench == "all";
    let mut comparisons = Vec::new();
    if all || args.bench == "detection" {
        comparisons.extend(detection::run(&etcd, &settings, &mut rng).await);
    }
    if all || args.bench == "stop" {
        comparisons.extend(stop::run(&etcd, &settings, &mut rng).await);
    }
    if all || args.bench == "failover" {
        comparisons.extend(failover::run(&etcd, &settings, &mut rng).await);
    }
    if all || args.bench == "watcher" {
        comparisons.extend(throughput::run(&etcd, &settings, &mut rng).await);
    }
    if all || args.bench == "pool" {
        comparisons.extend(pool::run(&etcd, &settings, &mut rng).await);
    }
    // Last: these take etcd down.
    if all || args.bench == "herd" {
        comparisons.extend(herd::run(&mut etcd, &settings, &mut rng).await);
    }
    if all || args.bench == "heal" {
        comparisons.extend(heal::run(&mut etcd, &settings, &mut rng).await);
    }
    let mut failed = false;
    for c in &comparisons {
        if let Err(e) = report(c, &args.out) {
            eprintln!("coord-bench: {}: {e}", c.id);
            failed = true;
        }
        // A comparison with no measurement on either side is a failed
        // run; a baseline whose statistic is 0 (no ratio) is not.
        if !c.measured() {
            eprintln!("coord-bench: {}: no measurement", c.id);
            failed = true;
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
