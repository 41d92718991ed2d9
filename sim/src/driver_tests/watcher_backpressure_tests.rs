//! A host watcher whose consumer takes nothing holds back: once its
//! channel (`buffer` events) is full and `buffer` more wait beside it,
//! etcd's stream is read no further, so the view stops there too. Nothing
//! is lost: once the consumer reads, every change arrives, in order.
//! Its status names, all along, the revision its view reflects.

use std::time::Duration;

use coord::{HostWatcher, Revision, ViewStatus, WatcherOptions};

use crate::driver_tests::test_fakes::{event_label, put_hosts, run_beside_etcd, sim_client};

/// The watcher's buffer in this test.
const BUFFER: usize = 4;

/// Hosts put, one at a time, while the consumer takes nothing: far more
/// than the watcher may hold back.
const HOSTS: usize = 20;

/// What a stalled consumer's watcher did, and the revision of each put.
struct Stalled {
    /// The hosts in its view while nothing was taken, and its status then.
    held_back: (usize, ViewStatus),
    /// Once the consumer read: each event's kind and host.
    taken: Vec<String>,
    /// The view's size and the status at the end.
    seen: (usize, ViewStatus),
    /// The revision each put made, in order.
    revisions: Vec<Revision>,
}

fn stalled_then_read() -> Result<Stalled, String> {
    run_beside_etcd(12, |etcd_addr, start| async move {
        let api = sim_client(etcd_addr, 1, start).await?;
        let writer = sim_client(etcd_addr, 2, start).await?;
        let opts = WatcherOptions::default().with_buffer(BUFFER);
        let mut watcher = HostWatcher::<serde_json::Value>::new(api, opts)
            .await
            .map_err(|e| e.to_string())?;
        let mut revisions = Vec::new();
        for i in 0..HOSTS {
            // Apart, so that each change comes in a watch message of its
            // own.
            revisions.push(put_hosts(&writer, [format!("h{i:02}")]).await?);
            madsim::time::sleep(Duration::from_millis(50)).await;
        }
        madsim::time::sleep(Duration::from_secs(1)).await;
        let held_back = (watcher.view().len(), watcher.status().borrow().clone());
        let mut taken = Vec::new();
        while taken.len() < HOSTS + 1 {
            let Some(event) = watcher.next().await else {
                break;
            };
            taken.push(event_label(event));
        }
        let seen = (watcher.view().len(), watcher.status().borrow().clone());
        watcher.close().await;
        Ok(Stalled {
            held_back,
            taken,
            seen,
            revisions,
        })
    })
}

#[test]
fn a_stalled_consumer_holds_the_watcher_back_and_loses_nothing() {
    let Stalled {
        held_back,
        taken,
        seen,
        revisions,
    } = match stalled_then_read() {
        Ok(s) => s,
        Err(e) => panic!("the run failed: {e}"),
    };
    // The channel holds `Synced` and BUFFER - 1 changes, and BUFFER more
    // wait beside it: the stream was read that far and no further.
    let applied = 2 * BUFFER - 1;
    assert_eq!(
        held_back.0, applied,
        "hosts applied while the consumer took nothing"
    );
    assert_eq!(
        held_back.1,
        ViewStatus::Watching {
            revision: revisions[applied - 1]
        },
        "the status while held back"
    );
    let mut expected = vec!["synced".to_string()];
    expected.extend((0..HOSTS).map(|i| format!("up h{i:02}")));
    assert_eq!(taken, expected, "what the consumer read");
    assert_eq!(seen.0, HOSTS, "the view once the consumer read");
    assert_eq!(
        seen.1,
        ViewStatus::Watching {
            revision: revisions[HOSTS - 1]
        },
        "the status once the consumer read"
    );
}
