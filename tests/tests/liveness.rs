//! Host liveness against real etcd: the scenarios of the liveness issue.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use coord::{
    BackoffConfig, Error, HostIdError, HostLiveness, HostMetadata, LeaseId, LivenessEvent,
    LivenessOptions, LivenessStatus, LostReason, RevokeOutcome,
};
use coord_core::liveness::ConfigError;
use coord_tests::etcd::{free_ports, EtcdCluster};
use coord_tests::proxy::{Mode, Proxy};
use coord_tests::{eventually, init_tracing};
use etcd_client::{Client, GetOptions};

/// Options for tests: short TTL, 1 s request deadline, backoff capped at
/// 2 s so heal bounds are short, fixed seed.
fn opts(ttl_secs: u64) -> LivenessOptions {
    LivenessOptions::default()
        .with_ttl(Duration::from_secs(ttl_secs))
        .with_request_timeout(Duration::from_secs(1))
        .with_backoff(BackoffConfig::default().with_cap(Duration::from_secs(2)))
        .with_seed(7)
}

fn meta(id: &str) -> HostMetadata {
    HostMetadata {
        host_uuid: id.to_string(),
        hostname: format!("{id}.example"),
        hypervisor: "kvm".to_string(),
        version: String::new(),
        started_at_unix_ns: 1_700_000_000_000_000_000,
        extra: serde_json::Map::new(),
    }
}

/// The key's value, lease and create revision, if it exists.
async fn get(client: &Client, key: &str) -> Option<(Vec<u8>, i64, i64)> {
    let resp = client.clone().get(key, None).await.expect("get");
    resp.kvs()
        .first()
        .map(|kv| (kv.value().to_vec(), kv.lease(), kv.create_revision()))
}

async fn wait_registered(host: &HostLiveness, deadline: Duration, not: Option<LeaseId>) -> LeaseId {
    let mut state = host.state();
    let status = tokio::time::timeout(
        deadline,
        state
            .wait_for(|s| matches!(s, LivenessStatus::Registered { lease } if Some(*lease) != not)),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "not registered within {deadline:?}: {:?}",
            *host.state().borrow()
        )
    })
    .expect("task alive")
    .clone();
    match status {
        LivenessStatus::Registered { lease } => lease,
        other => panic!("{other:?}"),
    }
}

const GO_COORD_JSON: &str = r#"{"host_uuid":"h-1","hostname":"h-1.example","hypervisor":"kvm","started_at_unix_ns":1700000000000000000}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_writes_the_exact_json_under_a_lease_with_the_granted_ttl() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let host = HostLiveness::register(client.clone(), meta("h-1"), opts(10))
        .await
        .expect("register");
    assert_eq!(host.key(), "/coord/hosts/h-1");
    let (value, lease, _) = get(&client, "/coord/hosts/h-1").await.expect("key");
    assert_eq!(String::from_utf8(value).unwrap(), GO_COORD_JSON);
    assert_eq!(host.lease_id(), Some(LeaseId(lease)));
    let ttl = client
        .clone()
        .lease_time_to_live(lease, None)
        .await
        .expect("ttl");
    assert_eq!(ttl.granted_ttl(), 10);
    assert!(ttl.ttl() > 0 && ttl.ttl() <= 10, "remaining {}", ttl.ttl());
    host.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_removes_the_key_at_once_and_is_idempotent() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let host = HostLiveness::register(client.clone(), meta("h-stop"), opts(10))
        .await
        .expect("register");
    let lease = host.lease_id().expect("lease");
    host.stop().await.expect("stop");
    // stop returns once etcd confirmed the revoke: the key is already gone.
    assert_eq!(get(&client, "/coord/hosts/h-stop").await, None);
    let ttl = client
        .clone()
        .lease_time_to_live(lease.0, None)
        .await
        .expect("ttl");
    assert_eq!(ttl.ttl(), -1, "lease revoked");
    assert_eq!(host.lease_id(), None);
    assert_eq!(
        *host.state().borrow(),
        LivenessStatus::Closed {
            revoke: RevokeOutcome::Revoked(lease)
        }
    );
    host.stop().await.expect("second stop");
    assert_eq!(get(&client, "/coord/hosts/h-stop").await, None);
}

/// After an ungraceful end at `t0`, the key must survive every read that
/// completes before TTL - refresh, and be gone within TTL plus slack.
async fn assert_expires_after_about_one_ttl(
    client: &Client,
    key: &str,
    t0: Instant,
    ttl: Duration,
) {
    let refresh = ttl / 3;
    let mut reads_in_window = 0;
    loop {
        let present = get(client, key).await.is_some();
        let at = t0.elapsed();
        if at < ttl - refresh {
            assert!(present, "key gone after {at:?}, before TTL - refresh");
            reads_in_window += 1;
        }
        if !present {
            assert!(reads_in_window > 0, "no read landed before TTL - refresh");
            return;
        }
        assert!(
            at < ttl + Duration::from_secs(4),
            "key still there {at:?} after the end"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_without_stop_leaves_the_lease_to_expire() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let host = HostLiveness::register(client.clone(), meta("h-drop"), opts(3))
        .await
        .expect("register");
    let t0 = Instant::now();
    drop(host);
    assert_expires_after_about_one_ttl(&client, "/coord/hosts/h-drop", t0, Duration::from_secs(3))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_agent_process_disappears_after_about_one_ttl() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let mut agent = std::process::Command::new(env!("CARGO_BIN_EXE_coord-agent"))
        .args([etcd.endpoints()[0].as_str(), "h-agent", "3"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn agent");
    let stdout = agent.stdout.take().expect("stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).map(|_| line)
    })
    .await
    .expect("join")
    .expect("read agent output");
    assert!(line.starts_with("registered "), "agent said {line:?}");
    let (_, lease, _) = get(&client, "/coord/hosts/h-agent").await.expect("key");
    assert_eq!(line.trim(), format!("registered {lease:x}"));
    agent.kill().expect("kill -9 agent");
    let t0 = Instant::now();
    agent.wait().expect("reap agent");
    assert_expires_after_about_one_ttl(&client, "/coord/hosts/h-agent", t0, Duration::from_secs(3))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_revoked_from_outside_heals_under_a_new_lease() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let host = HostLiveness::register(client.clone(), meta("h-rev"), opts(10))
        .await
        .expect("register");
    let mut events = host.subscribe();
    let old = host.lease_id().expect("lease");
    client.clone().lease_revoke(old.0).await.expect("revoke");
    // The TTL-0 reply comes at the next keep-alive (refresh 3.3 s); then
    // the first retry is within the 100 ms initial backoff.
    let new = wait_registered(&host, Duration::from_secs(10), Some(old)).await;
    assert_ne!(new, old);
    assert_eq!(host.lease_id(), Some(new));
    let (value, lease, _) = get(&client, "/coord/hosts/h-rev").await.expect("key back");
    assert_eq!(LeaseId(lease), new);
    assert_eq!(value, serde_json::to_vec(&meta("h-rev")).unwrap());
    let mut saw_lost = false;
    while let Ok(e) = events.try_recv() {
        if let LivenessEvent::Lost { lease, reason } = e {
            assert_eq!(lease, old);
            assert_eq!(reason, LostReason::LeaseExpired);
            saw_lost = true;
        }
    }
    assert!(saw_lost, "a Lost event was reported");
    host.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_down_for_five_seconds_host_is_back_soon_after_restart() {
    init_tracing();
    let mut etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let host = HostLiveness::register(client.clone(), meta("h-restart"), opts(10))
        .await
        .expect("register");
    etcd.kill(0);
    tokio::time::sleep(Duration::from_secs(5)).await;
    etcd.restart(0).await;
    // While etcd refused connections every failure was fast, so retries
    // came at most 1 s apart: the host is back within that plus a few
    // round trips (generous for a loaded machine).
    let lease = wait_registered(&host, Duration::from_secs(6), None).await;
    let key = eventually(Duration::from_secs(6), "host key back", || async {
        get(&client, "/coord/hosts/h-restart").await
    })
    .await;
    assert_eq!(LeaseId(key.1), lease, "lease_id names the key's lease");
    host.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_leader_killed_the_host_key_never_disappears() {
    init_tracing();
    let mut etcd = EtcdCluster::three().await;
    let client = etcd.client().await;
    let host = HostLiveness::register(client.clone(), meta("h-fail"), opts(5))
        .await
        .expect("register");
    let lease = host.lease_id().expect("lease");
    let (_, _, created) = get(&client, "/coord/hosts/h-fail").await.expect("key");
    let leader = etcd
        .wait_leader_other_than(None, Duration::from_secs(10))
        .await;
    etcd.kill(leader);
    etcd.wait_leader_other_than(Some(leader), Duration::from_secs(15))
        .await;
    // Two TTLs after the failover: the key was never deleted (same create
    // revision) and is still attached to the same, resumed lease.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let survivors = etcd.client_to(&etcd.endpoints_except(leader)).await;
    let (_, key_lease, created_after) = get(&survivors, "/coord/hosts/h-fail")
        .await
        .expect("key still there");
    assert_eq!(created_after, created, "the key was deleted and re-created");
    assert_eq!(LeaseId(key_lease), lease);
    assert_eq!(
        wait_registered(&host, Duration::from_secs(5), None).await,
        lease
    );
    host.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackholed_client_notices_within_the_ttl_and_heals_when_restored() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let direct = etcd.client().await;
    let proxy = Proxy::start(&etcd.endpoints()[0]).await;
    let via_proxy = coord::connect(&[proxy.endpoint()], coord::ConnectOptions::default())
        .await
        .expect("connect");
    let ttl = Duration::from_secs(3);
    let host = HostLiveness::register(via_proxy, meta("h-hole"), opts(3))
        .await
        .expect("register");
    let old = host.lease_id().expect("lease");
    let mut events = host.subscribe();
    proxy.set(Mode::Blackhole);
    let t0 = Instant::now();
    let mut state = host.state();
    tokio::time::timeout(
        ttl + Duration::from_secs(3),
        state.wait_for(|s| !matches!(s, LivenessStatus::Registered { .. })),
    )
    .await
    .expect("the loss is noticed")
    .expect("task alive");
    let noticed = t0.elapsed();
    // The lease deadline counts from the last acknowledged send, which is
    // before t0: the loss is declared by t0 + TTL (plus scheduling slack).
    assert!(
        noticed <= ttl + Duration::from_millis(1500),
        "noticed after {noticed:?}"
    );
    // etcd drops the lease too: the key goes.
    eventually(Duration::from_secs(6), "key expired in etcd", || async {
        get(&direct, "/coord/hosts/h-hole")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    proxy.set(Mode::Pass);
    // Timeouts back off to the 2 s cap: back within cap + round trips.
    let new = wait_registered(&host, Duration::from_secs(8), None).await;
    assert_ne!(new, old, "the expired lease was replaced");
    let (_, lease, _) = get(&direct, "/coord/hosts/h-hole").await.expect("key back");
    assert_eq!(LeaseId(lease), new);
    let mut lost = None;
    while let Ok(e) = events.try_recv() {
        if let LivenessEvent::Lost { reason, .. } = e {
            lost = Some(reason);
        }
    }
    assert!(lost.is_some(), "Lost was reported");
    host.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_member_stalled_longer_than_the_ttl_is_not_a_lost_registration() {
    init_tracing();
    let etcd = EtcdCluster::three().await;
    // Eight hosts, each with its own client listing all three members, so
    // that (with probability 1 - (2/3)^8) some keep-alive streams sit on
    // the member that stalls.
    let mut hosts = Vec::new();
    for i in 0..8 {
        // As `coord::connect` opens it: re-dialled when etcd goes silent,
        // so a stalled member is left without fast HTTP/2 pings.
        let client = etcd.coord_client().await;
        // TTL 5: the move to another member (a keep-alive unanswered for
        // the 1 s request timeout, a re-dial, a reopen) has over 2 s to
        // spare before the deadline, even on a loaded machine.
        let host = HostLiveness::register(client, meta(&format!("h-stall-{i}")), opts(5))
            .await
            .expect("register");
        let lease = host.lease_id().expect("lease");
        let events = host.subscribe();
        hosts.push((host, lease, events));
    }
    let leader = etcd
        .wait_leader_other_than(None, Duration::from_secs(10))
        .await;
    let follower = (leader + 1) % 3;
    etcd.pause(follower);
    // Longer than the TTL: a host left on the stalled member would lose.
    tokio::time::sleep(Duration::from_secs(8)).await;
    etcd.resume(follower);
    let survivors = etcd.client_to(&etcd.endpoints_except(follower)).await;
    for (i, (host, lease, events)) in hosts.iter_mut().enumerate() {
        let key = format!("/coord/hosts/h-stall-{i}");
        let (_, key_lease, _) = get(&survivors, &key).await.expect("key");
        assert_eq!(LeaseId(key_lease), *lease, "{key}");
        assert_eq!(host.lease_id(), Some(*lease), "{key}");
        while let Ok(e) = events.try_recv() {
            assert!(
                !matches!(e, LivenessEvent::Lost { .. }),
                "one stalled member caused {e:?} for {key}"
            );
        }
    }
    for (host, _, _) in &hosts {
        host.stop().await.expect("stop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_input_is_a_typed_error_and_writes_nothing() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let bad_ids: [(&str, HostIdError); 7] = [
        ("", HostIdError::Empty),
        ("/", HostIdError::Slash),
        ("../../x", HostIdError::Slash),
        ("..", HostIdError::DotSegment),
        ("a b", HostIdError::BadCharacter { at: 1 }),
        ("x\u{0}", HostIdError::BadCharacter { at: 1 }),
        ("tab\there", HostIdError::BadCharacter { at: 3 }),
    ];
    for (id, want) in bad_ids {
        let err = HostLiveness::register(client.clone(), meta(id), opts(10))
            .await
            .expect_err(id);
        assert_eq!(err, Error::InvalidHostId(want), "{id:?}");
    }
    let long = "h".repeat(254);
    assert_eq!(
        HostLiveness::register(client.clone(), meta(&long), opts(10))
            .await
            .expect_err("long"),
        Error::InvalidHostId(HostIdError::TooLong { len: 254 })
    );
    let with = |f: fn(&mut LivenessOptions)| {
        let mut o = opts(10);
        f(&mut o);
        o
    };
    type Expect = fn(&Error) -> bool;
    let cases: Vec<(LivenessOptions, Expect)> = vec![
        (with(|o| o.ttl = Duration::from_millis(500)), |e| {
            matches!(e, Error::InvalidOptions(ConfigError::TtlOutOfRange(_)))
        }),
        (with(|o| o.ttl = Duration::from_secs(2 * 86_400)), |e| {
            matches!(e, Error::InvalidOptions(ConfigError::TtlOutOfRange(_)))
        }),
        (with(|o| o.refresh = Some(Duration::from_secs(10))), |e| {
            matches!(
                e,
                Error::InvalidOptions(ConfigError::RefreshOutOfRange { .. })
            )
        }),
        (with(|o| o.refresh = Some(Duration::ZERO)), |e| {
            matches!(
                e,
                Error::InvalidOptions(ConfigError::RefreshOutOfRange { .. })
            )
        }),
        (with(|o| o.prefix = String::new()), |e| {
            matches!(e, Error::InvalidPrefix(_))
        }),
    ];
    for (o, is_expected) in cases {
        let err = HostLiveness::register(client.clone(), meta("ok"), o.clone())
            .await
            .expect_err("bad options");
        assert!(is_expected(&err), "{o:?} gave {err:?}");
    }
    let mut big = meta("big");
    big.extra.insert(
        "blob".into(),
        serde_json::Value::String("x".repeat(coord::MAX_METADATA_LEN)),
    );
    assert!(matches!(
        HostLiveness::register(client.clone(), big, opts(10)).await,
        Err(Error::MetadataTooLarge { .. })
    ));
    // Nothing was written and no lease was granted.
    let all = client
        .clone()
        .get("", Some(GetOptions::new().with_all_keys()))
        .await
        .expect("get all");
    assert_eq!(all.kvs().len(), 0);
    let leases = client.clone().leases().await.expect("leases");
    assert_eq!(leases.leases().len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_etcd_fails_fast_with_a_typed_error() {
    init_tracing();
    let port = free_ports(1)[0];
    let client = coord::connect(
        &[format!("http://127.0.0.1:{port}")],
        coord::ConnectOptions::default(),
    )
    .await
    .expect("connect is lazy");
    let err = HostLiveness::register(client, meta("h-x"), opts(10))
        .await
        .expect_err("nobody listens");
    assert!(matches!(err, Error::Unreachable(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_coord_record_decodes_and_reencodes_to_the_same_json() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let record = r#"{"host_uuid":"0f6c","hostname":"n-9","hypervisor":"xen","version":"2.1.0","started_at_unix_ns":1732867200123456789,"zone":"eu-1"}"#;
    client
        .clone()
        .put("/coord/hosts/0f6c", record, None)
        .await
        .expect("put by hand");
    let (value, _, _) = get(&client, "/coord/hosts/0f6c").await.expect("key");
    let decoded: HostMetadata = serde_json::from_slice(&value).expect("decode");
    assert_eq!(decoded.version, "2.1.0");
    assert_eq!(decoded.extra.get("zone"), Some(&serde_json::json!("eu-1")));
    assert_eq!(serde_json::to_string(&decoded).unwrap(), record);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_of_the_users_own_type_is_supported() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let custom = serde_json::json!({"role": "gpu-worker", "slots": 8});
    let host = HostLiveness::register_with(client.clone(), "w-1", &custom, opts(10))
        .await
        .expect("register");
    let (value, _, _) = get(&client, "/coord/hosts/w-1").await.expect("key");
    assert_eq!(value, br#"{"role":"gpu-worker","slots":8}"#);
    host.stop().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_leader_moved_the_host_stays_registered_without_a_loss() {
    init_tracing();
    let etcd = EtcdCluster::three().await;
    let client = etcd.client().await;
    let host = HostLiveness::register(client.clone(), meta("h-move"), opts(3))
        .await
        .expect("register");
    let lease = host.lease_id().expect("lease");
    let (_, _, created) = get(&client, "/coord/hosts/h-move").await.expect("key");
    let mut events = host.subscribe();
    let leader = etcd
        .wait_leader_other_than(None, Duration::from_secs(10))
        .await;
    let target = (leader + 1) % 3;
    etcd.move_leader(target).await;
    let now_leader = etcd
        .wait_leader_other_than(Some(leader), Duration::from_secs(10))
        .await;
    assert_eq!(now_leader, target, "leadership moved where asked");
    // Two TTLs after the move.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (_, key_lease, created_after) = get(&client, "/coord/hosts/h-move").await.expect("key");
    assert_eq!(created_after, created, "the key was never re-created");
    assert_eq!(LeaseId(key_lease), lease);
    assert_eq!(host.lease_id(), Some(lease));
    while let Ok(e) = events.try_recv() {
        assert!(!matches!(e, LivenessEvent::Lost { .. }), "{e:?}");
    }
    host.stop().await.expect("stop");
}

/// The census's two reads on real etcd: one key returned, and etcd's
/// count of every key under the prefix, then of those after a host's key
/// (a fleet slot is the rank these give).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_census_read_counts_the_fleet_and_the_hosts_after_a_key() {
    use coord::EtcdApi;
    use coord_core::io::{Consistency, Get, RangeRequest};
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let mut raw = etcd.client().await;
    for h in ["a", "b", "c", "d"] {
        raw.put(format!("/census/{h}"), "{}", None).await.unwrap();
    }
    raw.put("/censusx", "outside", None).await.unwrap();
    let client = etcd.coord_client().await;
    let count = |after: Option<&str>| RangeRequest {
        get: Get {
            limit: 1,
            ..Get::prefix(coord::Key(b"/census/".to_vec()))
        },
        consistency: Consistency::Serializable,
        after: after.map(|k| coord::Key(k.as_bytes().to_vec())),
        revision: coord::Revision(0),
    };
    let all = client.range(count(None)).await.unwrap();
    assert_eq!(all.count, 4);
    assert_eq!(all.kvs.len(), 1, "one key read, not the fleet");
    assert!(all.more);
    let after_b = client.range(count(Some("/census/b"))).await.unwrap();
    assert_eq!(after_b.count, 2, "c and d: b ranks 1 of 4");
    let after_d = client.range(count(Some("/census/d"))).await.unwrap();
    assert_eq!(after_d.count, 0);
    assert!(after_d.kvs.is_empty());
}

/// A probe is paced by how it failed: a refused connection (nothing
/// listens at etcd's address) or one reset by a proxy whose etcd is down
/// is told apart from an etcd that takes the connection and does not
/// answer, and from one that answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_etcd_refuses_and_a_stopped_one_does_not() {
    use coord::{EtcdApi, EtcdError};
    use coord_core::io::{Consistency, Get, RangeRequest};
    init_tracing();
    let mut etcd = EtcdCluster::single().await;
    let client = etcd.coord_client().await;
    let probe = || RangeRequest {
        get: Get {
            limit: 1,
            ..Get::key(coord::Key(coord_core::probe::PROBE_KEY.to_vec()))
        },
        consistency: Consistency::Serializable,
        after: None,
        revision: coord::Revision(0),
    };
    let bounded = |client: coord::Client| async move {
        tokio::time::timeout(Duration::from_secs(3), client.range(probe())).await
    };
    // Through a TCP proxy, which takes the connection and resets it when
    // etcd is down.
    let proxy = Proxy::start(&etcd.endpoints()[0]).await;
    let proxied = coord::connect(&[proxy.endpoint()], coord::ConnectOptions::default())
        .await
        .unwrap();
    assert!(matches!(bounded(client.clone()).await, Ok(Ok(_))));
    assert!(matches!(bounded(proxied.clone()).await, Ok(Ok(_))));
    etcd.kill(0);
    // A request may still be queued on the connection the kill closed
    // (canceled unsent: a reset); once the client connects anew, refused.
    eventually(Duration::from_secs(10), "a refused connection", || async {
        match bounded(client.clone()).await {
            Ok(Err(EtcdError::Refused(_))) => Some(()),
            Ok(Err(EtcdError::Reset(_))) => None,
            other => panic!("a killed etcd's address refuses: {other:?}"),
        }
    })
    .await;
    // The proxy's close reaches the client as a reset, a broken pipe or a
    // request canceled unsent, by the race of each attempt: all are resets.
    for _ in 0..10 {
        match bounded(proxied.clone()).await {
            Ok(Err(EtcdError::Reset(_))) => {}
            other => panic!("a proxy whose etcd is down resets: {other:?}"),
        }
    }
    etcd.restart(0).await;
    eventually(Duration::from_secs(10), "etcd answers again", || async {
        bounded(client.clone()).await.ok()?.ok()
    })
    .await;
    // SIGSTOPped: the port still takes connections, so nothing is refused.
    etcd.pause(0);
    let stopped = bounded(client.clone()).await;
    etcd.resume(0);
    assert!(
        !matches!(stopped, Ok(Err(EtcdError::Refused(_)))),
        "a stopped etcd refuses nothing: {stopped:?}"
    );
}

/// A multi-endpoint client's handles use one member at a time; when it goes
/// silent they move to a member that answers, and a member that was down
/// and has restarted is one of them: no member is skipped for having failed
/// before, and none that does not answer is waited on (with authentication
/// on, dialling a member is a request of its own, which a silent member
/// never answers).
///
/// Three hosts, each with a client to the three members through a proxy
/// per member; consecutive clients start on consecutive members. Member 0
/// is killed and restarted, then the paths to members 1 and 2 are
/// blackholed (the cluster keeps its quorum): every host must move to
/// member 0 within its lease's TTL, and so keep its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_member_is_used_again_when_the_others_go_silent() {
    init_tracing();
    const PASSWORD: &str = "members";
    let mut etcd = EtcdCluster::three().await;
    etcd.enable_auth(PASSWORD).await;
    let mut proxies = Vec::new();
    for ep in etcd.endpoints() {
        proxies.push(Proxy::start(&ep).await);
    }
    let via: Vec<String> = proxies.iter().map(Proxy::endpoint).collect();
    let with_user = coord::ConnectOptions::default().with_user("root", PASSWORD);
    let mut hosts = Vec::new();
    for i in 0..3 {
        let client = coord::connect(&via, with_user.clone()).await.unwrap();
        let host = HostLiveness::register(client, meta(&format!("m{i}")), opts(6))
            .await
            .expect("register");
        let lease = host.lease_id().expect("lease");
        let events = host.subscribe();
        hosts.push((host, lease, events));
    }

    etcd.kill(0);
    // The hosts that used member 0 move off it (and keep their leases).
    tokio::time::sleep(Duration::from_secs(3)).await;
    etcd.restart(0).await;
    proxies[1].set(Mode::Blackhole);
    proxies[2].set(Mode::Blackhole);
    // Two TTLs: a lease not kept alive through member 0 has expired.
    tokio::time::sleep(Duration::from_secs(12)).await;

    let direct = coord::connect(&etcd.endpoints(), with_user.clone())
        .await
        .unwrap()
        .etcd();
    for (i, (host, lease, events)) in hosts.iter_mut().enumerate() {
        let key = format!("/coord/hosts/m{i}");
        let (_, key_lease, _) = get(&direct, &key)
            .await
            .unwrap_or_else(|| panic!("{key} expired"));
        assert_eq!(LeaseId(key_lease), *lease, "{key} on its first lease");
        assert_eq!(host.lease_id(), Some(*lease));
        while let Ok(e) = events.try_recv() {
            assert!(!matches!(e, LivenessEvent::Lost { .. }), "m{i}: {e:?}");
        }
    }
    for (host, _, _) in hosts {
        host.stop().await.expect("stop");
    }
}
