//! Benchmark 5, the cost of many elections: N names held through one
//! `ElectionPool` (one session, one lease), against one session per name
//! (`Election::new` for each, as go-coord's pool does). Measured from
//! etcd: the leases it holds, and the lease renewals (keep-alives) its
//! leader sees per minute (`etcd_debugging_lease_renewed_total` on
//! `/metrics`), over several windows once every name leads; and the CPU
//! time this process (the subject's only client) spends per minute in the
//! same windows.

use std::time::Duration;

use coord::{Election, ElectionPool, Leadership, SessionOptions};
use coord_tests::etcd::EtcdCluster;

use crate::metrics::{counter, cpu_us};
use crate::stats::{Comparison, Series, Statistic};
use crate::{Rng, Settings};

/// Distinct leases under the keys of `prefix` whose names end with
/// `suffix` (one subject's queues).
async fn leases(etcd: &EtcdCluster, prefix: &str, suffix: &str) -> Option<f64> {
    let mut client = etcd.client().await;
    let r = client
        .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .ok()?;
    let leases: std::collections::BTreeSet<i64> = r
        .kvs()
        .iter()
        .filter(|kv| kv.key_str().is_ok_and(|k| k.contains(suffix)))
        .map(etcd_client::KeyValue::lease)
        .collect();
    Some(leases.len() as f64)
}

/// What one subject's windows measured.
#[derive(Default)]
struct Windows {
    /// Lease renewals per minute at etcd, one per window.
    renewals: Vec<f64>,
    /// Leases held at the end of each window.
    leases: Vec<f64>,
    /// This process's CPU time per minute, ms, one per window.
    cpu_ms: Vec<f64>,
}

/// Measures `s.windows` windows of the subject whose keys are under
/// `prefix` and end with `suffix`.
async fn measure(etcd: &EtcdCluster, s: &Settings, prefix: &str, suffix: &str) -> Windows {
    const RENEWED: &str = "etcd_debugging_lease_renewed_total";
    let endpoint = etcd.endpoints()[0].clone();
    let per_minute = 60.0 / s.window.as_secs_f64();
    let mut w = Windows::default();
    for _ in 0..s.windows {
        let before = counter(&endpoint, RENEWED).await;
        let cpu_before = cpu_us();
        tokio::time::sleep(s.window).await;
        let cpu_after = cpu_us();
        let after = counter(&endpoint, RENEWED).await;
        if let (Some(a), Some(b)) = (before, after) {
            w.renewals.push((b - a) * per_minute);
        }
        w.cpu_ms
            .push((cpu_after - cpu_before) / 1000.0 * per_minute);
        if let Some(n) = leases(etcd, prefix, suffix).await {
            w.leases.push(n);
        }
    }
    w
}

fn opts() -> SessionOptions {
    SessionOptions::default().with_ttl(Duration::from_secs(10))
}

/// Runs the benchmark with `s.names` names.
pub async fn run(etcd: &EtcdCluster, s: &Settings, rng: &mut Rng) -> Vec<Comparison> {
    let run = rng.below(u64::MAX);
    let client = etcd.coord_client().await;
    let prefix = format!("/bench/pool/{run:x}/");
    let names: Vec<String> = (0..s.names).map(|i| format!("{prefix}{i}")).collect();

    // One session per name.
    let mut elections = Vec::new();
    for name in &names {
        match Election::new(client.clone(), &format!("{name}-own"), opts()).await {
            Ok(e) => elections.push(e),
            Err(e) => eprintln!("coord-bench: a session for {name} failed: {e}"),
        }
    }
    let mut held: Vec<Leadership> = Vec::new();
    for e in &elections {
        match e.campaign("v").await {
            Ok(l) => held.push(l),
            Err(err) => eprintln!("coord-bench: a campaign failed: {err}"),
        }
    }
    let per_name = measure(etcd, s, &prefix, "-own/").await;
    drop(held);
    for e in &elections {
        let _ = e.close().await;
    }

    // One pool.
    let pool = ElectionPool::new(client, opts())
        .await
        .expect("the pool's session");
    let mut pooled = Vec::new();
    for name in &names {
        match pool.election(&format!("{name}-pool")) {
            Ok(e) => pooled.push(e),
            Err(e) => eprintln!("coord-bench: pool election {name}: {e}"),
        }
    }
    let mut held = Vec::new();
    for e in &pooled {
        match e.campaign("v").await {
            Ok(l) => held.push(l),
            Err(err) => eprintln!("coord-bench: a pooled campaign failed: {err}"),
        }
    }
    let leading = held.len();
    let in_pool = measure(etcd, s, &prefix, "-pool/").await;
    drop(held);
    let _ = pool.close().await;

    let n = s.names;
    vec![
        Comparison {
            id: "pool-keepalives".into(),
            title: format!("{n} elections: lease renewals per minute at etcd"),
            unit: "renewals/min",
            lower_is_better: true,
            coord: Series {
                subject: "coord (one ElectionPool)".into(),
                values: in_pool.renewals,
            },
            baseline: Series {
                subject: "a session per name".into(),
                values: per_name.renewals,
            },
            ratio_of: Statistic::Median,
            note: Some(format!(
                "{leading} of {n} names led through the pool; TTL 10 s; each value one {} s window",
                s.window.as_secs()
            )),
        },
        Comparison {
            id: "pool-leases".into(),
            title: format!("{n} elections: leases held at etcd"),
            unit: "leases",
            lower_is_better: true,
            coord: Series {
                subject: "coord (one ElectionPool)".into(),
                values: in_pool.leases,
            },
            baseline: Series {
                subject: "a session per name".into(),
                values: per_name.leases,
            },
            ratio_of: Statistic::Median,
            note: None,
        },
        Comparison {
            id: "pool-cpu".into(),
            title: format!("{n} elections held: client CPU per minute"),
            unit: "ms/min",
            lower_is_better: true,
            coord: Series {
                subject: "coord (one ElectionPool)".into(),
                values: in_pool.cpu_ms,
            },
            baseline: Series {
                subject: "a session per name".into(),
                values: per_name.cpu_ms,
            },
            ratio_of: Statistic::Median,
            note: Some("user + system time of this process, the subject's only client".into()),
        },
    ]
}
