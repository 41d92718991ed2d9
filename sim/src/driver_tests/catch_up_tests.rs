//! A run loop that wakes late (a GC pause, SIGSTOP) or was kept busy
//! lets no deadline pass judgement on what arrived meanwhile: a watch
//! stream's answer to a progress request, which came while the loop could
//! not read it, proves the stream alive even though the answer's deadline
//! has passed by the time the loop reads again. A loop parked in its
//! `select!` reads the ready message before its timer branch, and one
//! that wakes late reads for a while what needs a turn to be read (the
//! first test); one that was busy past the deadline reads one ready message of
//! every stream in its catch-up before the deadline is judged (the
//! second); one whose consumer was behind when a deadline came reads
//! its streams, as they yield, for a moment before judging it (the
//! third).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use crate::driver_tests::test_fakes::{
    block_on_within, lock, next_message, rival_leading, run_beside_etcd, sim_client, Bend, Bent,
    Delivered, NextMessage, NoLease,
};
use crate::etcd::client::{SimKeeper, SimWatchEvents};
use coord::{
    ElectionPool, EtcdApi, EtcdError, Granted, HostWatcher, LeaseId, Revision, SessionOptions,
    WatchControl, WatchEvents, WatchMessage, WatcherOptions,
};
use coord_core::io::{Listing, MessageKind, RangeRequest, Txn, TxnResponse};
use coord_core::ClusterId;
use tokio::sync::mpsc;

/// How long the process "stops" right after each progress request: the
/// answer arrives meanwhile, and the loop runs again this long after the
/// request, past the answer's deadline (the request timeout).
const PAUSE: Duration = Duration::from_millis(2500);
const REQUEST_TIMEOUT: Duration = Duration::from_millis(500);

/// Lists `hosts` (none by default) at revision 1; every watch sends
/// `Created`, and answers each progress request at once, after which the
/// process stops for [`PAUSE`] (virtual time jumps ahead with nothing
/// run). With `turn_away`, each message is readable only a turn of the
/// runtime after it is first asked for, as on a stream that was not
/// polled for a while (madsim's network, a message just taken from a
/// socket). Counts the watches opened.
#[derive(Clone, Default)]
struct PausedAfterEachProbe {
    watches: Arc<AtomicU64>,
    hosts: Vec<&'static str>,
    turn_away: bool,
}

fn message(kind: MessageKind) -> WatchMessage {
    WatchMessage {
        kind,
        events: Vec::new(),
        revision: Revision(1),
        cluster: ClusterId(1),
    }
}

/// Answers a progress request on its stream, then pauses the process.
struct Answering(mpsc::UnboundedSender<WatchMessage>);

impl WatchControl for Answering {
    async fn request_progress(&mut self) -> Result<(), EtcdError> {
        let _ = self.0.send(message(MessageKind::Progress));
        madsim::time::advance(PAUSE);
        Ok(())
    }
    async fn cancel(&mut self) {}
}

/// The stream's messages; with the flag, each a runtime turn late.
struct Answers(mpsc::UnboundedReceiver<WatchMessage>, bool);

impl WatchEvents for Answers {
    async fn next(&mut self) -> Option<Result<WatchMessage, EtcdError>> {
        let m = self.0.recv().await;
        if self.1 {
            madsim::time::sleep(Duration::from_micros(1)).await;
        }
        m.map(Ok)
    }
}

impl EtcdApi for PausedAfterEachProbe {
    type Keeper = NoLease;
    type Replies = NoLease;
    type WatchControl = Answering;
    type WatchEvents = Answers;

    async fn range(&self, _request: RangeRequest) -> Result<Listing, EtcdError> {
        let host = |id: &str| coord_core::kv::KeyValue {
            key: coord_core::Key(format!("/coord/hosts/{id}").into_bytes()),
            value: b"{}".to_vec(),
            create_revision: Revision(1),
            mod_revision: Revision(1),
            lease: LeaseId(7),
        };
        Ok(Listing {
            cluster: ClusterId(1),
            ..Listing::complete(self.hosts.iter().map(|h| host(h)).collect(), Revision(1))
        })
    }
    async fn txn(&self, _txn: Txn) -> Result<TxnResponse, EtcdError> {
        Err(EtcdError::Unavailable("not in this test".into()))
    }
    async fn watch(
        &self,
        _key: Vec<u8>,
        _prefix: bool,
        _start_revision: Revision,
    ) -> Result<(Answering, Answers), EtcdError> {
        self.watches.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(message(MessageKind::Created));
        Ok((Answering(tx), Answers(rx, self.turn_away)))
    }
    async fn lease_grant(&self, _ttl_secs: i64) -> Result<Granted, EtcdError> {
        Err(EtcdError::Unavailable("not in this test".into()))
    }
    async fn lease_revoke(&self, _lease: LeaseId) -> Result<(), EtcdError> {
        Err(EtcdError::Unavailable("not in this test".into()))
    }
    async fn lease_keep_alive(&self, _lease: LeaseId) -> Result<(NoLease, NoLease), EtcdError> {
        Err(EtcdError::Unavailable("not in this test".into()))
    }
}

/// Each probe answered during a pause: the loop wakes past the answer's
/// deadline with the answer ready (the first run), or readable only a
/// turn of the runtime after it is first asked for (the second: the loop
/// must read for a while after a late wake, not only what is ready at
/// once). Either way the stream is kept.
#[test]
fn a_probe_answered_during_a_pause_keeps_the_stream() {
    for turn_away in [false, true] {
        let api = PausedAfterEachProbe {
            turn_away,
            ..PausedAfterEachProbe::default()
        };
        let seen = api.clone();
        let started = block_on_within(4, async move {
            let opts = WatcherOptions::default()
                .with_probe_interval(Duration::from_secs(1))
                .with_request_timeout(REQUEST_TIMEOUT)
                .with_seed(4);
            let Ok(watcher) = HostWatcher::<serde_json::Value>::new(api, opts).await else {
                return false;
            };
            // Several probes, each answered during a pause.
            madsim::time::sleep(Duration::from_secs(20)).await;
            watcher.close().await;
            true
        });
        assert!(started, "the watcher did not start");
        assert_eq!(
            seen.watches.load(Ordering::SeqCst),
            1,
            "answers a turn late: {turn_away}: a stream whose probes were all answered was given up"
        );
    }
}

/// How long reading the busy campaign's stream may keep the loop busy:
/// past the probed stream's answer deadline (the request timeout, 500 ms)
/// by less than the loop's "late" threshold (1 s), and by more.
const BUSY: [Duration; 2] = [Duration::from_millis(700), Duration::from_millis(2500)];

/// A note to one watch stream: deliver a made-up (true) progress
/// notification, costing the loop `cost` of its time, then pass a note
/// without cost to the stream of the election named `then`.
struct Nudge {
    cost: Duration,
    then: Option<&'static str>,
}

/// The open watch streams' note boxes, by election name.
type Nudges = Arc<Mutex<BTreeMap<&'static str, mpsc::UnboundedSender<Nudge>>>>;

/// The election names of this test: a campaign queued on each, so one
/// pool loop reads three watch streams, opened in this order.
const BUSY_NAME: &str = "busy";
const READY_NAME: &str = "ready";
const PROBED_NAME: &str = "probed";

fn election_of(key: &[u8]) -> Option<&'static str> {
    [BUSY_NAME, READY_NAME, PROBED_NAME]
        .into_iter()
        .find(|name| key.starts_with(name.as_bytes()))
}

fn nudge(nudges: &Nudges, name: &str, nudge: Nudge) {
    if let Some(tx) = lock(nudges).get(name) {
        let _ = tx.send(nudge);
    }
}

/// The simulated etcd, where the probed election's stream, when an answer
/// to a progress request arrives, leaves it unread for a moment and makes
/// the busy election's stream deliver a message first: one that keeps the
/// loop busy past the request's deadline, and that in turn makes the
/// ready election's stream deliver one. When the loop is done with the
/// busy message, the ready stream and the probed stream (its answer) each
/// have a message waiting, in that order after the busy one.
#[derive(Clone)]
struct KeptBusy {
    nudges: Nudges,
    /// Every watch opened, by election name.
    opened: Arc<Mutex<Vec<&'static str>>>,
    /// Answers to progress requests on the probed stream.
    answers: Arc<AtomicU64>,
    /// Busy messages delivered.
    busy_reads: Arc<AtomicU64>,
    /// What each busy message costs the loop.
    busy: Duration,
}

/// The real stream's messages, and a true progress notification whenever
/// a note asks for one; on the probed stream, each progress answer is
/// held back until the busy stream was read.
struct Nudged {
    next: Option<NextMessage>,
    delivered: Delivered,
    notes: mpsc::UnboundedReceiver<Nudge>,
    /// The probed stream's answers counter; `None` on the other streams.
    holds_answers: Option<Arc<AtomicU64>>,
    nudges: Nudges,
    busy_reads: Arc<AtomicU64>,
    /// What the busy message costs the loop.
    busy: Duration,
}

enum Got {
    Shipped(SimWatchEvents, Option<Result<WatchMessage, EtcdError>>),
    Note(Nudge),
}

/// Pending (asking to be polled again at the run loop's next look for a
/// message) until the busy stream has delivered more than `before` busy
/// messages: an answer left unread until the loop was kept busy, however
/// the loop orders its looks at the streams.
async fn left_unread_until_busy(busy_reads: &AtomicU64, before: u64) {
    std::future::poll_fn(|cx| {
        if busy_reads.load(Ordering::SeqCst) > before {
            Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await;
}

impl WatchEvents for Nudged {
    async fn next(&mut self) -> Option<Result<WatchMessage, EtcdError>> {
        let mut pending = self.next.take()?;
        let created = self.delivered.created();
        let notes = &mut self.notes;
        let got = std::future::poll_fn(|cx| {
            if let Poll::Ready((events, m)) = pending.as_mut().poll(cx) {
                return Poll::Ready(Got::Shipped(events, m));
            }
            match notes.poll_recv(cx) {
                Poll::Ready(Some(note)) if created => Poll::Ready(Got::Note(note)),
                _ => Poll::Pending,
            }
        })
        .await;
        match got {
            Got::Shipped(events, message) => {
                if let Some(Ok(m)) = &message {
                    self.delivered.saw(m);
                    self.next = Some(next_message(events));
                    if let (Some(answers), MessageKind::Progress) = (&self.holds_answers, m.kind) {
                        answers.fetch_add(1, Ordering::SeqCst);
                        let before = self.busy_reads.load(Ordering::SeqCst);
                        let busy = Nudge {
                            cost: self.busy,
                            then: Some(READY_NAME),
                        };
                        nudge(&self.nudges, BUSY_NAME, busy);
                        left_unread_until_busy(&self.busy_reads, before).await;
                    }
                }
                message
            }
            Got::Note(note) => {
                self.next = Some(pending);
                if !note.cost.is_zero() {
                    self.busy_reads.fetch_add(1, Ordering::SeqCst);
                    madsim::time::advance(note.cost);
                }
                if let Some(then) = note.then {
                    let free = Nudge {
                        cost: Duration::ZERO,
                        then: None,
                    };
                    nudge(&self.nudges, then, free);
                }
                self.delivered.progress().map(Ok)
            }
        }
    }
}

impl Bend for KeptBusy {
    type WatchEvents = Nudged;
    type Keeper = SimKeeper;

    fn watch(&self, key: &[u8], start: Revision, events: SimWatchEvents) -> Nudged {
        let name = election_of(key);
        let (tx, notes) = mpsc::unbounded_channel();
        if let Some(name) = name {
            lock(&self.opened).push(name);
            lock(&self.nudges).insert(name, tx);
        }
        Nudged {
            next: Some(next_message(events)),
            delivered: Delivered::new(start),
            notes,
            holds_answers: (name == Some(PROBED_NAME)).then(|| Arc::clone(&self.answers)),
            nudges: Arc::clone(&self.nudges),
            busy_reads: Arc::clone(&self.busy_reads),
            busy: self.busy,
        }
    }

    fn keeper(&self, keeper: SimKeeper) -> SimKeeper {
        keeper
    }
}

/// Three campaigns of one pool wait behind a rival, each on a watch
/// stream of its own. Whenever the third stream's probe is answered, the
/// loop is kept busy (by the first stream's message) past the probe's
/// deadline before it reads the answer, and meanwhile the second stream
/// has a message ready too. The loop's catch-up reads both before it judges the
/// deadline: the probed stream, answered every time, is never given up.
/// (Reading no stream in the catch-up, or only one, gives it up at the
/// first probe.) Busy past the deadline by less than the loop's "late"
/// threshold and by more: the catch-up, and the late wake's read window.
fn kept_busy_for(busy: Duration) {
    let outcome = run_beside_etcd(7, |etcd_addr, start| async move {
        let opts = SessionOptions::default()
            .with_ttl(Duration::from_secs(10))
            .with_request_timeout(REQUEST_TIMEOUT)
            .with_probe_interval(Duration::from_secs(2))
            .with_seed(7);
        let fail = |e: coord::Error| e.to_string();
        let names = [BUSY_NAME, READY_NAME, PROBED_NAME];
        let (_rival, _held) = rival_leading(etcd_addr, start, &opts, &names).await?;
        let inner = sim_client(etcd_addr, 1, start).await?;
        let api = Bent {
            inner,
            bend: KeptBusy {
                nudges: Arc::default(),
                opened: Arc::default(),
                answers: Arc::default(),
                busy_reads: Arc::default(),
                busy,
            },
        };
        let pool = ElectionPool::new(api.clone(), opts).await.map_err(fail)?;
        let mut waiting = Vec::new();
        for name in [BUSY_NAME, READY_NAME, PROBED_NAME] {
            let election = pool.election(name).map_err(fail)?;
            waiting.push(madsim::task::spawn(
                async move { election.campaign("me").await },
            ));
            madsim::time::sleep(Duration::from_millis(300)).await;
        }
        madsim::time::sleep(Duration::from_secs(30)).await;
        let won = waiting.iter().any(|w| w.is_finished());
        // The campaigns hold the pool's session: end them.
        for w in &waiting {
            w.abort();
        }
        let opened = lock(&api.bend.opened).clone();
        let answers = api.bend.answers.load(Ordering::SeqCst);
        let busy_reads = api.bend.busy_reads.load(Ordering::SeqCst);
        Ok((won, opened, answers, busy_reads))
    });
    let (won, opened, answers, busy_reads) = match outcome {
        Ok(o) => o,
        Err(e) => panic!("the run failed: {e}"),
    };
    assert!(!won, "a campaign won a name its rival kept");
    // Every probe kept the loop busy past its deadline: the scenario ran.
    assert!(
        answers >= 3,
        "the probed stream's probes were answered {answers} times"
    );
    assert!(
        busy_reads >= 3,
        "busy {busy:?}: the loop was kept busy {busy_reads} times"
    );
    assert_eq!(
        opened,
        vec![BUSY_NAME, READY_NAME, PROBED_NAME],
        "busy {busy:?}: a stream whose probes were all answered was given up (watches opened, in order)"
    );
}

#[test]
fn a_loop_kept_busy_past_a_probe_deadline_reads_every_ready_stream_first() {
    for busy in BUSY {
        kept_busy_for(busy);
    }
}

/// A consumer behind from the start (a buffer of one, four events of the
/// first snapshot, nothing taken for `behind`): the watch's creation
/// arrives while the streams are not read, and its deadline (the request
/// timeout) passes meanwhile. Once the consumer catches up, the stream,
/// polled for the first time, needs a turn of the runtime to yield the
/// creation; the loop reads it before judging the deadline, and keeps the
/// watch. (Seed 9431873 of the campaign: without that, the watch was
/// given up as silent and a deletion reported late.) Behind by less than
/// the loop's "late" threshold (1 s past the deadline) and by more.
#[test]
fn a_watch_created_while_the_consumer_was_behind_is_read_before_its_deadline_is_judged() {
    for behind in [Duration::from_millis(1200), Duration::from_secs(5)] {
        let api = PausedAfterEachProbe {
            hosts: vec!["h1", "h2", "h3"],
            turn_away: true,
            ..PausedAfterEachProbe::default()
        };
        let seen = api.clone();
        let taken = block_on_within(5, async move {
            let opts = WatcherOptions::default()
                .with_request_timeout(REQUEST_TIMEOUT)
                .with_buffer(1)
                .with_seed(5);
            let Ok(mut watcher) = HostWatcher::<serde_json::Value>::new(api, opts).await else {
                return 0;
            };
            madsim::time::sleep(behind).await;
            let mut taken = 0;
            // The snapshot (three `Up`, `Synced`), then nothing more.
            while let Ok(Some(_)) =
                madsim::time::timeout(Duration::from_secs(2), watcher.next()).await
            {
                taken += 1;
            }
            watcher.close().await;
            taken
        });
        assert_eq!(taken, 4, "behind {behind:?}: the snapshot's events");
        assert_eq!(
            seen.watches.load(Ordering::SeqCst),
            1,
            "behind {behind:?}: a watch whose creation came was given up"
        );
    }
}
