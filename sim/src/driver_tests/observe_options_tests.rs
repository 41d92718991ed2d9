//! An observer honours the request timeout, probe interval and backoff it
//! is given (not coord's defaults): against an etcd whose watch streams
//! go quiet after `Created` and never answer a progress request, the
//! observer gives its stream up after the probe interval plus the request
//! timeout, and watches again after a first-attempt backoff. Its status
//! follows it; a closed observer ends its observations and says so, and
//! so does a dropped one.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::driver_tests::test_fakes::{block_on_within, lock, NoLease};
use coord::{
    BackoffConfig, EtcdApi, EtcdError, Granted, LeaseId, Revision, SessionOptions, WatchControl,
    WatchEvents, WatchMessage,
};
use coord_core::io::{Listing, MessageKind, RangeRequest, Txn, TxnResponse};
use coord_core::ClusterId;
use madsim::time::Instant;

/// Lists an empty prefix at revision 1; every watch sends `Created`, then
/// nothing. Records when each watch was opened.
#[derive(Clone)]
struct QuietStreams {
    watches: Arc<Mutex<Vec<Instant>>>,
}

/// Takes progress requests and never answers them.
struct Deaf;

impl WatchControl for Deaf {
    async fn request_progress(&mut self) -> Result<(), EtcdError> {
        Ok(())
    }
    async fn cancel(&mut self) {}
}

/// `Created`, then silence.
struct Quiet {
    created: bool,
}

impl WatchEvents for Quiet {
    async fn next(&mut self) -> Option<Result<WatchMessage, EtcdError>> {
        if std::mem::replace(&mut self.created, true) {
            std::future::pending::<()>().await;
        }
        Some(Ok(WatchMessage {
            kind: MessageKind::Created,
            events: Vec::new(),
            revision: Revision(1),
            cluster: ClusterId(1),
        }))
    }
}

impl EtcdApi for QuietStreams {
    type Keeper = NoLease;
    type Replies = NoLease;
    type WatchControl = Deaf;
    type WatchEvents = Quiet;

    async fn range(&self, _request: RangeRequest) -> Result<Listing, EtcdError> {
        Ok(Listing {
            cluster: ClusterId(1),
            ..Listing::complete(Vec::new(), Revision(1))
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
    ) -> Result<(Deaf, Quiet), EtcdError> {
        lock(&self.watches).push(Instant::now());
        Ok((Deaf, Quiet { created: false }))
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

#[test]
fn an_observer_runs_on_the_timeouts_and_backoff_it_is_given() {
    // Every one far from its default (probe 10 s, request 5 s, first
    // backoff 100 ms): the next watch is due 1 s + 0.5 s + 1.5-3 s after
    // the first. With the default probe interval it would come after 11 s,
    // with the default request timeout after 7.5 s, with the default
    // backoff after 1.6 s.
    let opts = SessionOptions::default()
        .with_probe_interval(Duration::from_secs(1))
        .with_request_timeout(Duration::from_millis(500))
        .with_backoff(
            BackoffConfig::default()
                .with_initial(Duration::from_secs(3))
                .with_fast_cap(Duration::from_secs(3)),
        )
        .with_seed(7);
    let watches = block_on_within(1, async move {
        let api = QuietStreams {
            watches: Arc::default(),
        };
        let observe = coord::Observe::start_with(api.clone(), "options", &opts);
        assert!(observe.is_ok(), "a good name was refused");
        madsim::time::sleep(Duration::from_secs(6)).await;
        let watches = lock(&api.watches).clone();
        drop(observe);
        watches
    });
    assert!(
        watches.len() >= 2,
        "the quiet stream was never given up: {watches:?}"
    );
    let gap = watches[1] - watches[0];
    assert!(
        gap >= Duration::from_millis(2900) && gap <= Duration::from_millis(4700),
        "watched again {gap:?} after the first watch (due after 3-4.5 s)"
    );
}

/// An observer of `name` on streams that go quiet after `Created`, with
/// coord's default options.
fn quiet_observer(name: &str) -> coord::Observe {
    let api = QuietStreams {
        watches: Arc::default(),
    };
    match coord::Observe::start(api, name) {
        Ok(observe) => observe,
        Err(e) => panic!("a good name was refused: {e}"),
    }
}

#[test]
fn a_closed_observer_ends_its_observations_and_says_closed() {
    let (first, after_close, status) = block_on_within(2, async move {
        let mut observe = quiet_observer("closing");
        let first = observe.next().await;
        // Its status follows the machine: watching once the stream is
        // created (the test gives up after an hour of virtual time if it
        // never says so).
        let mut watching = observe.status();
        let _ = watching
            .wait_for(|s| {
                *s == coord::ViewStatus::Watching {
                    revision: Revision(1),
                }
            })
            .await;
        observe.close();
        // Nothing else comes: the stream stays quiet, so only the close
        // can end the observations (the test gives up after an hour of
        // virtual time otherwise).
        let after_close = observe.next().await;
        let status = observe.status().borrow().clone();
        (first, after_close, status)
    });
    assert_eq!(
        first.map(|o| (o.leader, o.revision)),
        Some((None, Revision(1))),
        "the first observation is nobody leading at the listing's revision"
    );
    assert_eq!(after_close, None, "observations went on after close");
    assert_eq!(status, coord::ViewStatus::Closed);
}

#[test]
fn a_dropped_observer_says_closed() {
    let last = block_on_within(3, async move {
        let mut observe = quiet_observer("dropping");
        let _ = observe.next().await;
        let mut status = observe.status();
        drop(observe);
        // The loop ends, and its side of the status with it.
        while status.changed().await.is_ok() {}
        let last = status.borrow().clone();
        last
    });
    assert_eq!(last, coord::ViewStatus::Closed);
}
