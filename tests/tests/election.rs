//! Elections, pools and locks against real etcd: the scenarios of issue 7.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use coord::{Election, ElectionPool, Error, Loss, Session, Txn, TxnOp};
use coord_tests::etcd::EtcdCluster;
use coord_tests::queue::{queue, session_opts, SOON};
use coord_tests::{eventually, init_tracing};
use etcd_client::GetOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_candidates_one_leads_the_other_waits_and_resign_hands_over() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let a = Election::new(client.clone(), "/coord/elections/e1", session_opts(5))
        .await
        .unwrap();
    let b = Election::new(client.clone(), "/coord/elections/e1", session_opts(5))
        .await
        .unwrap();
    let leader = a.campaign("a").await.unwrap();
    assert!(leader.is_leader());
    let key_a = leader.key();
    assert_eq!(
        key_a,
        format!(
            "/coord/elections/e1/{:x}",
            a.session().lease_id().unwrap().0
        )
    );
    let waiting = tokio::spawn(async move {
        let l = b.campaign("b").await;
        (b, l)
    });
    // b queues behind a: two keys, a first.
    let q = eventually(SOON, "b queued", || async {
        let q = queue(&client, "/coord/elections/e1/").await;
        (q.len() == 2).then_some(q)
    })
    .await;
    assert_eq!(q[0].key, key_a);
    assert!(!waiting.is_finished(), "b must wait while a leads");
    let current = a.leader().await.unwrap().expect("a leader");
    assert_eq!(current.key.to_string(), key_a);
    assert_eq!(current.value, b"a");
    let fence_a = leader.token();
    leader.resign().await.unwrap();
    let (b, second) = tokio::time::timeout(SOON, waiting).await.unwrap().unwrap();
    let second = second.unwrap();
    assert!(second.token() > fence_a, "fences strictly increase");
    assert_eq!(queue(&client, "/coord/elections/e1/").await.len(), 1);
    second.resign().await.unwrap();
    assert!(queue(&client, "/coord/elections/e1/").await.is_empty());
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_campaign_loses_in_one_round_trip_and_leaves_no_key() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let a = Election::new(client.clone(), "e-try", session_opts(5))
        .await
        .unwrap();
    let b = Election::new(client.clone(), "e-try", session_opts(5))
        .await
        .unwrap();
    let leader = a.try_campaign("a").await.expect("nobody leads yet");
    assert!(matches!(b.try_campaign("b").await, Err(Error::Locked)));
    let q = queue(&client, "e-try/").await;
    assert_eq!(q.len(), 1, "the loser left no key: {q:?}");
    assert_eq!(q[0].key, leader.key());
    // A waiting candidate also makes a try lose, and stays untouched.
    let c = Election::new(client.clone(), "e-try", session_opts(5))
        .await
        .unwrap();
    // The task returns the leadership (dropping it would resign) and the
    // election (dropping it would end the session).
    let waiting = tokio::spawn(async move { c.campaign("c").await.map(|l| (l, c)) });
    eventually(SOON, "c queued", || async {
        (queue(&client, "e-try/").await.len() == 2).then_some(())
    })
    .await;
    leader.resign().await.unwrap();
    let (lead_c, c) = tokio::time::timeout(SOON, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(b.try_campaign("b").await, Err(Error::Locked)),
        "c leads now"
    );
    assert_eq!(
        queue(&client, "e-try/").await[0].create_revision,
        lead_c.token().0
    );
    lead_c.resign().await.unwrap();
    c.close().await.unwrap();
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_campaign_leaves_no_key() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let a = Election::new(client.clone(), "e-cancel", session_opts(5))
        .await
        .unwrap();
    let b = Election::new(client.clone(), "e-cancel", session_opts(5))
        .await
        .unwrap();
    let _leader = a.campaign("a").await.unwrap();
    // A campaign that times out withdraws...
    let r = b.campaign_timeout("b", Duration::from_millis(500)).await;
    assert_eq!(r.err(), Some(Error::Timeout));
    eventually(SOON, "b's key deleted", || async {
        (queue(&client, "e-cancel/").await.len() == 1).then_some(())
    })
    .await;
    // ...and so does a dropped campaign future.
    let campaign = b.campaign("b");
    let _ = tokio::time::timeout(Duration::from_millis(500), campaign).await;
    eventually(SOON, "b's key deleted after drop", || async {
        (queue(&client, "e-cancel/").await.len() == 1).then_some(())
    })
    .await;
    // b can campaign again on the same session afterwards.
    let again = b.campaign_timeout("b", Duration::from_millis(300)).await;
    assert_eq!(again.err(), Some(Error::Timeout));
}

/// The next observation's leader, within `SOON`; revisions only increase.
async fn next(o: &mut coord::Observe, last: &mut coord::Revision) -> Option<coord::Leader> {
    let seen = tokio::time::timeout(SOON, o.next())
        .await
        .expect("an observation")
        .expect("open");
    assert!(seen.revision > *last, "{seen:?} after {last:?}");
    *last = seen.revision;
    seen.leader
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_sees_every_transition_including_no_leader() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let a = Election::new(client.clone(), "e-obs", session_opts(5))
        .await
        .unwrap();
    let b = Election::new(client.clone(), "e-obs", session_opts(5))
        .await
        .unwrap();
    let mut observe = a.observe();
    let last = &mut coord::Revision(0);
    assert_eq!(
        next(&mut observe, last).await,
        None,
        "nobody leads at first"
    );
    let la = a.campaign("a").await.unwrap();
    let seen = next(&mut observe, last).await.expect("a leads");
    assert_eq!(seen.value, b"a");
    assert_eq!(seen.token, la.token());
    la.proclaim("a2").await.unwrap();
    assert_eq!(next(&mut observe, last).await.expect("a").value, b"a2");
    let waiting = tokio::spawn(async move { b.campaign("b").await });
    eventually(SOON, "b queued", || async {
        (queue(&client, "e-obs/").await.len() == 2).then_some(())
    })
    .await;
    la.resign().await.unwrap();
    let lb = tokio::time::timeout(SOON, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let seen = next(&mut observe, last).await.expect("b leads");
    assert_eq!(seen.value, b"b");
    assert_eq!(seen.token, lb.token());
    // Compaction does not end observing.
    etcd.compact().await;
    lb.resign().await.unwrap();
    assert_eq!(next(&mut observe, last).await, None, "nobody leads again");
    observe.close();
    // Observing needs no session: nothing is written.
    let mut standalone = coord::Observe::start(client.clone(), "e-obs").unwrap();
    let seen = tokio::time::timeout(SOON, standalone.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen.leader, None);
    assert!(seen.revision >= *last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_key_is_deleted_or_lease_revoked_learns_it_and_is_fenced() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let e = Election::new(client.clone(), "e-lost", session_opts(5))
        .await
        .unwrap();
    let leader = e.campaign("a").await.unwrap();
    let guarded = |v: &str| Txn {
        compares: vec![],
        success: vec![TxnOp::Put {
            key: coord::Key(b"/resource".to_vec()),
            value: v.as_bytes().to_vec(),
            lease: coord::LeaseId(0),
        }],
        failure: vec![],
    };
    let r = leader.txn(guarded("w1")).await.unwrap();
    assert!(r.succeeded);
    // Someone deletes the leader's key.
    client.clone().delete(leader.key(), None).await.unwrap();
    let lost = tokio::time::timeout(SOON, leader.lost()).await.unwrap();
    assert_eq!(lost, Some(Loss::KeyDeleted));
    assert!(!leader.is_leader());
    assert_eq!(
        leader.txn(guarded("w2")).await.err(),
        Some(Error::NotLeader)
    );
    let value = client.clone().get("/resource", None).await.unwrap();
    assert_eq!(
        value.kvs()[0].value(),
        b"w1",
        "the fenced write never landed"
    );
    drop(leader);
    // A new leadership on the same session has a higher fence; revoking
    // the session's lease from outside ends it too.
    let leader = e.campaign("a").await.unwrap();
    let lease = e.session().lease_id().unwrap();
    client.clone().lease_revoke(lease.0).await.unwrap();
    // The revoke deletes the key at once: the queue watch or the keep-alive
    // tells, whichever is first.
    let lost = tokio::time::timeout(SOON, leader.lost()).await.unwrap();
    assert!(
        matches!(lost, Some(Loss::LeaseLost(_) | Loss::KeyDeleted)),
        "{lost:?}"
    );
    assert!(!leader.is_leader());
    // New campaigns work on the session's new lease.
    let again = e.campaign("a").await.unwrap();
    assert_ne!(again.lease(), lease);
    assert!(again.token() > leader.token());
    again.resign().await.unwrap();
    e.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_and_values_are_refused_before_anything_is_written() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let session = Session::new(client.clone(), session_opts(5)).await.unwrap();
    for name in ["", "e/", "a\u{1}b"] {
        assert!(
            matches!(Election::on(&session, name), Err(Error::InvalidName { .. })),
            "{name:?}"
        );
    }
    let e = Election::on(&session, "e-bad").unwrap();
    let big = vec![b'x'; coord::MAX_METADATA_LEN + 1];
    assert!(matches!(
        e.campaign(big).await,
        Err(Error::ValueTooLarge { .. })
    ));
    assert!(queue(&client, "e-bad/").await.is_empty());
    // One campaign per name per session.
    let _l = e.campaign("x").await.unwrap();
    let twin = Election::on(&session, "e-bad").unwrap();
    assert!(matches!(
        twin.campaign("y").await,
        Err(Error::AlreadyCampaigning { .. })
    ));
    session.close().await.unwrap();
    assert!(queue(&client, "e-bad/").await.is_empty(), "close revoked");
    assert_eq!(
        Election::on(&session, "e-bad")
            .unwrap()
            .campaign("z")
            .await
            .err(),
        Some(Error::Closed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_a_thousand_names_holds_one_lease_and_close_removes_every_key() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let pool = ElectionPool::new(client.clone(), session_opts(10))
        .await
        .unwrap();
    let mut held = Vec::new();
    for i in 0..1000 {
        let e = pool.election(&format!("pool/n{i}")).unwrap();
        held.push(e.campaign("me").await.unwrap());
    }
    let stats = pool.stats();
    assert_eq!((stats.names, stats.leases_held), (1000, 1), "{stats:?}");
    let leases = client.clone().leases().await.unwrap();
    assert_eq!(leases.leases().len(), 1, "one lease for every name");
    let keys = client
        .clone()
        .get(
            "pool/",
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .unwrap();
    assert_eq!(keys.count(), 1000);
    // The pool's lease revoked from outside: every borrowed leadership
    // reports lost; new campaigns work on a new lease.
    let lease = pool.session().lease_id().unwrap();
    client.clone().lease_revoke(lease.0).await.unwrap();
    for l in &held {
        let lost = tokio::time::timeout(SOON, l.lost()).await.unwrap();
        assert!(
            matches!(lost, Some(Loss::LeaseLost(_) | Loss::KeyDeleted)),
            "{lost:?}"
        );
        assert!(!l.is_leader());
    }
    let again = pool
        .election("pool/n0")
        .unwrap()
        .campaign("me")
        .await
        .unwrap();
    assert_ne!(again.lease(), lease);
    assert_eq!(pool.stats().heals, 1);
    drop(held);
    let _kept = again;
    pool.close().await.unwrap();
    let keys = client
        .clone()
        .get(
            "pool/",
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .unwrap();
    assert_eq!(keys.count(), 0, "close removed every key");
    assert!(pool.stats().closed);
    assert_eq!(pool.election("pool/x").err(), Some(Error::Closed));
}
