//! Whatever etcd does, every view converges: etcd wiped or replaced under
//! running hosts and watchers, prefixes larger than one gRPC message, and
//! fleets listed in pages.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use coord::{
    BackoffConfig, HostEvent, HostLiveness, HostMetadata, HostWatcher, LeaseId, LivenessOptions,
    ResyncReason, ViewStatus, WatcherOptions,
};
use coord_tests::etcd::EtcdCluster;
use coord_tests::proxy::{Mode, Proxy};
use coord_tests::{eventually, init_tracing};
use etcd_client::{Client, GetOptions, Txn, TxnOp};

const P: &str = "/coord/hosts/";

fn watcher_opts() -> WatcherOptions {
    coord_tests::options::watcher()
}

fn liveness_opts() -> LivenessOptions {
    coord_tests::options::liveness(Duration::from_secs(1))
}

fn meta(id: &str) -> HostMetadata {
    HostMetadata {
        started_at_unix_ns: 1,
        ..HostMetadata::new(id, format!("{id}.example"))
    }
}

/// etcd's hosts now: id -> (lease, raw value).
async fn truth(c: &Client) -> BTreeMap<String, (i64, Vec<u8>)> {
    // Raised past tonic's 4 MiB default, as coord does.
    let resp = c
        .kv_client()
        .max_decoding_message_size(coord::etcd::MAX_RESPONSE_BYTES)
        .get(P, Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    resp.kvs()
        .iter()
        .map(|kv| {
            (
                kv.key_str().unwrap()[P.len()..].to_string(),
                (kv.lease(), kv.value().to_vec()),
            )
        })
        .collect()
}

/// The watcher's view in the same shape.
fn seen(w: &HostWatcher) -> BTreeMap<String, (i64, Vec<u8>)> {
    w.view()
        .into_iter()
        .map(|(h, r)| (h, (r.lease.0, r.raw)))
        .collect()
}

/// Reads events until `until` matches one (returned), failing after
/// `deadline`.
async fn drain_until(
    w: &mut HostWatcher,
    deadline: Duration,
    mut until: impl FnMut(&HostEvent<HostMetadata>) -> bool,
) -> HostEvent<HostMetadata> {
    tokio::time::timeout(deadline, async {
        loop {
            let e = w.next().await.expect("watcher open");
            if until(&e) {
                return e;
            }
        }
    })
    .await
    .expect("the awaited event in time")
}

/// Puts `records` directly (no leases), 100 per transaction.
async fn put_many(c: &Client, records: &[(String, Vec<u8>)]) {
    for chunk in records.chunks(100) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .map(|(k, v)| TxnOp::put(format!("{P}{k}"), v.clone(), None))
            .collect();
        c.clone().txn(Txn::new().and_then(ops)).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_etcd_is_noticed_and_the_watcher_converges_with_the_hosts_back() {
    init_tracing();
    let mut etcd = EtcdCluster::single().await;
    let direct = etcd.client().await;
    let via = coord::connect(&etcd.endpoints(), coord::ConnectOptions::default())
        .await
        .unwrap();
    let mut hosts = Vec::new();
    for id in ["h1", "h2", "h3"] {
        hosts.push(
            HostLiveness::register(via.clone(), meta(id), liveness_opts())
                .await
                .unwrap(),
        );
    }
    // A record nobody keeps alive: gone for good after the wipe.
    put_many(&direct, &[("gone".into(), b"{}".to_vec())]).await;
    // History well past what the wiped etcd will reach.
    for i in 0..60 {
        direct
            .clone()
            .put("/other/churn", format!("{i}"), None)
            .await
            .unwrap();
    }
    let mut w: HostWatcher = HostWatcher::new(via.clone(), watcher_opts()).await.unwrap();
    // The revision the watcher reflects before the wipe: its snapshot's,
    // past the churn.
    let synced = drain_until(&mut w, Duration::from_secs(20), |e| {
        matches!(e, HostEvent::Synced { .. })
    })
    .await;
    let HostEvent::Synced {
        revision: last_before,
    } = synced
    else {
        unreachable!()
    };
    assert_eq!(seen(&w), truth(&direct).await);
    let before: Vec<LeaseId> = hosts.iter().filter_map(HostLiveness::lease_id).collect();
    assert_eq!(before.len(), 3);

    etcd.wipe(false).await;
    let direct = etcd.client().await;
    // A host written to the new etcd by someone else.
    put_many(&direct, &[("new".into(), b"{}".to_vec())]).await;

    let mut after = Vec::new();
    drain_until(&mut w, Duration::from_secs(30), |e| {
        after.push(e.clone());
        matches!(e, HostEvent::Resynced { .. })
    })
    .await;
    // The reset is announced before any event of the new history, and
    // revisions go down there only.
    let mut events = after
        .iter()
        .filter(|e| !matches!(e, HostEvent::Retrying { .. }));
    let Some(HostEvent::Reset { reason, revision }) = events.next() else {
        panic!("the wipe was not announced first: {after:?}");
    };
    assert!(
        matches!(reason, ResyncReason::RevisionWentBack { .. }),
        "{reason:?}"
    );
    assert!(*revision < last_before, "{revision:?} {last_before:?}");
    let mut last = *revision;
    for e in events {
        let r = match e {
            HostEvent::Up { revision, .. }
            | HostEvent::Updated { revision, .. }
            | HostEvent::Down { revision, .. } => *revision,
            HostEvent::Resynced {
                reason: again,
                revision,
            } => {
                assert_eq!(again, reason, "the resync closes the reset");
                *revision
            }
            other => panic!("{other:?} within a reset: {after:?}"),
        };
        assert!(r >= last, "revision went back after the reset: {after:?}");
        last = r;
    }
    // Every host comes back on a new lease, and the view is etcd's truth:
    // no host or lease from before the wipe survives in it.
    let view = eventually(
        Duration::from_secs(30),
        "the view to equal etcd",
        || async {
            let t = truth(&direct).await;
            let back = ["h1", "h2", "h3", "new"].iter().all(|h| t.contains_key(*h));
            (back && seen(&w) == t).then_some(t)
        },
    )
    .await;
    assert!(!view.contains_key("gone"), "{view:?}");
    for (h, (lease, _)) in &view {
        assert!(
            !before.contains(&LeaseId(*lease)),
            "{h} still on a lease from before the wipe"
        );
    }
    // Each handle names its new lease once it has the put's answer (the
    // watcher can see the key a moment before).
    for h in &hosts {
        eventually(
            Duration::from_secs(10),
            "the handle's new lease",
            || async {
                h.lease_id()
                    .is_some_and(|l| !before.contains(&l) && view.values().any(|(v, _)| *v == l.0))
                    .then_some(())
            },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_cluster_is_noticed_by_its_id_even_ahead_in_revisions() {
    init_tracing();
    let mut etcd = EtcdCluster::single().await;
    let direct = etcd.client().await;
    put_many(
        &direct,
        &[("a".into(), b"{}".to_vec()), ("b".into(), b"{}".to_vec())],
    )
    .await;
    let proxy = Proxy::start(&etcd.endpoints()[0]).await;
    let via = coord::connect(&[proxy.endpoint()], coord::ConnectOptions::default())
        .await
        .unwrap();
    let mut w: HostWatcher = HostWatcher::new(via, watcher_opts()).await.unwrap();
    drain_until(&mut w, Duration::from_secs(20), |e| {
        matches!(e, HostEvent::Synced { .. })
    })
    .await;
    // Cut off, the cluster is replaced by another whose revision passes
    // the old one: only its id tells them apart.
    proxy.set(Mode::Blackhole);
    etcd.wipe(true).await;
    let direct = etcd.client().await;
    for i in 0..30 {
        direct
            .clone()
            .put("/other/churn", format!("{i}"), None)
            .await
            .unwrap();
    }
    put_many(&direct, &[("c".into(), b"{}".to_vec())]).await;
    proxy.set(Mode::Pass);
    let e = drain_until(&mut w, Duration::from_secs(30), |e| {
        matches!(e, HostEvent::Resynced { .. })
    })
    .await;
    let HostEvent::Resynced { reason, .. } = &e else {
        unreachable!()
    };
    assert!(
        matches!(reason, ResyncReason::ClusterChanged { .. }),
        "{reason:?}"
    );
    assert_eq!(seen(&w), truth(&direct).await);
    assert_eq!(seen(&w).keys().cloned().collect::<Vec<_>>(), vec!["c"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_hosts_are_listed_in_pages_and_relisted_after_a_compaction() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let direct = etcd.client().await;
    let records: Vec<(String, Vec<u8>)> = (0..10_000)
        .map(|i| {
            let id = format!("host-{i:05}");
            let value = serde_json::to_vec(&meta(&id)).unwrap();
            (id, value)
        })
        .collect();
    put_many(&direct, &records).await;
    let proxy = Proxy::start(&etcd.endpoints()[0]).await;
    let via = coord::connect(&[proxy.endpoint()], coord::ConnectOptions::default())
        .await
        .unwrap();
    let mut w: HostWatcher = HostWatcher::new(via, watcher_opts()).await.unwrap();
    let mut ups = 0;
    drain_until(&mut w, Duration::from_secs(60), |e| {
        ups += usize::from(matches!(e, HostEvent::Up { .. }));
        matches!(e, HostEvent::Synced { .. })
    })
    .await;
    assert_eq!(ups, 10_000);
    assert_eq!(seen(&w), truth(&direct).await);
    // Cut off across changes and a compaction: the re-list is paged too.
    proxy.set(Mode::Blackhole);
    direct
        .clone()
        .delete(format!("{P}host-00000"), None)
        .await
        .unwrap();
    put_many(&direct, &[("host-10000".into(), b"{}".to_vec())]).await;
    etcd.compact().await;
    proxy.set(Mode::Pass);
    drain_until(&mut w, Duration::from_secs(60), |e| {
        matches!(e, HostEvent::Resynced { .. })
    })
    .await;
    let view = seen(&w);
    assert_eq!(view.len(), 10_000);
    assert_eq!(view, truth(&direct).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_larger_than_one_grpc_message_is_listed_and_relisted() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let direct = etcd.client().await;
    // Five hosts of about 900 KiB each: 4.6 MB, over tonic's 4 MiB default.
    let big = |id: &str, fill: char| {
        let mut m = meta(id);
        m.extra.insert(
            "padding".into(),
            serde_json::Value::String(std::iter::repeat_n(fill, 900 * 1024).collect()),
        );
        serde_json::to_vec(&m).unwrap()
    };
    for i in 0..5 {
        let id = format!("big-{i}");
        let v = big(&id, 'x');
        direct
            .clone()
            .put(format!("{P}{id}"), v, None)
            .await
            .unwrap();
    }
    let proxy = Proxy::start(&etcd.endpoints()[0]).await;
    let via = coord::connect(&[proxy.endpoint()], coord::ConnectOptions::default())
        .await
        .unwrap();
    let mut w: HostWatcher = HostWatcher::new(via, watcher_opts()).await.unwrap();
    drain_until(&mut w, Duration::from_secs(60), |e| {
        matches!(e, HostEvent::Synced { .. })
    })
    .await;
    assert_eq!(seen(&w), truth(&direct).await);
    assert_eq!(w.view().len(), 5);
    assert!(w.view().values().all(|r| r.meta.is_ok()));
    // Cut off, every record changes and history is compacted: the re-list
    // reads all of them again.
    proxy.set(Mode::Blackhole);
    for i in 0..5 {
        let id = format!("big-{i}");
        let v = big(&id, 'y');
        direct
            .clone()
            .put(format!("{P}{id}"), v, None)
            .await
            .unwrap();
    }
    etcd.compact().await;
    // Cut off, the watcher says that its view may be stale: an event, and
    // a state that stays until a success.
    let e = drain_until(&mut w, Duration::from_secs(60), |e| {
        matches!(e, HostEvent::Retrying { .. })
    })
    .await;
    let HostEvent::Retrying {
        attempt, failure, ..
    } = e
    else {
        unreachable!()
    };
    assert!(attempt >= 1 && failure.is_some(), "{attempt} {failure:?}");
    assert!(
        matches!(*w.status().borrow(), ViewStatus::Failing { .. }),
        "{:?}",
        *w.status().borrow()
    );
    proxy.set(Mode::Pass);
    let mut updated = 0;
    drain_until(&mut w, Duration::from_secs(60), |e| {
        updated += usize::from(matches!(e, HostEvent::Updated { .. }));
        matches!(e, HostEvent::Resynced { .. })
    })
    .await;
    assert_eq!(updated, 5);
    assert_eq!(seen(&w), truth(&direct).await);
    let mut status = w.status();
    tokio::time::timeout(
        Duration::from_secs(30),
        status.wait_for(|s| matches!(s, ViewStatus::Watching { .. })),
    )
    .await
    .expect("watching again in time")
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_already_past_the_view_is_found_by_reading_back_before_resuming() {
    init_tracing();
    let mut etcd = EtcdCluster::single().await;
    let direct = etcd.client().await;
    put_many(
        &direct,
        &[("a".into(), b"{}".to_vec()), ("b".into(), b"{}".to_vec())],
    )
    .await;
    let proxy = Proxy::start(&etcd.endpoints()[0]).await;
    let via = coord::connect(&[proxy.endpoint()], coord::ConnectOptions::default())
        .await
        .unwrap();
    let mut w: HostWatcher = HostWatcher::new(via, watcher_opts()).await.unwrap();
    drain_until(&mut w, Duration::from_secs(20), |e| {
        matches!(e, HostEvent::Synced { .. })
    })
    .await;
    // Cut off, etcd is wiped (the same cluster id: a restore) and its new
    // revisions pass the watcher's: no header will ever be behind it.
    proxy.set(Mode::Blackhole);
    etcd.wipe(false).await;
    let direct = etcd.client().await;
    put_many(
        &direct,
        &[
            ("b".into(), b"{\"again\":1}".to_vec()),
            ("c".into(), b"{}".to_vec()),
        ],
    )
    .await;
    for i in 0..30 {
        direct
            .clone()
            .put("/other/churn", format!("{i}"), None)
            .await
            .unwrap();
    }
    proxy.set(Mode::Pass);
    let e = drain_until(&mut w, Duration::from_secs(30), |e| {
        matches!(e, HostEvent::Resynced { .. })
    })
    .await;
    let HostEvent::Resynced { reason, .. } = &e else {
        unreachable!()
    };
    assert!(
        matches!(reason, ResyncReason::HistoryDiverged { .. }),
        "{reason:?}"
    );
    assert_eq!(seen(&w), truth(&direct).await);
    assert_eq!(seen(&w).keys().cloned().collect::<Vec<_>>(), vec!["b", "c"]);
}

/// The next observation, failing after 30 s.
async fn next(o: &mut coord::Observe) -> coord::Observed {
    tokio::time::timeout(Duration::from_secs(30), o.next())
        .await
        .expect("an observation in time")
        .expect("observing")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_follows_an_election_across_a_wiped_etcd() {
    init_tracing();
    let mut etcd = EtcdCluster::single().await;
    let via = coord::connect(&etcd.endpoints(), coord::ConnectOptions::default())
        .await
        .unwrap();
    let opts = coord::SessionOptions::default()
        .with_ttl(Duration::from_secs(5))
        .with_request_timeout(Duration::from_secs(1))
        .with_backoff(BackoffConfig::default().with_cap(Duration::from_secs(2)))
        .with_seed(3);
    // History well past what the wiped etcd will reach.
    let direct = etcd.client().await;
    for i in 0..40 {
        direct
            .clone()
            .put("/other/churn", format!("{i}"), None)
            .await
            .unwrap();
    }
    let first = coord::Election::new(via.clone(), "wiped", opts.clone())
        .await
        .unwrap();
    let lead = first.campaign("one").await.unwrap();
    let mut observe = coord::Observe::start_with(via.clone(), "wiped", &opts).unwrap();
    let seen = next(&mut observe).await;
    assert_eq!(seen.leader.map(|l| l.value), Some(b"one".to_vec()));
    etcd.wipe(false).await;
    // The leader's key is gone with everything else: nobody leads, and the
    // leadership knows it lost.
    let before = seen.revision;
    let seen = next(&mut observe).await;
    assert_eq!(seen.leader, None, "{seen:?}");
    // The observation says that etcd's history started over: its revision
    // is below the one before, the one time it may be.
    assert!(
        matches!(seen.reset, Some(ResyncReason::RevisionWentBack { .. })),
        "{seen:?}"
    );
    assert!(seen.revision < before, "{seen:?} after {before:?}");
    tokio::time::timeout(Duration::from_secs(30), lead.lost())
        .await
        .expect("the leadership lost in time");
    // A new campaign in the new etcd is observed.
    let second = coord::Election::new(via.clone(), "wiped", opts.clone())
        .await
        .unwrap();
    let _lead2 = second.campaign("two").await.unwrap();
    let seen = next(&mut observe).await;
    assert_eq!(seen.leader.map(|l| l.value), Some(b"two".to_vec()));
    assert!(matches!(
        *observe.status().borrow(),
        coord::ViewStatus::Watching { .. }
    ));
}

/// Heal is fast when etcd is silent, not only when it refuses: a host and
/// a watcher on one client, with coord's default pacing (request timeout
/// 5 s, backoff to a 30 s cap), are cut off by a proxy that blackholes
/// established connections for 45 s, long enough for the host's key to
/// expire and for requests to time out again and again. Once the path
/// clears, the host is registered again and the watcher sees it within
/// 10 s (measured here: under 1 s). Against real etcd the transport
/// notices the dead connection (its pings go unanswered) and a reconnect
/// that cannot complete counts as a fast failure; the client's probe (see
/// the simulator's "unanswered requests", where the connection stays up)
/// cuts the waits the transport cannot see.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_long_silent_outage_host_and_watcher_are_back_within_seconds_of_the_path_clearing()
{
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let direct = etcd.client().await;
    let proxy = Proxy::start(&etcd.endpoints()[0]).await;
    let via = coord::connect(&[proxy.endpoint()], coord::ConnectOptions::default())
        .await
        .unwrap();
    let host = HostLiveness::register(
        via.clone(),
        meta("h-silent"),
        LivenessOptions::default().with_seed(3),
    )
    .await
    .unwrap();
    let old = host.lease_id().unwrap();
    let mut w: HostWatcher = HostWatcher::new(
        via,
        WatcherOptions::default().with_seed(4).with_buffer(1024),
    )
    .await
    .unwrap();
    drain_until(&mut w, Duration::from_secs(20), |e| {
        matches!(e, HostEvent::Synced { .. })
    })
    .await;
    proxy.set(Mode::Blackhole);
    // The TTL (10 s) passes in silence: etcd expires the key.
    eventually(Duration::from_secs(20), "the key expired", || async {
        (!truth(&direct).await.contains_key("h-silent")).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(35)).await;
    proxy.set(Mode::Pass);
    let cleared = std::time::Instant::now();
    let deadline = Duration::from_secs(10);
    let mut state = host.state();
    let status = tokio::time::timeout(
        deadline,
        state.wait_for(
            |s| matches!(s, coord::LivenessStatus::Registered { lease } if *lease != old),
        ),
    )
    .await
    .unwrap_or_else(|_| panic!("not back within {deadline:?}: {:?}", *host.state().borrow()))
    .unwrap()
    .clone();
    let coord::LivenessStatus::Registered { lease } = status else {
        unreachable!()
    };
    let registered = cleared.elapsed();
    assert_eq!(truth(&direct).await["h-silent"].0, lease.0);
    let left = deadline.saturating_sub(cleared.elapsed());
    tokio::time::timeout(left, async {
        while seen(&w).get("h-silent").map(|(l, _)| *l) != Some(lease.0) {
            w.next().await.expect("watcher open");
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the watcher did not see the host back within {deadline:?}"));
    tracing::info!(?registered, seen = ?cleared.elapsed(), "back after the path cleared");
    host.stop().await.unwrap();
}
