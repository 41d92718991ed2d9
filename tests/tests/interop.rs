//! coord's elections and locks with etcd's own Go `concurrency` package
//! (`etcdctl elect`, `etcdctl lock`) as peers, both directions and both
//! orders, killing either side with -9; failover of a coord leader killed
//! with -9; and an etcd leader killed under a coord leader.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use coord::{Election, Mutex};
use coord_tests::etcd::EtcdCluster;
use coord_tests::etcdctl::Peer;
use coord_tests::init_tracing;
use coord_tests::queue::{queue, queued, session_opts, SOON};
use tokio::io::{AsyncBufReadExt, BufReader};

/// A coord candidate in a process of its own (so it can be killed -9).
struct Agent {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Agent {
    fn start(args: &[&str]) -> Agent {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_coord-agent"))
            .args(args)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn coord-agent");
        let out = child.stdout.take().expect("stdout");
        Agent {
            child,
            lines: BufReader::new(out).lines(),
        }
    }

    /// The agent's `elected|locked <key> <fence>` line.
    async fn held(&mut self) -> (String, i64) {
        let line = tokio::time::timeout(SOON, self.lines.next_line())
            .await
            .expect("agent holds in time")
            .expect("read")
            .expect("a line");
        let parts: Vec<&str> = line.split_whitespace().collect();
        assert!(
            parts.len() == 3 && (parts[0] == "elected" || parts[0] == "locked"),
            "{line}"
        );
        (parts[1].to_string(), parts[2].parse().expect("fence"))
    }

    async fn kill9(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_elect_queues_behind_coord_and_coord_behind_etcdctl() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let endpoints = etcd.endpoints();
    let e = Election::new(client.clone(), "shared-e", session_opts(5))
        .await
        .unwrap();

    // coord first, etcdctl waits behind it.
    let leader = e.campaign("coord").await.unwrap();
    let mut go = Peer::elect(&endpoints, "shared-e", "go");
    let q = queued(&client, "shared-e/", 2).await;
    assert_eq!(q[0].key, leader.key());
    assert_eq!(go.printed(), None, "etcdctl must not lead while coord does");
    assert!(leader.is_leader());
    leader.resign().await.unwrap();
    let go_key = go.line(SOON).await;
    assert_eq!(go.line(SOON).await, "go");
    assert_eq!(queue(&client, "shared-e/").await[0].key, go_key);
    let seen = e.leader().await.unwrap().expect("etcdctl leads");
    assert_eq!(
        (seen.key.to_string(), seen.value),
        (go_key.clone(), b"go".to_vec())
    );

    // etcdctl first, coord waits behind it.
    let waiting = {
        let e = Election::new(client.clone(), "shared-e", session_opts(5))
            .await
            .unwrap();
        tokio::spawn(async move {
            let l = e.campaign("coord-2").await;
            (e, l)
        })
    };
    queued(&client, "shared-e/", 2).await;
    assert!(
        !waiting.is_finished(),
        "coord must wait while etcdctl leads"
    );
    go.interrupt().await;
    let (e2, second) = tokio::time::timeout(SOON, waiting).await.unwrap().unwrap();
    let second = second.unwrap();
    assert!(second.is_leader());
    let go_rev = queue(&client, "shared-e/").await[0].create_revision;
    assert_eq!(second.token().0, go_rev);
    second.resign().await.unwrap();
    e.close().await.unwrap();
    e2.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coord_leader_killed_with_minus_9_hands_over_to_etcdctl_and_to_coord() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let endpoints = etcd.endpoints();
    let ep = endpoints[0].clone();

    // A coord leader in its own process, etcdctl elect waiting: kill -9.
    let mut agent = Agent::start(&["elect", &ep, "kill-e", "agent", "2"]);
    let (agent_key, agent_fence) = agent.held().await;
    let mut go = Peer::elect(&endpoints, "kill-e", "go");
    queued(&client, "kill-e/", 2).await;
    assert_eq!(go.printed(), None);
    agent.kill9().await;
    // Handed over within the TTL (2 s, maybe 3 s: etcd's minimum) plus
    // expiry and election slack; the bound is generous for a loaded CI.
    let go_key = go.line(SOON).await;
    assert_ne!(go_key, agent_key);
    go.interrupt().await;

    // The same with a coord successor: its fence is above the dead one's.
    let mut agent = Agent::start(&["elect", &ep, "kill-e", "agent", "2"]);
    let (_, dead_fence) = agent.held().await;
    assert!(dead_fence > agent_fence);
    let e = Election::new(client.clone(), "kill-e", session_opts(5))
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        let l = e.campaign("coord").await;
        (e, l)
    });
    queued(&client, "kill-e/", 2).await;
    agent.kill9().await;
    let (e, leader) = tokio::time::timeout(SOON, waiting).await.unwrap().unwrap();
    let leader = leader.unwrap();
    assert!(leader.token().0 > dead_fence);
    leader.resign().await.unwrap();
    e.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_lock_and_coord_mutex_exclude_each_other_in_both_orders() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let endpoints = etcd.endpoints();
    let ep = endpoints[0].clone();
    let m = Mutex::new(client.clone(), "shared-l", session_opts(5))
        .await
        .unwrap();

    // coord holds, etcdctl waits; unlock hands over.
    let guard = m.lock().await.unwrap();
    let mut go = Peer::lock(&endpoints, "shared-l", 2);
    queued(&client, "shared-l/", 2).await;
    assert_eq!(go.printed(), None, "etcdctl must not hold while coord does");
    assert!(matches!(
        m.try_lock().await,
        Err(coord::Error::Locked | coord::Error::AlreadyCampaigning { .. })
    ));
    let coord_fence = guard.token();
    guard.unlock().await.unwrap();
    let go_key = go.line(SOON).await;
    let q = queue(&client, "shared-l/").await;
    assert_eq!(q[0].key, go_key);
    assert!(
        q[0].create_revision > coord_fence.0,
        "create revisions order the holders"
    );

    // etcdctl holds, coord waits; etcdctl is killed -9: coord gets the
    // lock once its lease (TTL 2) expires.
    let waiting = {
        let m = Mutex::new(client.clone(), "shared-l", session_opts(5))
            .await
            .unwrap();
        tokio::spawn(async move {
            let g = m.lock().await;
            (m, g)
        })
    };
    queued(&client, "shared-l/", 2).await;
    assert!(
        !waiting.is_finished(),
        "coord must wait while etcdctl holds"
    );
    assert!(matches!(m.try_lock().await, Err(coord::Error::Locked)));
    go.kill9().await;
    let (m2, guard) = tokio::time::timeout(SOON, waiting).await.unwrap().unwrap();
    let guard = guard.unwrap();
    assert!(guard.token().0 > q[0].create_revision);
    guard.unlock().await.unwrap();

    // A coord holder in its own process killed -9: etcdctl gets the lock.
    let mut agent = Agent::start(&["lock", &ep, "shared-l", "2"]);
    let (agent_key, _) = agent.held().await;
    let mut go = Peer::lock(&endpoints, "shared-l", 2);
    queued(&client, "shared-l/", 2).await;
    assert_eq!(go.printed(), None);
    agent.kill9().await;
    let go_key = go.line(SOON).await;
    assert_ne!(go_key, agent_key);
    go.interrupt().await;
    m.close().await.unwrap();
    m2.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_leader_killed_under_a_coord_leader_never_makes_two_leaders() {
    init_tracing();
    let mut etcd = EtcdCluster::three().await;
    let client = etcd.client().await;
    // Each on a client as `coord::connect` opens it: one member at a time,
    // moving on when that member goes silent (here: is killed).
    let a = Election::new(etcd.coord_client().await, "three-e", session_opts(5))
        .await
        .unwrap();
    let b = Election::new(etcd.coord_client().await, "three-e", session_opts(5))
        .await
        .unwrap();
    let leader = a.campaign("a").await.unwrap();
    let key_a = leader.key();
    let waiting = tokio::spawn(async move {
        let l = b.campaign("b").await;
        (b, l)
    });
    queued(&client, "three-e/", 2).await;
    let etcd_leader = etcd.leader().await.expect("an etcd leader");
    etcd.kill(etcd_leader);
    etcd.wait_leader_other_than(Some(etcd_leader), Duration::from_secs(20))
        .await;
    // The test's own reads go to the members still up (a plain
    // etcd-client may send its next request to the killed one).
    let client = etcd.client_to(&etcd.endpoints_except(etcd_leader)).await;
    // For the next 10 s: never both leading while both keys exist.
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < end {
        if waiting.is_finished() {
            // b leads: a must already know it lost, and its key is gone.
            assert!(!leader.is_leader(), "two leaders");
            let q = queue(&client, "three-e/").await;
            assert!(
                q.iter().all(|e| e.key != key_a),
                "a's key outlived b's election"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if waiting.is_finished() {
        let lost = tokio::time::timeout(SOON, leader.lost()).await.unwrap();
        assert!(lost.is_some(), "a was told");
        let (b, l) = waiting.await.unwrap();
        l.unwrap().resign().await.unwrap();
        b.close().await.unwrap();
    } else {
        // Leadership kept through the etcd leader change: still leading,
        // b still queued behind.
        assert!(leader.is_leader());
        assert_eq!(queue(&client, "three-e/").await[0].key, key_a);
        leader.resign().await.unwrap();
        let (b, l) = tokio::time::timeout(SOON, waiting).await.unwrap().unwrap();
        l.unwrap().resign().await.unwrap();
        b.close().await.unwrap();
    }
    a.close().await.unwrap();
}
