//! Benchmark 2, graceful stop: `HostLiveness::stop()` to `Down` at a
//! `HostWatcher`, against a raw etcd-client lease revoke to the delete
//! event on a raw etcd-client watch. One trial at a time.

use std::time::{Duration, Instant};

use coord::{HostEvent, HostLiveness, HostMetadata, HostWatcher, LivenessOptions, WatcherOptions};
use coord_tests::etcd::EtcdCluster;
use etcd_client::{EventType, PutOptions, WatchOptions};

use crate::stats::{Comparison, Series, Statistic};
use crate::{ms_since, Rng, Settings};

const PREFIX: &str = "/bench/stop/hosts/";
const BASE: &str = "/bench/stop/raw/";
const DEADLINE: Duration = Duration::from_secs(30);

/// Runs the benchmark.
pub async fn run(etcd: &EtcdCluster, s: &Settings, rng: &mut Rng) -> Vec<Comparison> {
    let run = rng.below(u64::MAX);
    let client = etcd.coord_client().await;
    let mut watcher = HostWatcher::<HostMetadata>::new(
        client.clone(),
        WatcherOptions::default().with_prefix(PREFIX),
    )
    .await
    .expect("start the host watcher");
    let mut coord_ms = Vec::new();
    for i in 0..s.trials {
        let id = format!("stop-{run:x}-{i}");
        let host = HostLiveness::register(
            client.clone(),
            HostMetadata::new(&id, "bench"),
            LivenessOptions::default()
                .with_prefix(PREFIX)
                .with_ttl(Duration::from_secs(10)),
        )
        .await
        .expect("register");
        if next_for(&mut watcher, &id, false).await.is_none() {
            eprintln!("coord-bench: no Up for {id}; trial left out");
            continue;
        }
        let stopping = Instant::now();
        host.stop().await.expect("stop");
        match next_for(&mut watcher, &id, true).await {
            Some(at) => coord_ms.push(ms_since(at, stopping)),
            None => eprintln!("coord-bench: no Down for {id}; trial left out"),
        }
    }
    let mut raw = etcd.client().await;
    let mut raw_ms = Vec::new();
    for i in 0..s.trials {
        let key = format!("{BASE}{run:x}-{i}");
        let lease = raw.lease_grant(10, None).await.expect("grant").id();
        let put = raw
            .put(
                key.as_str(),
                "up",
                Some(PutOptions::new().with_lease(lease)),
            )
            .await
            .expect("put");
        let revision = put.header().map_or(0, |h| h.revision());
        let mut stream = raw
            .watch(
                key.as_str(),
                Some(WatchOptions::new().with_start_revision(revision)),
            )
            .await
            .expect("watch");
        // The put first: the watch is then established.
        let mut seen_put = false;
        while !seen_put {
            let msg = tokio::time::timeout(DEADLINE, stream.message())
                .await
                .expect("the put in time")
                .expect("watch message")
                .expect("watch open");
            seen_put = msg
                .events()
                .iter()
                .any(|e| e.event_type() == EventType::Put);
        }
        let revoking = Instant::now();
        raw.lease_revoke(lease).await.expect("revoke");
        let deleted = loop {
            let Ok(Ok(Some(msg))) = tokio::time::timeout(DEADLINE, stream.message()).await else {
                break None;
            };
            if msg
                .events()
                .iter()
                .any(|e| e.event_type() == EventType::Delete)
            {
                break Some(Instant::now());
            }
        };
        match deleted {
            Some(at) => raw_ms.push(ms_since(at, revoking)),
            None => eprintln!("coord-bench: no delete for {key}; trial left out"),
        }
    }
    vec![Comparison {
        id: "stop".into(),
        title: "Graceful stop: stop() to Down".into(),
        unit: "ms",
        lower_is_better: true,
        coord: Series {
            subject: "coord (stop + HostWatcher)".into(),
            values: coord_ms,
        },
        baseline: Series {
            subject: "etcd-client revoke + watch".into(),
            values: raw_ms,
        },
        ratio_of: Statistic::Median,
        note: None,
    }]
}

/// Waits for `id`'s `Up` (or, with `down`, its `Down`); when it came.
async fn next_for(
    watcher: &mut HostWatcher<HostMetadata>,
    id: &str,
    down: bool,
) -> Option<Instant> {
    let until = Instant::now() + DEADLINE;
    loop {
        let left = until.checked_duration_since(Instant::now())?;
        let event = tokio::time::timeout(left, watcher.next()).await.ok()??;
        let hit = match &event {
            HostEvent::Up { host, .. } => !down && host == id,
            HostEvent::Down { host, .. } => down && host == id,
            _ => false,
        };
        if hit {
            return Some(Instant::now());
        }
    }
}
