//! A run loop that wakes late (a GC pause, SIGSTOP) lets no deadline
//! pass judgement on what arrived meanwhile: a watch stream's answer to a
//! progress request, which came while the process was not running, proves
//! the stream alive even though the answer's deadline has passed by the
//! time the loop runs again. (A loop parked in its `select!` reads the
//! ready message before its timer branch; one that was busy reads each
//! stream's ready message in its catch-up before the deadline.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::test_fakes::NoLease;
use coord::{
    EtcdApi, EtcdError, Granted, HostWatcher, LeaseId, Revision, WatchControl, WatchEvents,
    WatchMessage, WatcherOptions,
};
use coord_core::io::{Listing, MessageKind, RangeRequest, Txn, TxnResponse};
use coord_core::ClusterId;
use tokio::sync::mpsc;

/// How long the process "stops" right after each progress request: the
/// answer arrives meanwhile, and the loop runs again this long after the
/// request, past the answer's deadline (the request timeout).
const PAUSE: Duration = Duration::from_millis(2500);
const REQUEST_TIMEOUT: Duration = Duration::from_millis(500);

/// Lists an empty prefix at revision 1; every watch sends `Created`, and
/// answers each progress request at once, after which the process stops
/// for [`PAUSE`] (virtual time jumps ahead with nothing run). Counts the
/// watches opened.
#[derive(Clone, Default)]
struct PausedAfterEachProbe {
    watches: Arc<AtomicU64>,
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

struct Answers(mpsc::UnboundedReceiver<WatchMessage>);

impl WatchEvents for Answers {
    async fn next(&mut self) -> Option<Result<WatchMessage, EtcdError>> {
        self.0.recv().await.map(Ok)
    }
}

impl EtcdApi for PausedAfterEachProbe {
    type Keeper = NoLease;
    type Replies = NoLease;
    type WatchControl = Answering;
    type WatchEvents = Answers;

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
    ) -> Result<(Answering, Answers), EtcdError> {
        self.watches.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(message(MessageKind::Created));
        Ok((Answering(tx), Answers(rx)))
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
fn a_probe_answered_during_a_pause_keeps_the_stream() {
    let rt = madsim::runtime::Runtime::with_seed_and_config(4, madsim::Config::default());
    let api = PausedAfterEachProbe::default();
    let seen = api.clone();
    let started = rt.block_on(async move {
        let opts = WatcherOptions {
            probe_interval: Duration::from_secs(1),
            request_timeout: REQUEST_TIMEOUT,
            seed: Some(4),
            ..WatcherOptions::default()
        };
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
        "a stream whose probes were all answered was given up"
    );
}
