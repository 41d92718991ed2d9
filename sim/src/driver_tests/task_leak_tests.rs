//! Nothing a handle started outlives it: a request the machine abandons
//! (its deadline passed) is dropped at once, and when the session closes
//! every request and stream it had open (a keep-alive stream's reader
//! too) is dropped.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::driver_tests::test_fakes::{block_on_within, NoWatch};
use coord::{
    BackoffConfig, Election, EtcdApi, EtcdError, Granted, KeepAliveReplies, KeepAliveSender,
    LeaseId, Revision, SessionOptions,
};
use coord_core::io::{Listing, RangeRequest, Txn, TxnResponse};
use tokio::sync::mpsc;

/// Counts the live values it is cloned into.
#[derive(Debug, Default, Clone)]
struct Live(Arc<AtomicI64>);

/// One live value, counted until dropped.
struct Alive(Arc<AtomicI64>);

impl Live {
    fn one(&self) -> Alive {
        self.0.fetch_add(1, Ordering::SeqCst);
        Alive(Arc::clone(&self.0))
    }
    fn count(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An etcd that grants leases and answers keep-alives, and whose
/// transactions never answer. Counts live transactions and keep-alive
/// stream halves, and every transaction started.
#[derive(Clone, Default)]
struct Unanswered {
    txns: Live,
    started: Arc<AtomicI64>,
    keepers: Live,
    readers: Live,
    /// When set, each keep-alive stream ends after its first reply.
    short_streams: bool,
    /// Keep-alive streams opened.
    opened: Arc<AtomicI64>,
}

struct Keeper {
    replies: mpsc::UnboundedSender<()>,
    _alive: Alive,
}

impl KeepAliveSender for Keeper {
    async fn send(&mut self) -> Result<(), EtcdError> {
        self.replies
            .send(())
            .map_err(|_| EtcdError::Unavailable("gone".into()))
    }
}

struct Replies {
    sent: mpsc::UnboundedReceiver<()>,
    /// Replies left before the stream ends; `None`: never ends.
    left: Option<u32>,
    _alive: Alive,
}

impl KeepAliveReplies for Replies {
    async fn next(&mut self) -> Option<Result<i64, EtcdError>> {
        if let Some(left) = &mut self.left {
            if *left == 0 {
                return None;
            }
            *left -= 1;
        }
        // A reply per keep-alive; once the keeper is gone, nothing (a
        // stream the server has not closed yet).
        match self.sent.recv().await {
            Some(()) => Some(Ok(10)),
            None => std::future::pending().await,
        }
    }
}

impl EtcdApi for Unanswered {
    type Keeper = Keeper;
    type Replies = Replies;
    type WatchControl = NoWatch;
    type WatchEvents = NoWatch;

    async fn range(&self, _request: RangeRequest) -> Result<Listing, EtcdError> {
        Err(EtcdError::Unavailable("not in this test".into()))
    }
    async fn txn(&self, _txn: Txn) -> Result<TxnResponse, EtcdError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let _alive = self.txns.one();
        std::future::pending().await
    }
    async fn watch(
        &self,
        _key: Vec<u8>,
        _prefix: bool,
        _start: Revision,
    ) -> Result<(NoWatch, NoWatch), EtcdError> {
        Err(EtcdError::Unavailable("not in this test".into()))
    }
    async fn lease_grant(&self, ttl_secs: i64) -> Result<Granted, EtcdError> {
        Ok(Granted {
            lease: LeaseId(7),
            ttl_secs,
        })
    }
    async fn lease_revoke(&self, _lease: LeaseId) -> Result<(), EtcdError> {
        Ok(())
    }
    async fn lease_keep_alive(&self, _lease: LeaseId) -> Result<(Keeper, Replies), EtcdError> {
        self.opened.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::unbounded_channel();
        // The first reply comes with the stream.
        let _ = tx.send(());
        let keeper = Keeper {
            replies: tx,
            _alive: self.keepers.one(),
        };
        let replies = Replies {
            sent: rx,
            left: self.short_streams.then_some(1),
            _alive: self.readers.one(),
        };
        Ok((keeper, replies))
    }
}

fn options() -> SessionOptions {
    SessionOptions::default()
        .with_request_timeout(Duration::from_millis(500))
        .with_backoff(
            BackoffConfig::default()
                .with_cap(Duration::from_secs(1))
                .with_fast_cap(Duration::from_secs(1)),
        )
        .with_seed(3)
}

/// What an election against [`Unanswered`] left running: a campaign that
/// keeps trying to join for 5 s, then the election closed (or, without
/// `close`, its last handle dropped mid-join). Returns the joins tried,
/// the most transactions live at once, the keep-alive streams open while
/// it ran, and the transactions and keep-alive halves live a second
/// after the end.
fn run(close: bool) -> (i64, i64, i64, (i64, i64, i64)) {
    let api = Unanswered::default();
    let seen = api.clone();
    let during = block_on_within(3, async move {
        let Ok(election) = Election::new(api, "leaks", options()).await else {
            return None;
        };
        let election = Arc::new(election);
        let campaign = madsim::task::spawn({
            let election = Arc::clone(&election);
            async move {
                let tries = madsim::time::timeout(Duration::from_secs(5), election.campaign("me"));
                tries.await.is_ok()
            }
        });
        let mut most = 0;
        for _ in 0..100 {
            madsim::time::sleep(Duration::from_millis(50)).await;
            most = most.max(seen.txns.count());
        }
        let during = (
            seen.started.load(Ordering::SeqCst),
            most,
            seen.keepers.count(),
        );
        if close {
            let _ = election.close().await;
        }
        // The campaign gave up at 5 s: this is the last handle.
        let _ = campaign.await;
        drop(election);
        // Aborted tasks are dropped when the runtime next runs them.
        madsim::time::sleep(Duration::from_secs(1)).await;
        let left = (
            seen.txns.count(),
            seen.keepers.count(),
            seen.readers.count(),
        );
        Some((during.0, during.1, during.2, left))
    });
    match during {
        Some(d) => d,
        None => panic!("the session did not start"),
    }
}

#[test]
fn abandoned_requests_are_dropped_and_a_closed_session_leaves_nothing_running() {
    for close in [true, false] {
        let (started, most, keepers, left) = run(close);
        assert!(started >= 4, "only {started} joins tried in 5 s");
        assert_eq!(most, 1, "abandoned joins kept running");
        assert_eq!(keepers, 1, "one keep-alive stream while it ran");
        let how = if close { "closed" } else { "dropped" };
        assert_eq!(
            left,
            (0, 0, 0),
            "requests or streams outlived the session ({how})"
        );
    }
}

/// Keep-alive streams that end after their first reply (a proxy that
/// cuts every stream): the session reopens one after another, paced by
/// its backoff (up to the 1 s fast cap here: about 15 in 10 s, not one
/// per turn of its loop), and drops each ended stream's sending half when
/// its end arrives, so at most one is ever live.
#[test]
fn a_keep_alive_stream_that_keeps_ending_is_reopened_with_backoff_and_dropped() {
    let api = Unanswered {
        short_streams: true,
        ..Unanswered::default()
    };
    let seen = api.clone();
    let outcome = block_on_within(3, async move {
        let session = coord::Session::new(api, options()).await.ok()?;
        let mut most = 0;
        for _ in 0..200 {
            madsim::time::sleep(Duration::from_millis(50)).await;
            most = most.max(seen.keepers.count());
        }
        let opened = seen.opened.load(Ordering::SeqCst);
        drop(session);
        Some((opened, most))
    });
    let Some((opened, most)) = outcome else {
        panic!("the session did not start");
    };
    assert!(
        (3..=40).contains(&opened),
        "{opened} keep-alive streams in 10 s"
    );
    assert!(most <= 1, "{most} keep-alive senders live at once");
}
