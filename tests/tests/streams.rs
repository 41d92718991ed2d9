//! `HostWatcher` and `Observe` as `futures::Stream`s against real etcd:
//! combinators see every change once and in order, under every driving of
//! the watcher's loop, and the streams end when closed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::future::ready;
use std::time::Duration;

use coord::{Driving, Election, HostEvent, HostWatcher, Observe, WatcherOptions};
use coord_tests::etcd::EtcdCluster;
use coord_tests::init_tracing;
use futures::StreamExt;

const P: &str = "/coord/hosts/";
const WAIT: Duration = Duration::from_secs(20);

async fn watched_through_stream_combinators(driving: Driving) {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let c = etcd.client().await;
    let mut w: HostWatcher = HostWatcher::new(
        c.clone(),
        // A buffer far smaller than the changes below: the stream is read
        // while the watcher holds etcd back.
        WatcherOptions::default()
            .with_buffer(4)
            .with_driving(driving),
    )
    .await
    .unwrap();
    let first = tokio::time::timeout(WAIT, w.next()).await.unwrap().unwrap();
    assert!(matches!(first, HostEvent::Synced { .. }), "{first:?}");

    let mut want = Vec::new();
    let mut up = BTreeSet::new();
    for i in 0..40 {
        let id = format!("h{}", i % 7);
        let resp = if up.contains(&id) && i % 3 == 0 {
            up.remove(&id);
            let r = c.clone().delete(format!("{P}{id}"), None).await.unwrap();
            want.push(("down", id, r.header().unwrap().revision()));
            continue;
        } else {
            let value = format!("{{\"host_uuid\":\"{id}\",\"n\":{i}}}");
            c.clone()
                .put(format!("{P}{id}"), value, None)
                .await
                .unwrap()
        };
        let kind = if up.insert(id.clone()) {
            "up"
        } else {
            "updated"
        };
        want.push((kind, id, resp.header().unwrap().revision()));
    }

    // A combinator chain over the watcher (by reference: it stays usable).
    let got: Vec<(&str, String, i64)> = (&mut w)
        .filter_map(|e| {
            ready(match e {
                HostEvent::Up { host, revision, .. } => Some(("up", host, revision.0)),
                HostEvent::Updated { host, revision, .. } => Some(("updated", host, revision.0)),
                HostEvent::Down { host, revision, .. } => Some(("down", host, revision.0)),
                _ => None,
            })
        })
        .take(want.len())
        .collect()
        .await;
    assert_eq!(got, want, "every change once, in order, at etcd's revision");

    let closer = w.closer();
    closer.close();
    let end = tokio::time::timeout(WAIT, w.collect::<Vec<_>>()).await;
    let rest = end.expect("the stream ends once closed");
    assert!(
        rest.iter().all(|e| matches!(e, HostEvent::Retrying { .. })),
        "nothing but retries after the last change: {rest:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_watcher_is_a_stream() {
    watched_through_stream_combinators(Driving::Adaptive).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_on_its_own_task_is_a_stream() {
    watched_through_stream_combinators(Driving::OwnTask).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_driven_by_its_consumer_is_a_stream() {
    watched_through_stream_combinators(Driving::InNext).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_is_a_stream_of_leaders() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let c = etcd.client().await;
    let observe = Observe::start(c.clone(), "streamed").unwrap();
    let election = Election::new(c.clone(), "streamed", Default::default())
        .await
        .unwrap();
    // Nobody, then this candidate, then nobody again after its resign.
    let mut leaders = observe.map(|o| (o.leader.map(|l| l.value), o.revision));
    let (none, at) = tokio::time::timeout(WAIT, leaders.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(none, None);
    let leader = election.campaign("me").await.unwrap();
    let (me, elected_at) = tokio::time::timeout(WAIT, leaders.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(me, Some(b"me".to_vec()));
    assert_eq!(
        elected_at.0,
        leader.token().0,
        "observed at the put that made it leader"
    );
    assert!(elected_at > at);
    leader.resign().await.unwrap();
    let (gone, _) = tokio::time::timeout(WAIT, leaders.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(gone, None);
    election.close().await.unwrap();
}
