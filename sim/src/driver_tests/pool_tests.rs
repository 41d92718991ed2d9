//! An election pool on the simulated etcd: its numbers (heals
//! included), an observer of one of its elections (which takes the
//! session's request timeout, probe interval, backoff and seed), and
//! requests asked at once of one leadership, each answered.

use std::time::Duration;

use coord::{ElectionPool, EtcdApi, LeaseStatus, SessionOptions};

use crate::driver_tests::test_fakes::{run_beside_etcd, sim_client};

#[test]
fn a_pool_counts_its_names_serves_observers_and_answers_every_request() {
    let outcome = run_beside_etcd(6, |etcd_addr, start| async move {
        let api = sim_client(etcd_addr, 1, start).await?;
        let opts = SessionOptions::default()
            .with_ttl(Duration::from_secs(10))
            .with_seed(6);
        let pool = ElectionPool::new(api, opts)
            .await
            .map_err(|e| e.to_string())?;
        let a = pool.election("a").map_err(|e| e.to_string())?;
        let b = pool.election("b").map_err(|e| e.to_string())?;
        let leading = a.campaign("me").await.map_err(|e| e.to_string())?;
        let _b = b.campaign("me").await.map_err(|e| e.to_string())?;
        let stats = pool.stats();
        let mut observe = a.observe();
        let first = observe.next().await;
        let token = leading.token();
        // Two proclaims at once: each is answered.
        let (one, two) = tokio::join!(leading.proclaim("x"), leading.proclaim("y"));
        Ok((stats, first, token, one, two))
    });
    let (stats, first, token, one, two) = match outcome {
        Ok(o) => o,
        Err(e) => panic!("the run failed: {e}"),
    };
    assert_eq!(stats.names, 2);
    assert_eq!(stats.leases_held, 1);
    assert_eq!(stats.heals, 0);
    assert!(!stats.closed);
    let Some(first) = first else {
        panic!("the observer of a pool's election ended at once")
    };
    let Some(leader) = first.leader else {
        panic!("nobody observed leading: {first:?}")
    };
    assert_eq!(leader.value, b"me");
    assert_eq!(leader.token, token);
    assert!(one.is_ok(), "{one:?}");
    assert!(two.is_ok(), "{two:?}");
}

#[test]
fn a_pool_counts_the_heals_of_its_lease() {
    let outcome = run_beside_etcd(7, |etcd_addr, start| async move {
        let api = sim_client(etcd_addr, 1, start).await?;
        let outsider = sim_client(etcd_addr, 2, start).await?;
        let opts = SessionOptions::default().with_seed(7);
        let pool = ElectionPool::new(api, opts)
            .await
            .map_err(|e| e.to_string())?;
        let before = pool.stats().heals;
        let mut state = pool.session().state();
        let mut lease = pool.session().lease_id().ok_or("no lease")?;
        // Twice revoked from outside, twice healed under a new lease.
        for _ in 0..2 {
            outsider
                .lease_revoke(lease)
                .await
                .map_err(|e| e.to_string())?;
            lease = loop {
                state.changed().await.map_err(|e| e.to_string())?;
                if let LeaseStatus::Registered { lease: now } = *state.borrow() {
                    if now != lease {
                        break now;
                    }
                }
            };
        }
        Ok((before, pool.stats()))
    });
    let (before, stats) = match outcome {
        Ok(o) => o,
        Err(e) => panic!("the run failed: {e}"),
    };
    assert_eq!(before, 0);
    assert_eq!(stats.heals, 2);
    assert_eq!(stats.leases_held, 1);
}
