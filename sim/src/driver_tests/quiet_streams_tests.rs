//! A run loop reading many watch streams polls a stream's pending read
//! when that read was woken, not at every look for a message: the cost of
//! a message does not grow with the number of quiet streams beside it (a
//! pool of many names, each campaign waiting on a stream of its own).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use crate::driver_tests::test_fakes::{lock, rival_leading, run_beside_etcd, sim_client};
use coord::etcd::{Intercept, Intercepted, WatchStream};
use coord::{ElectionPool, EtcdApi, EtcdError, SessionOptions, WatchEvents, WatchMessage};

/// The polls of one stream's reads, and the messages it delivered.
#[derive(Default)]
struct Tally {
    polls: AtomicU64,
    messages: AtomicU64,
}

/// Counts the polls of every watch stream's reads, one tally per stream,
/// by stream (in the order they opened).
#[derive(Clone, Default)]
struct Counted {
    streams: Arc<Mutex<BTreeMap<u64, Arc<Tally>>>>,
}

impl Intercept for Counted {
    fn watch<A: EtcdApi>(
        &self,
        api: &A,
        stream: &WatchStream,
    ) -> impl Future<Output = Result<(A::WatchControl, A::WatchEvents), EtcdError>> + Send {
        lock(&self.streams).insert(stream.id, Arc::default());
        api.watch(stream.key.clone(), stream.prefix, stream.start_revision)
    }

    fn watch_next<E: WatchEvents>(
        &self,
        stream: &WatchStream,
        events: &mut E,
    ) -> impl Future<Output = Option<Result<WatchMessage, EtcdError>>> + Send {
        let tally = Arc::clone(lock(&self.streams).entry(stream.id).or_default());
        let mut read = Box::pin(events.next());
        std::future::poll_fn(move |cx| {
            tally.polls.fetch_add(1, Ordering::SeqCst);
            let polled = read.as_mut().poll(cx);
            if let Poll::Ready(Some(Ok(_))) = &polled {
                tally.messages.fetch_add(1, Ordering::SeqCst);
            }
            polled
        })
    }
}

/// How many names the pool campaigns for, each behind a rival.
const NAMES: usize = 24;

/// A pool's campaigns wait behind a rival on 24 names for a minute, each
/// stream probed every 2 s (about 30 progress answers each). Every
/// stream's reads are polled at most a few times per message it
/// delivered: polled at every look instead, each would be polled about as
/// often as all the streams together delivered (24 times as often).
#[test]
fn a_look_for_a_message_polls_only_the_streams_that_were_woken() {
    let outcome = run_beside_etcd(11, |etcd_addr, start| async move {
        let opts = SessionOptions::default()
            .with_ttl(Duration::from_secs(10))
            .with_probe_interval(Duration::from_secs(2))
            .with_seed(11);
        let fail = |e: coord::Error| e.to_string();
        let names: Vec<String> = (0..NAMES).map(|i| format!("name-{i:02}")).collect();
        let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let (_rival, _held) = rival_leading(etcd_addr, start, &opts, &name_refs).await?;
        let api = Intercepted::new(sim_client(etcd_addr, 1, start).await?, Counted::default());
        let pool = ElectionPool::new(api.clone(), opts).await.map_err(fail)?;
        let mut waiting = Vec::new();
        for name in &names {
            let election = pool.election(name).map_err(fail)?;
            waiting.push(madsim::task::spawn(
                async move { election.campaign("me").await },
            ));
        }
        madsim::time::sleep(Duration::from_secs(60)).await;
        let won = waiting.iter().any(|w| w.is_finished());
        for w in &waiting {
            w.abort();
        }
        let tallies: Vec<(u64, u64)> = lock(&api.intercept().streams)
            .values()
            .map(|t| {
                (
                    t.polls.load(Ordering::SeqCst),
                    t.messages.load(Ordering::SeqCst),
                )
            })
            .collect();
        Ok((won, tallies))
    });
    let (won, tallies) = match outcome {
        Ok(o) => o,
        Err(e) => panic!("the run failed: {e}"),
    };
    assert!(!won, "a campaign won a name its rival kept");
    assert_eq!(
        tallies.len(),
        NAMES,
        "one watch stream per waiting campaign"
    );
    let delivered: u64 = tallies.iter().map(|(_, m)| m).sum();
    // The scenario ran: every stream was probed all along.
    assert!(
        tallies.iter().all(|(_, m)| *m >= 20),
        "messages per stream: {tallies:?}"
    );
    for (stream, (polls, messages)) in tallies.iter().enumerate() {
        assert!(
            *polls <= 3 * messages + 10,
            "stream {stream}: {polls} polls for {messages} messages \
             ({delivered} delivered by all the streams)"
        );
    }
}
