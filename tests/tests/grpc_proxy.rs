//! `etcd grpc-proxy` is a tested topology: liveness, the host watcher, an
//! election and a lock all work through it, and all come back when the
//! proxy is killed and started again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use coord::{BackoffConfig, Election, HostLiveness, HostMetadata, HostWatcher, Mutex};
use coord_tests::etcd::EtcdCluster;
use coord_tests::grpc_proxy::GrpcProxy;
use coord_tests::{eventually, init_tracing};
use etcd_client::GetOptions;

const P: &str = "/coord/hosts/";
/// Generous for a loaded 2-core machine.
const DEADLINE: Duration = Duration::from_secs(30);

/// Sessions with `ttl_secs` and a short request timeout.
fn session_opts(ttl_secs: u64) -> coord::SessionOptions {
    coord::SessionOptions::default()
        .with_ttl(Duration::from_secs(ttl_secs))
        .with_request_timeout(Duration::from_secs(3))
        .with_backoff(BackoffConfig::default().with_cap(Duration::from_secs(2)))
        .with_seed(11)
}

/// The hosts etcd holds now, with their leases, read directly.
async fn hosts(etcd: &EtcdCluster) -> Vec<(String, i64)> {
    let resp = etcd
        .client()
        .await
        .get(P, Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    resp.kvs()
        .iter()
        .map(|kv| (kv.key_str().unwrap()[P.len()..].to_string(), kv.lease()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_works_through_a_grpc_proxy_and_comes_back_after_it_restarts() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let mut proxy = GrpcProxy::start(&etcd.endpoints()).await;
    let via = coord::connect(&[proxy.endpoint()], coord::ConnectOptions::default())
        .await
        .unwrap();
    via.check(DEADLINE).await.unwrap();

    // Liveness and the watcher.
    let host = HostLiveness::register(
        via.clone(),
        HostMetadata::new("h1", "node-1"),
        coord_tests::options::liveness(Duration::from_secs(3)),
    )
    .await
    .unwrap();
    let watcher: HostWatcher = HostWatcher::new(via.clone(), coord_tests::options::watcher())
        .await
        .unwrap();
    let lease = host.lease_id().unwrap();
    assert_eq!(hosts(&etcd).await, vec![("h1".to_string(), lease.0)]);
    eventually(DEADLINE, "the watcher sees h1", || async {
        watcher.view().contains_key("h1").then_some(())
    })
    .await;

    // An election: one leader, the other waits; a lock taken and given.
    let a = Election::new(via.clone(), "jobs", session_opts(5))
        .await
        .unwrap();
    let b = Election::new(via.clone(), "jobs", session_opts(5))
        .await
        .unwrap();
    let leader = a.campaign("a").await.unwrap();
    let waiting = tokio::spawn(async move {
        let l = b.campaign("b").await;
        (b, l)
    });
    let mutex = Mutex::new(via.clone(), "backup", session_opts(5))
        .await
        .unwrap();
    let guard = mutex.lock().await.unwrap();
    let first_token = guard.token();
    guard.unlock().await.unwrap();

    // The proxy is killed and, three seconds later, started again.
    proxy.kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.restart().await;

    // The host is registered again (its lease resumed, or a new one), and
    // the watcher's view is etcd's truth.
    let back = eventually(DEADLINE, "h1 registered again", || async {
        let now = hosts(&etcd).await;
        let lease = host.lease_id()?;
        (now == vec![("h1".to_string(), lease.0)]).then_some(lease)
    })
    .await;
    eventually(
        DEADLINE,
        "the watcher's view back on etcd's truth",
        || async {
            watcher
                .view()
                .get("h1")
                .is_some_and(|r| r.lease == back)
                .then_some(())
        },
    )
    .await;
    // One leader throughout: `a` leads (its lease outlived a 3 s outage
    // of a 5 s TTL) or lost and `b` took over; never both.
    let read = a.leader().await.unwrap().map(|l| l.value);
    match leader.probe().has_ended() {
        false => assert_eq!(read, Some(b"a".to_vec())),
        true => assert_eq!(read, Some(b"b".to_vec())),
    }
    leader.resign().await.ok();
    let (b, led) = tokio::time::timeout(DEADLINE, waiting)
        .await
        .unwrap()
        .unwrap();
    let led = led.unwrap();
    assert_eq!(
        b.leader().await.unwrap().map(|l| l.value),
        Some(b"b".to_vec())
    );
    led.resign().await.unwrap();
    // The lock is taken again, with a greater token.
    let guard = tokio::time::timeout(DEADLINE, mutex.lock())
        .await
        .unwrap()
        .unwrap();
    assert!(guard.token() > first_token);
    guard.unlock().await.unwrap();

    host.stop().await.unwrap();
    eventually(DEADLINE, "h1 gone after stop", || async {
        hosts(&etcd).await.is_empty().then_some(())
    })
    .await;
    watcher.close().await;
    a.close().await.unwrap();
    b.close().await.unwrap();
    mutex.close().await.unwrap();
}

/// Behind a grpc-proxy, a keep-alive's reply waits for the proxy's own
/// renewal of the lease, every third of the TTL (2 s here, checked every
/// 500 ms). Sent every 1.5 s, out of step with those renewals, many
/// replies come later than a 1 s request timeout. They are still replies,
/// not silence: over six keep-alive rounds the stream is never taken as
/// broken, and the lease is the first one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxys_late_keep_alive_replies_do_not_count_as_silence() {
    use coord::LivenessEvent;
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let proxy = GrpcProxy::start(&etcd.endpoints()).await;
    let via = coord::connect(&[proxy.endpoint()], coord::ConnectOptions::default())
        .await
        .unwrap();
    let opts = coord::LivenessOptions::default()
        .with_ttl(Duration::from_secs(6))
        .with_refresh(Duration::from_millis(1500))
        .with_request_timeout(Duration::from_secs(1))
        .with_seed(3);
    let host = HostLiveness::register(via, HostMetadata::new("h1", "node-1"), opts)
        .await
        .unwrap();
    let lease = host.lease_id().unwrap();
    let mut events = host.subscribe();
    // Six keep-alive rounds: what is checked is that nothing happens in
    // them.
    tokio::time::sleep(Duration::from_secs(10)).await;
    while let Ok(e) = events.try_recv() {
        assert!(
            !matches!(
                e,
                LivenessEvent::KeepAliveInterrupted { .. } | LivenessEvent::Lost { .. }
            ),
            "{e:?}"
        );
    }
    assert_eq!(host.lease_id(), Some(lease));
    assert_eq!(hosts(&etcd).await, vec![("h1".to_string(), lease.0)]);
    host.stop().await.unwrap();
}
