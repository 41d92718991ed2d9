//! Closing a host watcher: from elsewhere with a closer (then `wait`
//! returns only once its loop has ended, its status then closed), or with
//! `close`, which returns once the loop ended; on a loop of its own or
//! run by the consumer's calls (`Driving::InNext`).

use coord::{Driving, HostWatcher, ViewStatus, WatcherOptions};

use crate::test_fakes::{run_beside_etcd, sim_client};

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
        let opts = WatcherOptions {
            driving,
            ..WatcherOptions::default()
        };
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
    for driving in [Driving::Background, Driving::InNext] {
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
