//! Closing a host watcher: from elsewhere with a closer (then `wait`
//! returns only once its loop has ended, its status then closed), or with
//! `close`, which returns once the loop ended; on a loop of its own or
//! run by the consumer's calls (`Driving::InNext`). What was buffered
//! for the consumer before the close is still taken.

use coord::{Driving, HostWatcher, ViewStatus, WatcherOptions};

use crate::driver_tests::test_fakes::{event_label, put_hosts, run_beside_etcd, sim_client};

/// How a test closes the watcher.
#[derive(Clone, Copy, Debug)]
enum Closing {
    /// `closer().close()`, then `wait()`.
    CloserThenWait,
    /// `close()`.
    Close,
}

/// What a watcher driven `driving` did, closed after its first event:
/// whether it said anything before, its status before and after closing,
/// and what `next` gave after.
type Closed = (bool, ViewStatus, ViewStatus, Option<String>);

fn closed(driving: Driving, closing: Closing) -> Closed {
    let outcome = run_beside_etcd(9, move |etcd_addr, start| async move {
        let api = sim_client(etcd_addr, 1, start).await?;
        let opts = WatcherOptions::default().with_driving(driving);
        let mut watcher = HostWatcher::<serde_json::Value>::new(api, opts)
            .await
            .map_err(|e| e.to_string())?;
        // The snapshot (empty) is synced.
        let first = watcher.next().await.is_some();
        let status = watcher.status();
        let watching = status.borrow().clone();
        match closing {
            Closing::CloserThenWait => {
                watcher.closer().close();
                watcher.wait().await;
            }
            Closing::Close => watcher.close().await,
        }
        let after = status.borrow().clone();
        let next = watcher.next().await.map(|e| format!("{e:?}"));
        Ok((first, watching, after, next))
    });
    match outcome {
        Ok(o) => o,
        Err(e) => panic!("the run failed ({driving:?}, {closing:?}): {e}"),
    }
}

#[test]
fn a_closer_ends_the_watcher_and_wait_returns_once_its_loop_ended() {
    for driving in [Driving::Adaptive, Driving::OwnTask, Driving::InNext] {
        for closing in [Closing::CloserThenWait, Closing::Close] {
            let (first, watching, after, next) = closed(driving, closing);
            let case = format!("{driving:?}, {closing:?}");
            assert!(first, "{case}: the watcher said nothing before closing");
            assert_ne!(watching, ViewStatus::Closed, "{case}");
            assert_eq!(
                after,
                ViewStatus::Closed,
                "{case}: returned before the loop ended"
            );
            assert_eq!(next, None, "{case}: events after close");
        }
    }
}

/// Hosts listed by the first snapshot of the last test: more than the
/// run loop's turns between two yields (64), so that a loop handing
/// the consumer one event per turn would not have handed it them all
/// when `new` returns.
const SNAPSHOT_HOSTS: usize = 100;

/// What `next` yields of a watcher driven `driving` over a prefix of
/// [`SNAPSHOT_HOSTS`] hosts, closed as soon as `new` returns: each
/// event's kind and host.
fn taken_after_an_early_close(driving: Driving) -> Result<Vec<String>, String> {
    run_beside_etcd(11, move |etcd_addr, start| async move {
        let api = sim_client(etcd_addr, 1, start).await?;
        put_hosts(&api, (0..SNAPSHOT_HOSTS).map(|i| format!("h{i:03}"))).await?;
        let opts = WatcherOptions::default()
            .with_driving(driving)
            .with_buffer(4 * SNAPSHOT_HOSTS);
        let mut watcher = HostWatcher::<serde_json::Value>::new(api, opts)
            .await
            .map_err(|e| e.to_string())?;
        watcher.close().await;
        let mut taken = Vec::new();
        while let Some(event) = watcher.next().await {
            taken.push(event_label(event));
        }
        Ok(taken)
    })
}

/// `new` returns once the first snapshot is in: by then its events are
/// buffered for the consumer (the buffer has room for them all), so a
/// close right after loses none of them: every host's `Up`, in key
/// order, then `Synced`, then the end.
#[test]
fn a_snapshot_buffered_before_a_close_is_still_taken() {
    let mut expected: Vec<String> = (0..SNAPSHOT_HOSTS).map(|i| format!("up h{i:03}")).collect();
    expected.push("synced".to_string());
    for driving in [Driving::Adaptive, Driving::OwnTask, Driving::InNext] {
        match taken_after_an_early_close(driving) {
            Ok(taken) => assert_eq!(taken, expected, "{driving:?}"),
            Err(e) => panic!("the run failed ({driving:?}): {e}"),
        }
    }
}

/// What a watcher driven `driving` yields as a `Stream` over a prefix
/// of three hosts, a fourth registered once it synced, then closed with
/// its closer: each event's kind and host, to the stream's end.
fn streamed(driving: Driving) -> Result<Vec<String>, String> {
    use futures_core::Stream;
    run_beside_etcd(15, move |etcd_addr, start| async move {
        let api = sim_client(etcd_addr, 1, start).await?;
        put_hosts(&api, (0..3).map(|i| format!("h{i}"))).await?;
        let opts = WatcherOptions::default().with_driving(driving);
        let mut watcher = HostWatcher::<serde_json::Value>::new(api.clone(), opts)
            .await
            .map_err(|e| e.to_string())?;
        let mut taken = Vec::new();
        loop {
            let event =
                std::future::poll_fn(|cx| std::pin::Pin::new(&mut watcher).poll_next(cx)).await;
            let Some(event) = event else {
                return Ok(taken);
            };
            taken.push(event_label(event));
            if taken.last().map(String::as_str) == Some("synced") {
                put_hosts(&api, ["h3".to_string()]).await?;
            }
            if taken.last().map(String::as_str) == Some("up h3") {
                watcher.closer().close();
            }
        }
    })
}

/// A watcher consumed as a `Stream` yields what `next` does: the
/// snapshot's hosts, `Synced`, a host that registers later, and, once
/// closed, the end.
#[test]
fn a_watcher_streams_what_next_yields() {
    let expected = ["up h0", "up h1", "up h2", "synced", "up h3"];
    for driving in [Driving::Adaptive, Driving::OwnTask, Driving::InNext] {
        match streamed(driving) {
            Ok(taken) => assert_eq!(taken, expected, "{driving:?}"),
            Err(e) => panic!("the run failed ({driving:?}): {e}"),
        }
    }
}

/// A watcher dropped with its status still held by someone: the status
/// ends `Closed` (its loop ends and says so), not stuck at `Watching`.
#[test]
fn a_dropped_watcher_says_closed() {
    let outcome = run_beside_etcd(13, |etcd_addr, start| async move {
        let api = sim_client(etcd_addr, 1, start).await?;
        let mut watcher = HostWatcher::<serde_json::Value>::new(api, WatcherOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        let _synced = watcher.next().await;
        let mut status = watcher.status();
        let watching = status.borrow().clone();
        drop(watcher);
        // Err: the loop ended without saying Closed.
        let closed = status.wait_for(|s| *s == ViewStatus::Closed).await.is_ok();
        Ok((watching, closed))
    });
    let (watching, closed) = match outcome {
        Ok(o) => o,
        Err(e) => panic!("the run failed: {e}"),
    };
    assert!(
        matches!(watching, ViewStatus::Watching { .. }),
        "before the drop: {watching:?}"
    );
    assert!(closed, "the dropped watcher's status did not end Closed");
}
