//! Closing a host watcher from elsewhere: a closer ends it, and `wait`
//! returns only once its loop has ended (its status then says closed).

use coord::{HostWatcher, ViewStatus, WatcherOptions};

use crate::test_fakes::{run_beside_etcd, sim_client};

#[test]
fn a_closer_ends_the_watcher_and_wait_returns_once_its_loop_ended() {
    let outcome = run_beside_etcd(9, |etcd_addr, start| async move {
        let api = sim_client(etcd_addr, 1, start).await?;
        let mut watcher = HostWatcher::<serde_json::Value>::new(api, WatcherOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        // The snapshot (empty) is synced.
        let first = watcher.next().await.map(|e| format!("{e:?}"));
        let status = watcher.status();
        let watching = status.borrow().clone();
        watcher.closer().close();
        watcher.wait().await;
        let after = status.borrow().clone();
        let next = watcher.next().await.map(|e| format!("{e:?}"));
        Ok((first, watching, after, next))
    });
    let (first, watching, after, next) = match outcome {
        Ok(o) => o,
        Err(e) => panic!("the run failed: {e}"),
    };
    assert!(first.is_some(), "the watcher said nothing before closing");
    assert_ne!(watching, ViewStatus::Closed);
    assert_eq!(
        after,
        ViewStatus::Closed,
        "wait returned before the loop ended"
    );
    assert_eq!(next, None, "events after close: {next:?}");
}
