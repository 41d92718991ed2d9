//! A run loop that always has input cannot hold up its timers: a watch
//! stream that always has a message ready (each one costing a millisecond
//! of the loop's time, as a real loop busy with a thousand campaigns did)
//! must not delay the session's keep-alives, so the lease, and the
//! leadership on it, is kept.
//!
//! Found on a real etcd: a pool's loop busy with a thousand campaigns sent
//! its keep-alives up to 6.5 s apart instead of every 3.3 s, because a
//! due timer waited for every other input to run dry, and once lost its
//! 10 s lease.

use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use coord::{
    ElectionPool, EtcdError, KeepAliveSender, Revision, SessionOptions, WatchEvents, WatchMessage,
};
use madsim::time::Instant;

use crate::driver_tests::test_fakes::{
    lock, next_message, rival_leading, run_beside_etcd, sim_client, Bend, Bent, Delivered,
    NextMessage,
};
use crate::etcd::client::{SimKeeper, SimWatchEvents};

/// Makes the simulated etcd's watch streams never run dry, and records
/// when each keep-alive was sent.
#[derive(Clone, Default)]
struct Flooding {
    sends: Arc<Mutex<Vec<Instant>>>,
}

struct RecordedKeeper {
    inner: SimKeeper,
    sends: Arc<Mutex<Vec<Instant>>>,
}

impl KeepAliveSender for RecordedKeeper {
    async fn send(&mut self) -> Result<(), EtcdError> {
        lock(&self.sends).push(Instant::now());
        self.inner.send().await
    }
}

/// The real stream's messages as they come; whenever it has none ready, a
/// true progress notification (see [`Delivered`]), after a millisecond of
/// the loop's time.
struct Flood {
    next: Option<NextMessage>,
    delivered: Delivered,
}

impl WatchEvents for Flood {
    async fn next(&mut self) -> Option<Result<WatchMessage, EtcdError>> {
        let mut pending = self.next.take()?;
        let ready = if self.delivered.created() {
            std::future::poll_fn(|cx| match pending.as_mut().poll(cx) {
                Poll::Ready(r) => Poll::Ready(Some(r)),
                Poll::Pending => Poll::Ready(None),
            })
            .await
        } else {
            // Nothing seen yet: wait for `Created`.
            Some(pending.as_mut().await)
        };
        match ready {
            Some((events, message)) => {
                if let Some(Ok(m)) = &message {
                    self.delivered.saw(m);
                    self.next = Some(next_message(events));
                }
                message
            }
            None => {
                self.next = Some(pending);
                madsim::time::advance(Duration::from_millis(1));
                self.delivered.progress().map(Ok)
            }
        }
    }
}

impl Bend for Flooding {
    type WatchEvents = Flood;
    type Keeper = RecordedKeeper;

    fn watch(&self, _key: &[u8], start: Revision, events: SimWatchEvents) -> Flood {
        Flood {
            next: Some(next_message(events)),
            delivered: Delivered::new(start),
        }
    }

    fn keeper(&self, keeper: SimKeeper) -> RecordedKeeper {
        RecordedKeeper {
            inner: keeper,
            sends: Arc::clone(&self.sends),
        }
    }
}

#[test]
fn a_watch_stream_that_never_runs_dry_does_not_hold_up_the_keep_alives() {
    let outcome = run_beside_etcd(5, |etcd_addr, start| async move {
        let inner = sim_client(etcd_addr, 1, start).await?;
        let api = Bent {
            inner,
            bend: Flooding::default(),
        };
        let opts = SessionOptions::default()
            .with_ttl(Duration::from_secs(10))
            .with_seed(5);
        let pool = ElectionPool::new(api.clone(), opts)
            .await
            .map_err(|e| e.to_string())?;
        let election = pool.election("flood").map_err(|e| e.to_string())?;
        let leadership = election.campaign("me").await.map_err(|e| e.to_string())?;
        madsim::time::sleep(Duration::from_secs(40)).await;
        let sends = lock(&api.bend.sends).clone();
        Ok((leadership.is_leader(), pool.stats().heals, sends))
    });
    let (leader, heals, sends) = match outcome {
        Ok(o) => o,
        Err(e) => panic!("the run failed: {e}"),
    };
    assert!(leader, "the leadership was lost");
    assert_eq!(heals, 0, "the lease was lost");
    // A keep-alive every 10 s / 3 (the default refresh), on time: 12 in
    // 40 s. The stream's task sends it once it runs: the loop lets other
    // tasks run every 64 turns (64 ms of its time here), and madsim then
    // picks one ready task at random, so a send may wait a few of those.
    assert!(
        sends.len() >= 11,
        "only {} keep-alives in 40 s",
        sends.len()
    );
    let refresh = Duration::from_secs(10) / 3;
    for pair in sends.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap <= refresh + Duration::from_secs(1),
            "keep-alives {gap:?} apart (refresh {refresh:?})"
        );
    }
}

/// Two watch streams in one loop, the first never running dry: the
/// second is still read. A pool waits behind a rival for two names; the
/// rival keeps the first and resigns the second, whose deletion reaches
/// the pool only on the second stream. Reading the streams in turn (from
/// the one after the last read) wins the second name at once; always
/// reading the first ready stream first would never get to it.
#[test]
fn a_watch_stream_that_never_runs_dry_does_not_starve_another() {
    let outcome = run_beside_etcd(6, |etcd_addr, start| async move {
        let opts = SessionOptions::default()
            .with_ttl(Duration::from_secs(10))
            .with_seed(6);
        let fail = |e: coord::Error| e.to_string();
        let (_rival, mut held) = rival_leading(etcd_addr, start, &opts, &["kept", "given"]).await?;
        let given_up = held.pop().ok_or("the rival holds nothing")?;
        let inner = sim_client(etcd_addr, 1, start).await?;
        let api = Bent {
            inner,
            bend: Flooding::default(),
        };
        let pool = ElectionPool::new(api, opts).await.map_err(fail)?;
        // Queued in this order, the first name's stream is read first.
        let first = pool.election("kept").map_err(fail)?;
        let waiting_first = madsim::task::spawn(async move { first.campaign("me").await });
        madsim::time::sleep(Duration::from_secs(1)).await;
        let second = pool.election("given").map_err(fail)?;
        let mut waiting = madsim::task::spawn(async move { second.campaign("me").await });
        madsim::time::sleep(Duration::from_secs(1)).await;
        given_up.resign().await.map_err(fail)?;
        let won = madsim::time::timeout(Duration::from_secs(20), &mut waiting).await;
        let first_won = waiting_first.is_finished();
        // The campaigns hold the pool's session: end them, or its
        // flooded loop runs on after the test.
        waiting.abort();
        waiting_first.abort();
        Ok((matches!(won, Ok(Ok(Ok(_)))), first_won))
    });
    let (won, first_won) = match outcome {
        Ok(o) => o,
        Err(e) => panic!("the run failed: {e}"),
    };
    assert!(
        !first_won,
        "the first name was won from a rival that kept it"
    );
    assert!(won, "the second name was never won: its stream was starved");
}
