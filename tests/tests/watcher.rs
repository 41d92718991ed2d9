//! The host watcher against real etcd.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use coord::{
    BackoffConfig, Driving, Error, HostEvent, HostLiveness, HostMetadata, HostWatcher,
    LivenessOptions, ResyncReason, Revision, ViewStatus, WatcherOptions,
};
use coord_tests::etcd::{free_ports, EtcdCluster};
use coord_tests::init_tracing;
use coord_tests::proxy::{Mode, Proxy};
use etcd_client::{Client, EventType, GetOptions, PutOptions, WatchOptions};

const P: &str = "/coord/hosts/";

fn opts() -> WatcherOptions {
    WatcherOptions::default()
        .with_request_timeout(Duration::from_secs(1))
        .with_probe_interval(Duration::from_secs(1))
        .with_backoff(BackoffConfig::default().with_cap(Duration::from_secs(2)))
        .with_seed(3)
}

fn meta(id: &str) -> HostMetadata {
    HostMetadata {
        started_at_unix_ns: 1,
        ..HostMetadata::new(id, format!("{id}.example"))
    }
}

async fn put_host(c: &Client, id: &str, lease: Option<i64>) {
    let value = serde_json::to_vec(&meta(id)).unwrap();
    let opts = lease.map(|l| PutOptions::new().with_lease(l));
    c.clone()
        .put(format!("{P}{id}"), value, opts)
        .await
        .unwrap();
}

async fn next(w: &mut HostWatcher) -> HostEvent<HostMetadata> {
    tokio::time::timeout(Duration::from_secs(20), w.next())
        .await
        .expect("an event in time")
        .expect("watcher open")
}

/// The host ids etcd has under the prefix now.
async fn etcd_hosts(c: &Client) -> Vec<String> {
    let resp = c
        .clone()
        .get(P, Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    resp.kvs()
        .iter()
        .map(|kv| kv.key_str().unwrap()[P.len()..].to_string())
        .filter(|h| !h.contains('/') && !h.is_empty())
        .collect()
}

/// Applies an event to a model of the consumer's view, asserting it is
/// sound (no Up for an up host, no Down or Updated for an absent one, no
/// revision going back).
fn apply(view: &mut BTreeMap<String, Revision>, last: &mut Revision, e: &HostEvent<HostMetadata>) {
    let rev = match e {
        HostEvent::Up { host, revision, .. } => {
            assert!(
                view.insert(host.clone(), *revision).is_none(),
                "second Up for {host}"
            );
            *revision
        }
        HostEvent::Updated { host, revision, .. } => {
            assert!(
                view.insert(host.clone(), *revision).is_some(),
                "Updated for absent {host}"
            );
            *revision
        }
        HostEvent::Down { host, revision, .. } => {
            assert!(view.remove(host).is_some(), "Down for absent {host}");
            *revision
        }
        HostEvent::Synced { revision } | HostEvent::Resynced { revision, .. } => *revision,
        HostEvent::Retrying { .. } => *last,
        other => panic!("an event this test does not know: {other:?}"),
    };
    assert!(rev >= *last, "revision went back from {last:?} to {rev:?}");
    *last = rev;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_then_live_ups_updates_and_downs_with_last_seen_metadata() {
    snapshot_then_live_changes(Driving::Adaptive).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_with_the_loop_driven_by_next() {
    snapshot_then_live_changes(Driving::InNext).await;
}

async fn snapshot_then_live_changes(driving: Driving) {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let c = etcd.client().await;
    put_host(&c, "a", None).await;
    put_host(&c, "b", None).await;
    put_host(&c, "me", None).await;
    let mut w: HostWatcher = HostWatcher::new(
        c.clone(),
        opts().with_exclude_host("me").with_driving(driving),
    )
    .await
    .expect("watcher");
    let mut ups = Vec::new();
    loop {
        match next(&mut w).await {
            HostEvent::Up { host, record, .. } => {
                assert_eq!(record.meta.as_ref().unwrap(), &meta(&host));
                ups.push(host);
            }
            HostEvent::Synced { .. } => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(ups, vec!["a", "b"], "snapshot as Up, excluding this host");

    // A host registering through coord: Up.
    let opts_l = LivenessOptions::default().with_ttl(Duration::from_secs(10));
    let c_host = HostLiveness::register(c.clone(), meta("c"), opts_l)
        .await
        .unwrap();
    match next(&mut w).await {
        HostEvent::Up { host, record, .. } => {
            assert_eq!(host, "c");
            assert_eq!(Some(record.lease), c_host.lease_id());
        }
        other => panic!("{other:?}"),
    }
    // New metadata for a: Updated with the previous record.
    let mut a2 = meta("a");
    a2.version = "2.0".into();
    c.clone()
        .put(format!("{P}a"), serde_json::to_vec(&a2).unwrap(), None)
        .await
        .unwrap();
    match next(&mut w).await {
        HostEvent::Updated {
            host,
            record,
            previous,
            ..
        } => {
            assert_eq!(host, "a");
            assert_eq!(record.meta.unwrap().version, "2.0");
            assert_eq!(previous.meta.unwrap().version, "");
        }
        other => panic!("{other:?}"),
    }
    // c stops: Down carrying what c last held.
    c_host.stop().await.unwrap();
    match next(&mut w).await {
        HostEvent::Down {
            host, last_seen, ..
        } => {
            assert_eq!(host, "c");
            assert_eq!(last_seen.meta.unwrap(), meta("c"));
        }
        other => panic!("{other:?}"),
    }
    c.clone().put(format!("{P}me"), "x", None).await.unwrap();
    c.clone().delete(format!("{P}b"), None).await.unwrap();
    match next(&mut w).await {
        HostEvent::Down { host, .. } => assert_eq!(host, "b", "the excluded host never shows"),
        other => panic!("{other:?}"),
    }
    let view = w.view();
    assert_eq!(view.keys().collect::<Vec<_>>(), vec!["a"]);
    assert_eq!(
        view["a"].meta.as_ref().unwrap().version,
        "2.0",
        "the view holds the newest record"
    );
    w.close().await;
    w.close().await;
    assert!(w.next().await.is_none(), "events end once closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_values_nested_keys_and_go_coord_records() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let c = etcd.client().await;
    let go = r#"{"host_uuid":"g1","hostname":"n","hypervisor":"xen","version":"3","started_at_unix_ns":7,"rack":"r1"}"#;
    c.clone().put(format!("{P}g1"), go, None).await.unwrap();
    c.clone()
        .put(format!("{P}bad"), "not json", None)
        .await
        .unwrap();
    c.clone()
        .put(format!("{P}x/nested"), "{}", None)
        .await
        .unwrap();
    c.clone().put(P, "{}", None).await.unwrap();
    let mut w: HostWatcher = HostWatcher::new(c.clone(), opts()).await.unwrap();
    let mut seen = BTreeMap::new();
    loop {
        match next(&mut w).await {
            HostEvent::Up { host, record, .. } => {
                seen.insert(host, record);
            }
            HostEvent::Synced { .. } => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(seen.keys().collect::<Vec<_>>(), vec!["bad", "g1"]);
    let bad = &seen["bad"];
    assert!(
        bad.meta.is_err(),
        "undecodable metadata is an error, not zero values"
    );
    assert_eq!(bad.raw, b"not json");
    let g1 = seen["g1"].meta.as_ref().unwrap();
    assert_eq!(g1.version, "3");
    assert_eq!(serde_json::to_string(g1).unwrap(), go, "kept byte for byte");
    // Live: a nested key is no event; a bad value is.
    c.clone().put(format!("{P}y/z"), "{}", None).await.unwrap();
    c.clone().put(format!("{P}bad2"), "{", None).await.unwrap();
    match next(&mut w).await {
        HostEvent::Up { host, record, .. } => {
            assert_eq!(host, "bad2");
            assert!(record.meta.is_err());
        }
        other => panic!("{other:?}"),
    }
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_cut_off_past_a_compaction_resyncs_to_etcds_truth() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let direct = etcd.client().await;
    for h in ["a", "b", "c"] {
        put_host(&direct, h, None).await;
    }
    let proxy = Proxy::start(&etcd.endpoints()[0]).await;
    let via = coord::connect(&[proxy.endpoint()], coord::ConnectOptions::default())
        .await
        .unwrap();
    let mut w: HostWatcher = HostWatcher::new(via, opts()).await.unwrap();
    let mut view = BTreeMap::new();
    let mut last = Revision(0);
    loop {
        let e = next(&mut w).await;
        apply(&mut view, &mut last, &e);
        if matches!(e, HostEvent::Synced { .. }) {
            break;
        }
    }
    proxy.set(Mode::Blackhole);
    // While it is cut off: hosts come and go, then history is compacted.
    direct.clone().delete(format!("{P}a"), None).await.unwrap();
    put_host(&direct, "d", None).await;
    let mut b2 = meta("b");
    b2.version = "9".into();
    direct
        .clone()
        .put(format!("{P}b"), serde_json::to_vec(&b2).unwrap(), None)
        .await
        .unwrap();
    put_host(&direct, "e", None).await;
    direct.clone().delete(format!("{P}e"), None).await.unwrap();
    let compacted = etcd.compact().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.set(Mode::Pass);
    let mut resynced = false;
    while !resynced {
        let e = next(&mut w).await;
        apply(&mut view, &mut last, &e);
        if let HostEvent::Resynced { reason, .. } = &e {
            let ResyncReason::Compacted { compact_revision } = reason else {
                panic!("a compaction, not {reason:?}");
            };
            assert!(compact_revision.0 >= compacted, "{reason:?}");
            resynced = true;
        }
    }
    let truth = etcd_hosts(&direct).await;
    assert_eq!(view.keys().cloned().collect::<Vec<_>>(), truth);
    assert_eq!(w.view().keys().cloned().collect::<Vec<_>>(), truth);
    assert_eq!(w.view()["b"].meta.as_ref().unwrap().version, "9");
    // And it keeps watching from there.
    put_host(&direct, "f", None).await;
    match next(&mut w).await {
        HostEvent::Up { host, .. } => assert_eq!(host, "f"),
        other => panic!("{other:?}"),
    }
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_leader_killed_during_churn_loses_no_event() {
    init_tracing();
    let mut etcd = EtcdCluster::three().await;
    let c = etcd.client().await;
    // Three watchers with their own clients, so that some watch streams
    // sit on the member that gets killed.
    let mut watchers: Vec<HostWatcher> = Vec::new();
    let mut start = Revision(0);
    for _ in 0..3 {
        let mut w: HostWatcher = HostWatcher::new(etcd.client().await, opts()).await.unwrap();
        match next(&mut w).await {
            HostEvent::Synced { revision } => start = start.max(revision),
            other => panic!("{other:?}"),
        }
        watchers.push(w);
    }
    // Churn: hosts come and go, with and without leases, until told to stop.
    let churn = {
        let c = c.clone();
        tokio::spawn(async move {
            let mut done = 0;
            for i in 0..120u32 {
                let id = format!("h{}", i % 7);
                let r = if i % 3 == 2 {
                    c.clone().delete(format!("{P}{id}"), None).await.map(|_| ())
                } else {
                    let value = format!("{{\"host_uuid\":\"{id}\",\"n\":{i}}}");
                    c.clone()
                        .put(format!("{P}{id}"), value, None)
                        .await
                        .map(|_| ())
                };
                // Requests may fail during the election; the history
                // decides what happened, not this loop.
                if r.is_ok() {
                    done += 1;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            done
        })
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    let leader = etcd
        .wait_leader_other_than(None, Duration::from_secs(10))
        .await;
    etcd.kill(leader);
    etcd.wait_leader_other_than(Some(leader), Duration::from_secs(15))
        .await;
    let done = churn.await.unwrap();
    assert!(done > 60, "churn mostly succeeded ({done})");
    let survivors = etcd.client_to(&etcd.endpoints_except(leader)).await;
    let end = current_revision(&survivors).await;
    // etcd's own history since the snapshot, as the events a watcher owes.
    let mut stream = survivors
        .clone()
        .watch(
            P,
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(start.0 + 1)
                    .with_prev_key(),
            ),
        )
        .await
        .unwrap();
    let mut expected = Vec::new();
    let mut present: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    'history: while let Some(resp) = tokio::time::timeout(Duration::from_secs(20), stream.message())
        .await
        .expect("history in time")
        .unwrap()
    {
        for e in resp.events() {
            let kv = e.kv().unwrap();
            let host = kv.key_str().unwrap()[P.len()..].to_string();
            let rev = kv.mod_revision();
            match e.event_type() {
                EventType::Put => {
                    let before = present.insert(host.clone(), kv.value().to_vec());
                    match before {
                        None => expected.push(("up", host, rev)),
                        Some(v) if v != kv.value() => expected.push(("updated", host, rev)),
                        Some(_) => {}
                    }
                }
                EventType::Delete => {
                    if present.remove(&host).is_some() {
                        expected.push(("down", host, rev));
                    }
                }
            }
            if rev >= end {
                break 'history;
            }
        }
    }
    assert!(expected.len() > 60, "only {} changes", expected.len());
    for (i, w) in watchers.iter_mut().enumerate() {
        let mut got = Vec::new();
        while got.len() < expected.len() {
            match next(w).await {
                HostEvent::Up { host, revision, .. } => got.push(("up", host, revision.0)),
                HostEvent::Updated { host, revision, .. } => {
                    got.push(("updated", host, revision.0))
                }
                HostEvent::Down { host, revision, .. } => got.push(("down", host, revision.0)),
                HostEvent::Resynced { .. } => panic!("no compaction happened: no resync expected"),
                HostEvent::Synced { .. } => panic!("second Synced"),
                HostEvent::Retrying { .. } => {}
                other => panic!("an event this test does not know: {other:?}"),
            }
        }
        assert_eq!(got, expected, "watcher {i}: every change, once, in order");
        w.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_etcd_fails_the_watcher_fast() {
    init_tracing();
    let port = free_ports(1)[0];
    let c = coord::connect(
        &[format!("http://127.0.0.1:{port}")],
        coord::ConnectOptions::default(),
    )
    .await
    .unwrap();
    for driving in [Driving::Adaptive, Driving::OwnTask, Driving::InNext] {
        let err = HostWatcher::<HostMetadata>::new(c.clone(), opts().with_driving(driving))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Unreachable(_)), "{driving:?}: {err:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_loses_nothing_and_a_closer_ends_the_stream() {
    slow_consumer(Driving::Adaptive).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_of_a_loop_on_its_own_task_loses_nothing() {
    slow_consumer(Driving::OwnTask).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_driving_the_loop_loses_nothing_across_pauses() {
    slow_consumer(Driving::InNext).await;
}

/// A single-node etcd, a client of it, and a watcher on it with `buffer`
/// and `driving` (else [`opts`]).
async fn watcher_on_fresh_etcd(
    buffer: usize,
    driving: Driving,
) -> (EtcdCluster, Client, HostWatcher) {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let c = etcd.client().await;
    let w: HostWatcher =
        HostWatcher::new(c.clone(), opts().with_buffer(buffer).with_driving(driving))
            .await
            .unwrap();
    (etcd, c, w)
}

async fn slow_consumer(driving: Driving) {
    let (_etcd, c, mut w) = watcher_on_fresh_etcd(4, driving).await;
    assert!(matches!(next(&mut w).await, HostEvent::Synced { .. }));
    // Far more changes than the buffer holds, while nobody reads.
    for i in 0..100 {
        let id = format!("s{}", i % 10);
        if i % 4 == 3 {
            c.clone().delete(format!("{P}{id}"), None).await.unwrap();
        } else {
            let value = format!("{{\"host_uuid\":\"{id}\",\"n\":{i}}}");
            c.clone()
                .put(format!("{P}{id}"), value, None)
                .await
                .unwrap();
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let end = current_revision(&c).await;
    let mut view = BTreeMap::new();
    let mut last = Revision(0);
    let mut count = 0;
    while last.0 < end {
        let e = next(&mut w).await;
        apply(&mut view, &mut last, &e);
        count += 1;
    }
    assert!(count >= 75, "every change arrived ({count} events)");
    assert_eq!(
        view.keys().cloned().collect::<Vec<_>>(),
        etcd_hosts(&c).await
    );
    let closer = w.closer();
    tokio::spawn(async move { closer.close() });
    let end_of_stream = tokio::time::timeout(Duration::from_secs(10), w.next())
        .await
        .expect("the stream ends");
    assert!(end_of_stream.is_none());
    w.wait().await;
}

/// The default watcher's loop runs in `next()` while the consumer waits
/// there, and on its own task otherwise: waits cut short by a timeout hand
/// it back and forth without losing an event, the view keeps up while no
/// call waits, and a call from outside any runtime is served by the task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_passes_between_next_and_its_own_task_without_a_loss() {
    let (_etcd, c, mut w) = watcher_on_fresh_etcd(1_000, Driving::Adaptive).await;
    assert!(matches!(next(&mut w).await, HostEvent::Synced { .. }));
    let mut view = BTreeMap::new();
    let mut last = Revision(0);

    // 1. Changes while the consumer's waits keep being cut short.
    let writer = {
        let c = c.clone();
        tokio::spawn(async move {
            for i in 0..200 {
                let value = format!("{{\"host_uuid\":\"h{}\",\"n\":{i}}}", i % 20);
                c.clone()
                    .put(format!("{P}h{}", i % 20), value, None)
                    .await
                    .unwrap();
            }
        })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut cut_short = 0;
    while !writer.is_finished() || last.0 < current_revision(&c).await {
        assert!(tokio::time::Instant::now() < deadline, "caught up in time");
        match tokio::time::timeout(Duration::from_micros(300), w.next()).await {
            Ok(Some(e)) => apply(&mut view, &mut last, &e),
            Ok(None) => panic!("the watcher closed"),
            Err(_) => cut_short += 1,
        }
    }
    assert!(cut_short > 0, "some waits were cut short");
    assert_eq!(
        view.keys().cloned().collect::<Vec<_>>(),
        etcd_hosts(&c).await
    );

    // 2. Nobody waits in next(): the loop's own task keeps the view.
    for i in 0..30 {
        if i % 3 == 0 {
            c.clone()
                .delete(format!("{P}h{}", i % 20), None)
                .await
                .unwrap();
        } else {
            put_host(&c, &format!("late{i}"), None).await;
        }
    }
    let end = current_revision(&c).await;
    let want = etcd_hosts(&c).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while w.view().keys().cloned().collect::<Vec<_>>() != want {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the view kept up without next()"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every change is still delivered, in order, once asked for.
    while last.0 < end {
        apply(&mut view, &mut last, &next(&mut w).await);
    }
    assert_eq!(view.keys().cloned().collect::<Vec<_>>(), want);

    // 3. A call from a thread outside any runtime, waiting when the change
    // comes: the loop's task serves it.
    let (waiting_tx, waiting) = std::sync::mpsc::channel();
    let outside = tokio::task::spawn_blocking(move || {
        // A thread of the blocking pool has the runtime as its context; a
        // thread of its own has none.
        std::thread::spawn(move || {
            let mut w = w;
            let event = block_on_plain_thread(w.next(), waiting_tx);
            (w, event)
        })
        .join()
        .expect("served without a runtime")
    });
    let waiting =
        tokio::task::spawn_blocking(move || waiting.recv_timeout(Duration::from_secs(30)));
    waiting.await.unwrap().expect("the call waits");
    put_host(&c, "from-outside", None).await;
    let (w, event) = outside.await.unwrap();
    assert!(
        matches!(&event, Some(HostEvent::Up { host, .. }) if host == "from-outside"),
        "{event:?}"
    );
    w.close().await;
}

/// A `next()` kept but not polled (held while the consumer awaits
/// something else) does not hold up the default watcher's loop once input
/// comes: its own task runs it, so `status()` follows etcd meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_held_but_not_polled_leaves_the_loop_to_its_task() {
    let (_etcd, c, mut w) = watcher_on_fresh_etcd(1_000, Driving::Adaptive).await;
    assert!(matches!(next(&mut w).await, HostEvent::Synced { .. }));
    let status = w.status();
    let mut held = std::pin::pin!(w.next());
    // Polled once, while nothing is happening: it waits, and is then left
    // unpolled.
    assert!(
        tokio::time::timeout(Duration::from_millis(50), &mut held)
            .await
            .is_err(),
        "nothing to take yet"
    );
    for i in 0..50 {
        put_host(&c, &format!("held{i}"), None).await;
    }
    let end = current_revision(&c).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if matches!(*status.borrow(), ViewStatus::Watching { revision } if revision.0 >= end) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the loop went on while next() was held: {:?}",
            *status.borrow()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The held call then yields the first change.
    let first = tokio::time::timeout(Duration::from_secs(20), &mut held)
        .await
        .expect("an event in time");
    assert!(
        matches!(&first, Some(HostEvent::Up { host, .. }) if host == "held0"),
        "{first:?}"
    );
}

async fn current_revision(c: &Client) -> i64 {
    c.clone()
        .get("x", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision()
}

/// Runs `f` to completion on this thread, parking between polls: no Tokio
/// runtime is current here. Says so on `waiting` the first time `f` waits.
fn block_on_plain_thread<F: std::future::Future>(
    f: F,
    waiting: std::sync::mpsc::Sender<()>,
) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
        let _ = waiting.send(());
        assert!(std::time::Instant::now() < deadline, "served in time");
        std::thread::park_timeout(Duration::from_secs(1));
    }
}
