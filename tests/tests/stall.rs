//! A stalled consumer must not break anyone else's stream: a watcher whose
//! consumer stops reading while etcd pushes 100,000 events shares its
//! client (one HTTP/2 connection) with a host's keep-alive.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use coord::{
    BackoffConfig, HostEvent, HostLiveness, HostMetadata, HostWatcher, LivenessEvent,
    LivenessOptions, LivenessStatus, WatcherOptions,
};
use coord_tests::etcd::EtcdCluster;
use coord_tests::init_tracing;
use etcd_client::{Txn, TxnOp};
use tokio::sync::broadcast::error::TryRecvError;

const P: &str = "/coord/hosts/";
const EVENTS: usize = 100_000;
const KEYS: usize = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_watch_consumer_breaks_no_keep_alive_and_then_gets_every_event() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let direct = etcd.client().await;
    let shared = coord::connect(&etcd.endpoints(), coord::ConnectOptions::default())
        .await
        .unwrap();
    let host = HostLiveness::register(
        shared.clone(),
        HostMetadata::new("stalled-neighbour", "n.example"),
        // Keep-alives every 10 s: between them, pings faster than etcd's
        // 5 s minimum would draw a GOAWAY (a shorter TTL's replies would
        // hide that).
        LivenessOptions::default()
            .with_ttl(Duration::from_secs(30))
            .with_request_timeout(Duration::from_secs(2))
            .with_backoff(BackoffConfig::default())
            .with_seed(1),
    )
    .await
    .unwrap();
    let lease = host.lease_id().unwrap();
    let mut news = host.subscribe();
    let mut w: HostWatcher = HostWatcher::new(
        shared.clone(),
        WatcherOptions::default()
            .with_exclude_host("stalled-neighbour")
            .with_seed(2),
    )
    .await
    .unwrap();
    // Read the snapshot, then stop reading for a minute while etcd pushes
    // 100,000 changes (1,000 keys, each put 100 times with a new value).
    loop {
        if matches!(w.next().await.unwrap(), HostEvent::Synced { .. }) {
            break;
        }
    }
    let stall = tokio::time::sleep(Duration::from_secs(60));
    let writer = async {
        for round in 0..EVENTS / 100 {
            let ops: Vec<TxnOp> = (0..100)
                .map(|j| {
                    let n = round * 100 + j;
                    TxnOp::put(
                        format!("{P}k{:04}", n % KEYS),
                        format!("{{\"n\":{n}}}"),
                        None,
                    )
                })
                .collect();
            direct.clone().txn(Txn::new().and_then(ops)).await.unwrap();
        }
    };
    let ((), ()) = tokio::join!(stall, writer);
    // The neighbour on the same connection never noticed.
    loop {
        match news.try_recv() {
            Ok(e) => assert!(
                !matches!(
                    e,
                    LivenessEvent::KeepAliveInterrupted { .. } | LivenessEvent::Lost { .. }
                ),
                "the stalled watch disturbed the host: {e:?}"
            ),
            Err(TryRecvError::Empty) => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(*host.state().borrow(), LivenessStatus::Registered { lease });
    // And the watcher delivers every change, in order.
    let mut changes = 0;
    let deadline = Duration::from_secs(300);
    let delivered = tokio::time::timeout(deadline, async {
        while changes < EVENTS {
            match w.next().await.unwrap() {
                HostEvent::Up { .. } | HostEvent::Updated { .. } => changes += 1,
                e => panic!("only changes were made: {e:?}"),
            }
        }
    })
    .await;
    assert!(
        delivered.is_ok(),
        "{changes} of {EVENTS} changes delivered in {deadline:?}; watcher state {:?}",
        *w.status().borrow()
    );
    assert_eq!(w.view().len(), KEYS);
    let last = &w.view()[&format!("k{:04}", KEYS - 1)];
    assert_eq!(last.raw, format!("{{\"n\":{}}}", EVENTS - 1).into_bytes());
    host.stop().await.unwrap();
}
