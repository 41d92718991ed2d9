//! coord's metrics, recorded through the `metrics` facade against real
//! etcd: a debugging recorder (installed once for this test binary) sees
//! the watcher's events by kind, the lease counters, elections won and a
//! failover at an observer.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use coord::{
    Election, HostEvent, HostLiveness, HostMetadata, HostWatcher, LivenessOptions, SessionOptions,
    WatcherOptions,
};
use coord_tests::etcd::EtcdCluster;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

const DEADLINE: Duration = Duration::from_secs(30);

/// Every metric recorded since the last snapshot (the recorder resets
/// counters and histograms when read), by name and labels.
struct Seen(Vec<Sample>);

/// A metric's name, labels and value.
type Sample = (String, Vec<(String, String)>, DebugValue);

impl Seen {
    fn take(snapshotter: &Snapshotter) -> Seen {
        Seen(
            snapshotter
                .snapshot()
                .into_vec()
                .into_iter()
                .map(|(key, _, _, value)| {
                    let k = key.key();
                    let labels = k
                        .labels()
                        .map(|l| (l.key().to_string(), l.value().to_string()))
                        .collect();
                    (k.name().to_string(), labels, value)
                })
                .collect(),
        )
    }

    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<&DebugValue> {
        self.0
            .iter()
            .find(|(n, l, _)| {
                n == name
                    && l.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| l.iter().any(|(a, b)| a == k && b == v))
            })
            .map(|(_, _, v)| v)
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        match self.value(name, labels) {
            Some(DebugValue::Counter(n)) => *n,
            _ => 0,
        }
    }

    fn samples(&self, name: &str) -> usize {
        self.0
            .iter()
            .filter(|(n, _, _)| n == name)
            .map(|(_, _, v)| match v {
                DebugValue::Histogram(h) => h.len(),
                _ => 0,
            })
            .sum()
    }
}

async fn next(watcher: &mut HostWatcher) -> HostEvent<HostMetadata> {
    tokio::time::timeout(DEADLINE, watcher.next())
        .await
        .expect("an event in time")
        .expect("the watcher runs")
}

#[tokio::test(flavor = "multi_thread")]
async fn watcher_lease_election_and_failover_metrics_are_recorded() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");
    let etcd = EtcdCluster::single().await;
    let client = etcd.coord_client().await;

    let mut watcher: HostWatcher = HostWatcher::new(client.clone(), WatcherOptions::default())
        .await
        .unwrap();
    assert!(matches!(next(&mut watcher).await, HostEvent::Synced { .. }));
    let host = HostLiveness::register(
        client.clone(),
        HostMetadata::new("m1", "node-1"),
        LivenessOptions::default(),
    )
    .await
    .unwrap();
    assert!(matches!(next(&mut watcher).await, HostEvent::Up { .. }));
    host.stop().await.unwrap();
    let down = next(&mut watcher).await;
    let HostEvent::Down { revision, .. } = down else {
        panic!("{down:?}")
    };
    let seen = Seen::take(&snapshotter);
    assert_eq!(
        seen.counter("coord_watcher_events_total", &[("kind", "synced")]),
        1
    );
    assert_eq!(
        seen.counter("coord_watcher_events_total", &[("kind", "up")]),
        1
    );
    assert_eq!(
        seen.counter("coord_watcher_events_total", &[("kind", "down")]),
        1
    );
    assert!(matches!(
        seen.value("coord_watcher_revision", &[]),
        Some(DebugValue::Gauge(g)) if g.into_inner() == revision.0 as f64
    ));
    assert_eq!(
        seen.counter("coord_lease_registrations_total", &[("handle", "liveness")]),
        1
    );

    let options = SessionOptions::default().with_ttl(Duration::from_secs(5));
    let first = Election::new(client.clone(), "metered", options.clone())
        .await
        .unwrap();
    let mut observe = first.observe();
    let leader = first.campaign("a").await.unwrap();
    let leader_value = |o: Option<coord::Observed>| o.expect("observing").leader.map(|l| l.value);
    // Nobody, then "a" (or "a" at once).
    let mut first_seen = leader_value(observe.next().await);
    if first_seen.is_none() {
        first_seen = leader_value(observe.next().await);
    }
    assert_eq!(first_seen, Some(b"a".to_vec()));
    leader.resign().await.unwrap();
    assert_eq!(leader_value(observe.next().await), None);
    let second = Election::new(client.clone(), "metered", options)
        .await
        .unwrap();
    let _leader = second.campaign("b").await.unwrap();
    assert_eq!(leader_value(observe.next().await), Some(b"b".to_vec()));
    let seen = Seen::take(&snapshotter);
    assert_eq!(seen.counter("coord_elections_won_total", &[]), 2);
    assert_eq!(seen.samples("coord_campaign_wait_seconds"), 2);
    assert_eq!(seen.samples("coord_failover_seconds"), 1);
    assert_eq!(
        seen.counter("coord_lease_registrations_total", &[("handle", "session")]),
        2
    );
    second.close().await.unwrap();
    first.close().await.unwrap();
}
