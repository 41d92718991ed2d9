//! Benchmark 4, herd: a fleet of hosts, each with its own client, spread
//! over several processes, lives through etcd killed and restarted; what
//! hits etcd after its return is read from etcd's own `/metrics`, per
//! 100 ms: lease grants and keep-alive stream opens together (the herd,
//! what a host sends to get its lease back), each alone, and every gRPC
//! call started (the probes included). Counters start at 0 with the restarted
//! etcd. coord's policy against the go-coord-style one (plain doubling,
//! no jitter, no fast class, a lost lease replaced), the same fleet size
//! and outage, one after the other. The ratio is of the peaks.

use std::time::Duration;

use coord::{ConnectOptions, HostLiveness, HostMetadata};
use coord_tests::etcd::EtcdCluster;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

use crate::metrics::{scrape_at, value};
use crate::policy::Policy;
use crate::stats::{Comparison, Series, Statistic};
use crate::{kill9, Rng, Settings};

const PREFIX: &str = "/bench/herd/hosts/";
const BIN: Duration = Duration::from_millis(100);
const GRANTS: &str = "grpc_server_started_total{grpc_method=\"LeaseGrant\",grpc_service=\"etcdserverpb.Lease\",grpc_type=\"unary\"}";
const OPENS: &str = "grpc_server_started_total{grpc_method=\"LeaseKeepAlive\",grpc_service=\"etcdserverpb.Lease\",grpc_type=\"bidi_stream\"}";
const CALLS: &str = "grpc_server_started_total{";

/// What etcd saw in one bin after its return, scaled to 100 ms.
#[derive(Debug, Clone, Copy, Default)]
struct Bin {
    grants: f64,
    opens: f64,
    calls: f64,
}

/// Which count of a bin a comparison is of.
type Pick = fn(&Bin) -> f64;

/// Runs the benchmark.
pub async fn run(etcd: &mut EtcdCluster, s: &Settings, rng: &mut Rng) -> Vec<Comparison> {
    let coord = fleet_through_outage(etcd, s, Policy::Coord, rng).await;
    let plain = fleet_through_outage(etcd, s, Policy::Plain, rng).await;
    let series = |bins: &[Bin], pick: Pick| bins.iter().map(pick).collect::<Vec<_>>();
    let total = |bins: &[Bin], pick: Pick| bins.iter().map(pick).sum::<f64>();
    // The herd the goal is judged on is the first: every request a host
    // sends to get its lease back (a grant where the lease was lost, a
    // keep-alive stream where it was kept), counted together, since each
    // policy returns through its own mix of the two.
    let what: [(&str, &str, Pick); 4] = [
        (
            "lease",
            "lease grants and keep-alive stream opens together",
            |b| b.grants + b.opens,
        ),
        ("grants", "lease grants", |b| b.grants),
        ("keepalive-opens", "keep-alive stream opens", |b| b.opens),
        ("calls", "gRPC calls of every kind", |b| b.calls),
    ];
    what.into_iter()
        .map(|(id, name, pick)| Comparison {
            id: format!("herd-{id}"),
            title: format!(
                "Herd: {name} per 100 ms at etcd after it returns ({} hosts, TTL {} s, etcd down {} s)",
                s.herd_hosts,
                s.herd_ttl.as_secs(),
                s.herd_outage.as_secs()
            ),
            unit: "per 100 ms",
            lower_is_better: true,
            coord: Series {
                subject: "coord".into(),
                values: series(&coord, pick),
            },
            baseline: Series {
                subject: "go-coord-style policy".into(),
                values: series(&plain, pick),
            },
            ratio_of: Statistic::Max,
            note: Some(format!(
                "over {} s after etcd's return: {:.0} in all for coord, {:.0} for the baseline{}",
                s.herd_window.as_secs(),
                total(&coord, pick),
                total(&plain, pick),
                if id == "lease" {
                    " (goal for the peak: under 0.1)"
                } else {
                    ""
                }
            )),
        })
        .collect()
}

/// Starts the fleet, takes etcd out and back, and returns the bins from
/// its return on; the fleet is then killed and its leases left to expire.
async fn fleet_through_outage(
    etcd: &mut EtcdCluster,
    s: &Settings,
    policy: Policy,
    rng: &mut Rng,
) -> Vec<Bin> {
    let endpoint = etcd.members()[0].endpoint();
    let exe = std::env::current_exe().expect("own path");
    let per = s.herd_hosts.div_ceil(s.herd_processes.max(1));
    let mut children: Vec<Child> = Vec::new();
    let mut left = s.herd_hosts;
    while left > 0 {
        let n = per.min(left);
        left -= n;
        let child = Command::new(&exe)
            .args([
                "__hosts",
                &endpoint,
                &n.to_string(),
                &s.herd_ttl.as_secs().to_string(),
                policy.arg(),
                &rng.below(u64::MAX).to_string(),
            ])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn a host process");
        children.push(child);
    }
    for c in &mut children {
        let Some(out) = c.stdout.take() else { continue };
        let mut lines = BufReader::new(out).lines();
        let ready = tokio::time::timeout(Duration::from_secs(180), lines.next_line()).await;
        if !matches!(ready, Ok(Ok(Some(ref l))) if l == "ready") {
            eprintln!("coord-bench herd: a host process did not get ready: {ready:?}");
        }
    }
    let refresh_ms = u64::try_from((s.herd_ttl / 3).as_millis()).unwrap_or(3_333);
    tokio::time::sleep(s.herd_settle + Duration::from_millis(rng.below(refresh_ms))).await;
    etcd.kill(0);
    tokio::time::sleep(s.herd_outage).await;
    let (stop, stopped) = watch::channel(false);
    let scraping = tokio::spawn(scrape_bins(endpoint, stopped));
    etcd.restart(0).await;
    tokio::time::sleep(s.herd_window).await;
    let _ = stop.send(true);
    let bins = scraping.await.unwrap_or_default();
    for c in &mut children {
        kill9(c).await;
    }
    // Their leases expire before the next fleet registers.
    tokio::time::sleep(s.herd_ttl + Duration::from_secs(2)).await;
    bins
}

/// Scrapes etcd every 20 ms until it first answers, then every [`BIN`]
/// until told to stop: each bin is the counters' growth since the last
/// scrape, scaled to 100 ms (the first: since etcd started).
async fn scrape_bins(endpoint: String, mut stop: watch::Receiver<bool>) -> Vec<Bin> {
    let read = |page: &str| Bin {
        grants: value(page, GRANTS).unwrap_or(0.0),
        opens: value(page, OPENS).unwrap_or(0.0),
        calls: page
            .lines()
            .filter(|l| l.starts_with(CALLS))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    };
    let (mut last, mut last_at) = loop {
        if let Some((page, at)) = scrape_at(&endpoint).await {
            break (read(&page), at);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut bins = vec![last];
    while !*stop.borrow() {
        tokio::select! {
            () = tokio::time::sleep(BIN) => {}
            _ = stop.changed() => break,
        }
        let Some((page, now)) = scrape_at(&endpoint).await else {
            continue;
        };
        let c = read(&page);
        let scale = BIN.as_secs_f64() / now.duration_since(last_at).as_secs_f64().max(1e-3);
        bins.push(Bin {
            grants: (c.grants - last.grants).max(0.0) * scale,
            opens: (c.opens - last.opens).max(0.0) * scale,
            calls: (c.calls - last.calls).max(0.0) * scale,
        });
        (last, last_at) = (c, now);
    }
    bins
}

/// The host process: `__hosts ENDPOINT COUNT TTL coord|plain SEED`
/// registers COUNT hosts (TTL in seconds), each with its own client,
/// prints `ready`, and keeps them until killed.
pub async fn hosts(args: &[String]) -> Result<(), String> {
    let [endpoint, count, ttl, policy, seed] = args else {
        return Err("usage: __hosts ENDPOINT COUNT TTL coord|plain SEED".into());
    };
    let count: usize = count.parse().map_err(|_| "COUNT: a number")?;
    let ttl = Duration::from_secs(ttl.parse().map_err(|_| "TTL: a number of seconds")?);
    let seed: u64 = seed.parse().map_err(|_| "SEED: a number")?;
    let policy = Policy::parse(policy)?;
    let mut joins = tokio::task::JoinSet::new();
    for j in 0..count {
        let endpoint = endpoint.clone();
        let opts = policy.options(PREFIX, ttl, seed.wrapping_add(j as u64));
        let id = format!("herd-{seed:x}-{j}");
        joins.spawn(async move {
            let client = coord::connect(&[endpoint], ConnectOptions::default())
                .await
                .map_err(|e| e.to_string())?;
            HostLiveness::register(client, HostMetadata::new(&id, "bench"), opts)
                .await
                .map_err(|e| e.to_string())
        });
    }
    let mut held = Vec::new();
    while let Some(r) = joins.join_next().await {
        held.push(r.map_err(|e| e.to_string())??);
    }
    println!("ready");
    std::future::pending::<()>().await;
    drop(held);
    Ok(())
}
