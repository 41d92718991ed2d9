//! `HostWatcher`: the hosts under a prefix, as a stream of events and a
//! view, kept converging to etcd's truth by the core [`Watcher`].
//!
//! Slow consumers: the event buffer is bounded (default 32, as go-coord).
//! When it is full the watcher stops reading the etcd stream (backpressure
//! through HTTP/2 flow control) instead of dropping anything. A consumer so
//! slow that etcd compacts past its position gets a re-list: the
//! difference as `Down`/`Up`/`Updated`, then `Resynced`. No event is ever
//! dropped and the view is always etcd's truth as of the newest revision
//! processed (it may run ahead of the events not yet taken).
//!
//! # Contract
//!
//! - `new` lists the prefix: its hosts come first as `Up` events, then
//!   `Synced`. It then watches from the listing's revision + 1 (without prev
//!   kv: a deleted host's last-seen record comes from the view).
//!   It fails fast (`Error::Unreachable`, ...) unless `retry_first_snapshot`.
//! - A put of a new host is `Up`. A put that changes a host's value or lease is
//!   `Updated`, with the previous record. An identical re-put is nothing. A
//!   delete is `Down`, carrying the last-seen metadata.
//! - Every event carries the etcd revision it reflects; revisions never
//!   decrease, except after etcd was restored or wiped: the re-list's
//!   difference then carries etcd's new, lower revisions and is followed by
//!   `Resynced` (`RevisionWentBack`, `HistoryDiverged` or `ClusterChanged`).
//!   Replaying the events from empty always gives the view: no `Up` for a
//!   host already up, no `Down` for one that is not.
//! - A broken stream resumes from the last revision seen + 1 with backoff,
//!   which includes a silent stream: a stream quiet for `probe_interval`
//!   (10 s) is probed with a progress request and replaced if the answer does
//!   not come within the request timeout. If that revision is compacted, the
//!   watcher lists the prefix again and emits the difference: `Down` for hosts
//!   gone, `Up` for new ones, `Updated` for changed ones, then `Resynced`.
//! - **Slow consumers**: the buffer holds `buffer` events (default 32, as
//!   go-coord). When it is full the watcher stops reading etcd's stream
//!   (backpressure) instead of dropping anything. A consumer so slow that etcd
//!   compacts past it gets the re-list above. `view()` is always etcd's truth
//!   as of the newest revision processed.
//! - Metadata that does not decode (another agent wrote something else) still
//!   produces the event: `record.meta` is `Err(DecodeError)` and `record.raw`
//!   holds the bytes. Keys under the prefix that are not valid host ids
//!   (nested paths, empty tail) are ignored, with a debug trace.
//! - `close()` (idempotent) or a `closer()` token from anywhere ends the
//!   stream; `wait()` waits for the end; dropping the watcher stops it.
//!   Metadata of your own type: `HostWatcher<MyType>`.
//! - **Where the loop runs** (`driving`): by default inside the consumer's
//!   `next()` while it waits there and on a task of its own otherwise, so
//!   the view, `status()` and retries go on whatever the consumer does, and
//!   a consumer waiting for events takes them without a hand-over between
//!   tasks (await `next()` on the runtime the watcher was made on).
//!   [`Driving::OwnTask`] always runs it on its own task (`next()` may then be
//!   awaited anywhere, at a wake per event). [`Driving::InNext`] runs it only
//!   inside the consumer's own `next()` (and `close()`, `wait()`): the
//!   cheapest per event, but nothing happens between calls. For a consumer
//!   that awaits `next()` in a loop of its own.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use coord_core::kv::KeyValue;
use coord_core::watcher::{
    Consistency, Event, Input, ResyncReason, StartPolicy, Watcher, WatcherConfig,
};
use coord_core::{AttemptFailure, BackoffConfig, Failure, Instant, Key, LeaseId, Revision};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, warn};

use crate::api::EtcdApi;
use crate::clock::Clock;
use crate::error::Error;
use crate::liveness::DEFAULT_PREFIX;
use crate::metadata::HostMetadata;
use crate::runner::{run, Host};
use crate::shared_loop::SharedLoop;
use crate::status::ViewStatus;

/// Options of [`HostWatcher::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatcherOptions {
    /// The prefix watched. Default `/coord/hosts/`.
    pub prefix: String,
    /// A host id never reported (typically this host's own). go-coord's
    /// `IncludeSelf = false`.
    pub exclude_host: Option<String>,
    /// Read the snapshot serializably (from any member, maybe stale; the
    /// watch catches up). Default false: linearizable.
    pub serializable: bool,
    /// Deadline of each request. Default 5 s.
    pub request_timeout: Duration,
    /// A stream quiet this long is probed with a progress request; no
    /// answer within the request timeout means it is broken. Default 10 s.
    pub probe_interval: Duration,
    /// Pacing of retries.
    pub backoff: BackoffConfig,
    /// Seed of the retry jitter. Default: from the prefix and the time.
    pub seed: Option<u64>,
    /// Events buffered for the consumer. Default 32.
    pub buffer: usize,
    /// Keep retrying a failing first snapshot in the background instead of
    /// failing `new`. Default false.
    pub retry_first_snapshot: bool,
    /// Keys per page of a listing: every listing is read in pages at one
    /// revision, so no prefix is too large for one response. Default 1,000
    /// (halved for a page too large to receive).
    pub page_size: u32,
    /// Where the watcher's loop runs. Default [`Driving::Background`].
    pub driving: Driving,
}

/// Builder-style setters: the struct is `#[non_exhaustive]`, so that a
/// new option is not a breaking change; start from `WatcherOptions::default()`
/// (or its constructor) and set what differs.
impl WatcherOptions {
    /// These options with [`prefix`](Self::prefix) set.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
    /// These options with [`exclude_host`](Self::exclude_host) set.
    pub fn with_exclude_host(mut self, exclude_host: impl Into<String>) -> Self {
        self.exclude_host = Some(exclude_host.into());
        self
    }
    /// These options with [`serializable`](Self::serializable) set.
    pub fn with_serializable(mut self, serializable: bool) -> Self {
        self.serializable = serializable;
        self
    }
    /// These options with [`request_timeout`](Self::request_timeout) set.
    pub fn with_request_timeout(mut self, request_timeout: Duration) -> Self {
        self.request_timeout = request_timeout;
        self
    }
    /// These options with [`probe_interval`](Self::probe_interval) set.
    pub fn with_probe_interval(mut self, probe_interval: Duration) -> Self {
        self.probe_interval = probe_interval;
        self
    }
    /// These options with [`backoff`](Self::backoff) set.
    pub fn with_backoff(mut self, backoff: BackoffConfig) -> Self {
        self.backoff = backoff;
        self
    }
    /// These options with [`seed`](Self::seed) set.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }
    /// These options with [`buffer`](Self::buffer) set.
    pub fn with_buffer(mut self, buffer: usize) -> Self {
        self.buffer = buffer;
        self
    }
    /// These options with [`retry_first_snapshot`](Self::retry_first_snapshot) set.
    pub fn with_retry_first_snapshot(mut self, retry_first_snapshot: bool) -> Self {
        self.retry_first_snapshot = retry_first_snapshot;
        self
    }
    /// These options with [`page_size`](Self::page_size) set.
    pub fn with_page_size(mut self, page_size: u32) -> Self {
        self.page_size = page_size;
        self
    }
    /// These options with [`driving`](Self::driving) set.
    pub fn with_driving(mut self, driving: Driving) -> Self {
        self.driving = driving;
        self
    }
}

/// Where a [`HostWatcher`]'s loop (reading etcd, retrying, keeping the
/// view) runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Driving {
    /// Whatever the consumer does: the view, `status()` and retries go on
    /// (until `buffer` events wait untaken, when etcd's stream is no
    /// longer read). While the consumer waits in `next()` (on a Tokio
    /// runtime), the loop runs in that call, so an event need not cross
    /// from another task; at any other time it runs on a task of its own
    /// (and so does it when a wake finds the last one not yet acted on: a
    /// `next()` kept but not polled, held across other awaits).
    #[default]
    Background,
    /// On a task of its own, always: `next()` only takes what that task
    /// handed over, so it may be awaited anywhere (another runtime, another
    /// executor). Each event crosses from that task to the consumer's,
    /// which costs a wake per event that [`Driving::Background`] mostly
    /// saves.
    OwnTask,
    /// Inside the consumer's own calls: `next()` (and `close()`, `wait()`)
    /// run the loop until an event is ready, so nothing moves between
    /// tasks and an event costs less CPU. Between calls nothing happens:
    /// etcd's stream is not read, retries and stream probes wait, and
    /// `view()` and `status()` stay as of the last call. For a consumer
    /// that awaits `next()` in a loop of its own.
    InNext,
}

impl Default for WatcherOptions {
    fn default() -> Self {
        WatcherOptions {
            prefix: DEFAULT_PREFIX.to_string(),
            exclude_host: None,
            serializable: false,
            request_timeout: Duration::from_secs(5),
            probe_interval: Duration::from_secs(10),
            backoff: BackoffConfig::default(),
            seed: None,
            buffer: 32,
            retry_first_snapshot: false,
            page_size: coord_core::mirror::DEFAULT_PAGE_SIZE,
            driving: Driving::Background,
        }
    }
}

/// Metadata another agent wrote that does not decode as the expected type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metadata does not decode: {0}")]
pub struct DecodeError(pub String);

/// A host as the watcher last saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct HostRecord<M> {
    /// The decoded metadata, or why it does not decode.
    pub meta: Result<M, DecodeError>,
    /// The raw value.
    pub raw: Vec<u8>,
    /// The lease the key is attached to.
    pub lease: LeaseId,
    /// Revision of the last change of this host the watcher reported (an
    /// identical re-put of the same value and lease is not a change).
    pub mod_revision: Revision,
}

impl<M: DeserializeOwned> HostRecord<M> {
    fn from_kv(kv: KeyValue) -> Self {
        HostRecord {
            meta: serde_json::from_slice(&kv.value).map_err(|e| DecodeError(e.to_string())),
            raw: kv.value,
            lease: kv.lease,
            mod_revision: kv.mod_revision,
        }
    }

    /// The record of `kv`: `known` (the view's record of the same host)
    /// when it was made from that very kv, so a value is decoded once
    /// however many events carry it; else decoded afresh.
    fn reuse_or_decode(known: Option<Self>, kv: KeyValue) -> Self {
        match known {
            Some(r)
                if r.mod_revision == kv.mod_revision
                    && r.lease == kv.lease
                    && r.raw == kv.value =>
            {
                r
            }
            _ => Self::from_kv(kv),
        }
    }
}

/// A change of the hosts under the prefix. `revision` is the etcd revision
/// the change reflects; revisions never decrease along the stream but
/// after etcd was restored or wiped (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum HostEvent<M> {
    /// A host appeared (also: each host of the first snapshot).
    Up {
        /// Host id.
        host: String,
        /// What it holds.
        record: HostRecord<M>,
        /// Revision.
        revision: Revision,
    },
    /// A host's metadata or lease changed.
    Updated {
        /// Host id.
        host: String,
        /// What it holds now.
        record: HostRecord<M>,
        /// What it held before.
        previous: HostRecord<M>,
        /// Revision.
        revision: Revision,
    },
    /// A host disappeared.
    Down {
        /// Host id.
        host: String,
        /// What it held when last seen.
        last_seen: HostRecord<M>,
        /// Revision.
        revision: Revision,
    },
    /// The first snapshot is complete (every host up at `revision` has had
    /// its `Up`).
    Synced {
        /// Revision of the snapshot.
        revision: Revision,
    },
    /// The view was rebuilt from a fresh snapshot after the watch lost its
    /// place (compaction), or because etcd was restored, wiped or replaced
    /// (the reason says which); the differences came just before.
    Resynced {
        /// Why.
        reason: ResyncReason,
        /// Revision of the snapshot.
        revision: Revision,
    },
    /// Listing or watching failed; the watcher tries again in `retry_in`
    /// (backoff). Until a later event, the view may be stale; `status()`
    /// says since when.
    Retrying {
        /// Failures since the last success.
        attempt: u32,
        /// What failed (`None` never happens for a watcher today).
        failure: Option<AttemptFailure>,
        /// When the next attempt starts, from the failure.
        retry_in: Duration,
    },
}

/// Hosts under a prefix. `next()` yields changes; `view()` the current
/// hosts. Dropping it stops the watcher's loop.
#[derive(Debug)]
pub struct HostWatcher<M = HostMetadata> {
    events: mpsc::Receiver<HostEvent<M>>,
    view: SharedView<M>,
    close: mpsc::UnboundedSender<()>,
    running: watch::Receiver<bool>,
    status: watch::Receiver<ViewStatus>,
    /// The loop, under [`Driving::InNext`] (until it ends).
    inline: tokio::sync::Mutex<Option<Loop>>,
    /// The loop, under [`Driving::Background`]: run by a task of its own,
    /// and by `next()` while it waits.
    shared: Option<Arc<SharedLoop>>,
}

/// A watcher's loop, run by the consumer's calls ([`Driving::InNext`]).
struct Loop(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>);

impl std::fmt::Debug for Loop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Loop")
    }
}

impl<M> HostWatcher<M>
where
    M: DeserializeOwned + Clone + Send + 'static,
{
    /// Lists the prefix (its hosts arrive first as `Up` events, then
    /// `Synced`) and watches it from there. Fails on invalid options, or
    /// (unless `retry_first_snapshot`) when the first listing fails, e.g.
    /// `Error::Unreachable`.
    ///
    /// Cancel safety: cancel-safe: nothing is written, and the watcher's loop
    /// stops with the dropped future.
    pub async fn new<A: EtcdApi>(client: A, opts: WatcherOptions) -> Result<Self, Error> {
        if opts.prefix.is_empty() || opts.prefix.chars().any(char::is_control) {
            return Err(Error::InvalidPrefix(opts.prefix));
        }
        let config = WatcherConfig {
            prefix: Key(opts.prefix.clone().into_bytes()),
            exclude_host: opts.exclude_host.clone(),
            consistency: if opts.serializable {
                Consistency::Serializable
            } else {
                Consistency::Linearizable
            },
            request_timeout: opts.request_timeout,
            probe_interval: opts.probe_interval,
            backoff: opts.backoff.clone(),
            seed: opts
                .seed
                .unwrap_or_else(|| crate::liveness::default_seed(&opts.prefix)),
            start: if opts.retry_first_snapshot {
                StartPolicy::Retry
            } else {
                StartPolicy::FailFast
            },
            page_size: opts.page_size,
        };
        let machine = Watcher::new(config).map_err(Error::InvalidWatcherOptions)?;
        let buffer = opts.buffer.max(1);
        let (events_tx, events) = mpsc::channel(buffer);
        let (close, close_rx) = mpsc::unbounded_channel();
        let (running_tx, running) = watch::channel(true);
        let (status_tx, status) = watch::channel(ViewStatus::Starting);
        let (ready_tx, ready) = oneshot::channel();
        let clock = Clock::start();
        let view = Arc::new(Mutex::new(HashMap::new()));
        let host = WatcherHost {
            events: events_tx,
            outbox: VecDeque::new(),
            buffer,
            view: Arc::clone(&view),
            ready: Some(ready_tx),
            running: running_tx,
            status: status_tx,
            clock,
        };
        let span = tracing::info_span!("watcher", prefix = %opts.prefix);
        let looping =
            tracing::Instrument::instrument(run(client, machine, host, clock, close_rx), span);
        let (mut inline, shared) = match opts.driving {
            Driving::Background => {
                let shared = SharedLoop::new(Box::pin(looping));
                tokio::spawn(Arc::clone(&shared).background());
                (None, Some(shared))
            }
            Driving::OwnTask => {
                tokio::spawn(looping);
                (None, None)
            }
            Driving::InNext => (Some(Loop(Box::pin(looping))), None),
        };
        let mut ready = ready;
        let started = if opts.retry_first_snapshot {
            None
        } else {
            Some(match &mut inline {
                None => ready.await.map_err(drop),
                // Run the loop until the first snapshot is in.
                Some(Loop(looping)) => tokio::select! {
                    r = &mut ready => r.map_err(drop),
                    () = looping.as_mut() => {
                        inline = None;
                        ready.try_recv().map_err(drop)
                    }
                },
            })
        };
        let handle = HostWatcher {
            events,
            view,
            close,
            running,
            status,
            inline: tokio::sync::Mutex::new(inline),
            shared,
        };
        match started {
            None | Some(Ok(Ok(()))) => Ok(handle),
            Some(Ok(Err(e))) => Err(e),
            Some(Err(_)) => Err(Error::TaskGone),
        }
    }

    /// The next change, in order; `None` once the watcher is closed and the
    /// events already buffered (at most `buffer`) have been taken. Changes
    /// not yet buffered at close are not delivered. Under
    /// [`Driving::InNext`] this runs the watcher's loop until an event is
    /// ready. Under [`Driving::Background`], while it waits it runs the
    /// loop on the calling task (its own task runs it whenever no call
    /// waits), so await it on the runtime the watcher was created on
    /// (outside any Tokio runtime it only waits for the loop's task; from
    /// another runtime, choose [`Driving::OwnTask`]).
    ///
    /// Cancel safety: cancel-safe. An event leaves the buffer only when it
    /// is returned, so a `next()` dropped in a `select!` loses nothing.
    /// The watcher is also a [`Stream`](futures_core::Stream) of the same
    /// events.
    pub async fn next(&mut self) -> Option<HostEvent<M>> {
        let HostWatcher {
            events,
            inline,
            shared,
            ..
        } = self;
        if let Some(shared) = shared {
            if tokio::runtime::Handle::try_current().is_err() {
                // Not on a runtime: the loop's own task runs it.
                return events.recv().await;
            }
            let turn = shared.turn();
            return std::future::poll_fn(|cx| {
                if let Poll::Ready(event) = events.poll_recv(cx) {
                    return Poll::Ready(event);
                }
                // Run the loop meanwhile (once it ended, what it buffered
                // is still taken, then the channel is closed).
                let _ = turn.poll(cx);
                events.poll_recv(cx)
            })
            .await;
        }
        let inline = inline.get_mut();
        let Some(Loop(looping)) = inline else {
            return events.recv().await;
        };
        tokio::select! {
            biased;
            event = events.recv() => event,
            () = looping.as_mut() => {
                // The loop ended (closed): what it buffered is still taken.
                *inline = None;
                events.recv().await
            }
        }
    }

    /// One poll of [`Stream::poll_next`]: what one poll of [`next`](Self::next)
    /// does, except that under [`Driving::Background`] the consumer's turn
    /// at the loop lasts one poll (between polls the loop's own task runs
    /// it), since a stream is not told when its consumer stops waiting.
    fn poll_event(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Option<HostEvent<M>>> {
        let HostWatcher {
            events,
            inline,
            shared,
            ..
        } = self;
        if let Poll::Ready(event) = events.poll_recv(cx) {
            return Poll::Ready(event);
        }
        if let Some(shared) = shared {
            if tokio::runtime::Handle::try_current().is_ok() {
                let turn = shared.turn();
                let _ = turn.poll(cx);
                return events.poll_recv(cx);
            }
            return Poll::Pending;
        }
        let inline = inline.get_mut();
        let Some(Loop(looping)) = inline else {
            return Poll::Pending;
        };
        if looping.as_mut().poll(cx).is_ready() {
            // The loop ended (closed): what it buffered is still taken.
            *inline = None;
            return events.poll_recv(cx);
        }
        Poll::Pending
    }

    /// Under [`Driving::InNext`], runs the loop to its end (after a
    /// close): events it emits meanwhile are buffered up to `buffer`, then
    /// dropped, as the consumer is not taking them.
    async fn run_inline_to_end(&self) {
        let mut inline = self.inline.lock().await;
        if let Some(Loop(looping)) = inline.as_mut() {
            looping.as_mut().await;
            *inline = None;
        }
    }

    /// The live hosts as of the newest revision processed.
    pub fn view(&self) -> BTreeMap<String, HostRecord<M>> {
        lock(&self.view)
            .iter()
            .map(|(host, record)| (host.clone(), record.clone()))
            .collect()
    }

    /// What the watcher is doing: watching (the view is current), re-listing,
    /// or failing since some time (the view may be stale; retries go on).
    /// Each failure is also reported as a [`HostEvent::Retrying`].
    pub fn status(&self) -> watch::Receiver<ViewStatus> {
        self.status.clone()
    }

    /// Stops watching. Idempotent; returns once the watcher's loop ended.
    ///
    /// Cancel safety: cancel-safe. Once polled, the close goes on in the
    /// background.
    pub async fn close(&self) {
        let _ = self.close.send(());
        self.wait().await;
    }

    /// A cloneable token that closes this watcher from anywhere (another
    /// task, a shutdown handler). `next()` then returns `None`.
    pub fn closer(&self) -> WatcherCloser {
        WatcherCloser(self.close.clone())
    }

    /// Waits until the watcher has stopped (closed, or failed to start).
    /// Under [`Driving::InNext`] this runs the loop meanwhile.
    ///
    /// Cancel safety: cancel-safe (it only waits; under [`Driving::InNext`] the
    /// loop resumes at the next call).
    pub async fn wait(&self) {
        self.run_inline_to_end().await;
        let mut running = self.running.clone();
        let _ = running.wait_for(|r| !*r).await;
    }
}

/// The same events as [`HostWatcher::next`], for `StreamExt`, `StreamMap`
/// and tokio-stream. Polling it drives the watcher as `next()` does (under
/// [`Driving::InNext`], nothing happens between polls). Ends (`None`) once
/// the watcher is closed and its buffered events are taken.
impl<M> futures_core::Stream for HostWatcher<M>
where
    M: DeserializeOwned + Clone + Send + 'static,
{
    type Item = HostEvent<M>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<HostEvent<M>>> {
        self.get_mut().poll_event(cx)
    }
}

/// Closes a [`HostWatcher`] from anywhere; see [`HostWatcher::closer`].
#[derive(Debug, Clone)]
pub struct WatcherCloser(mpsc::UnboundedSender<()>);

impl WatcherCloser {
    /// Asks the watcher to close (idempotent; does not wait).
    pub fn close(&self) {
        let _ = self.0.send(());
    }
}

/// The hosts as the watcher's loop last saw them, shared with the handle.
/// Hashed: the loop looks a host up for every event, and `view()`, far
/// rarer, sorts.
type SharedView<M> = Arc<Mutex<HashMap<String, HostRecord<M>>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The watcher loop's side of the handle: the events not yet taken by the
/// consumer, the view, and the answer `new` waits for.
struct WatcherHost<M> {
    events: mpsc::Sender<HostEvent<M>>,
    /// Events emitted but not yet handed to the consumer; while `buffer` of
    /// them wait, etcd's streams are not read (backpressure).
    outbox: VecDeque<HostEvent<M>>,
    buffer: usize,
    view: SharedView<M>,
    ready: Option<oneshot::Sender<Result<(), Error>>>,
    running: watch::Sender<bool>,
    status: watch::Sender<ViewStatus>,
    clock: Clock,
}

impl<M> WatcherHost<M> {
    /// Puts `host`'s record into the view; returns the one it replaces.
    /// A known host's entry is replaced in place (no copy of its id).
    fn keep(&self, host: &str, record: HostRecord<M>) -> Option<HostRecord<M>> {
        let mut view = lock(&self.view);
        match view.get_mut(host) {
            Some(known) => Some(std::mem::replace(known, record)),
            None => view.insert(host.to_owned(), record),
        }
    }

    /// Hands the consumer, in order, as many waiting events as its buffer
    /// takes now; the rest wait. A consumer gone takes nothing more.
    fn flush(&mut self) {
        while let Some(event) = self.outbox.pop_front() {
            match self.events.try_send(event) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(event)) => {
                    self.outbox.push_front(event);
                    return;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    self.outbox.clear();
                    return;
                }
            }
        }
    }
}

impl<M: DeserializeOwned + Clone + Send + 'static> Host<Watcher> for WatcherHost<M> {
    type Request = ();

    fn start(&mut self, now: Instant, machine: &mut Watcher) {
        if let Err(e) = machine.handle(now, Input::Start) {
            warn!(error = %e, "watcher refused to start");
        }
    }

    fn request(&mut self, now: Instant, machine: &mut Watcher, (): ()) {
        if let Err(e) = machine.handle(now, Input::Close) {
            warn!(error = %e, "watcher refused to close");
        }
    }

    fn publish(&mut self, now: Instant, event: Event) {
        let out = match event {
            Event::Up { host, kv, revision } => {
                let record = HostRecord::from_kv(kv);
                self.keep(&host, record.clone());
                HostEvent::Up {
                    host,
                    record,
                    revision,
                }
            }
            Event::Updated {
                host,
                kv,
                previous,
                revision,
            } => {
                let record = HostRecord::from_kv(kv);
                let known = self.keep(&host, record.clone());
                HostEvent::Updated {
                    host,
                    record,
                    previous: HostRecord::reuse_or_decode(known, previous),
                    revision,
                }
            }
            Event::Down {
                host,
                last_seen,
                revision,
            } => {
                let known = lock(&self.view).remove(&host);
                HostEvent::Down {
                    host,
                    last_seen: HostRecord::reuse_or_decode(known, last_seen),
                    revision,
                }
            }
            Event::Synced { revision } => {
                if let Some(ready) = self.ready.take() {
                    let _ = ready.send(Ok(()));
                }
                HostEvent::Synced { revision }
            }
            Event::Resynced { reason, revision } => {
                debug!(?reason, revision = revision.0, "watcher resynced");
                HostEvent::Resynced { reason, revision }
            }
            Event::Ignored { key, reason } => {
                debug!(%key, ?reason, "ignoring a key under the prefix");
                return;
            }
            Event::Retrying(retry) => {
                debug!(attempt = retry.attempt, failure = ?retry.failure, "watcher retrying");
                HostEvent::Retrying {
                    attempt: retry.attempt,
                    failure: retry.failure,
                    retry_in: Duration::from_millis(
                        retry.next_at.as_millis().saturating_sub(now.as_millis()),
                    ),
                }
            }
            Event::StartFailed { reason } => {
                let err = match reason {
                    AttemptFailure::Timeout => Error::Unreachable(crate::Cause::msg(
                        "no answer before the request deadline",
                    )),
                    AttemptFailure::Etcd(Failure::Unavailable(m) | Failure::Refused(m)) => {
                        Error::Unreachable(crate::Cause::msg(m))
                    }
                    AttemptFailure::Etcd(other) => Error::Watch(other),
                    AttemptFailure::LeaseGone => Error::Watch(Failure::LeaseNotFound),
                    other => Error::Request(other),
                };
                if let Some(ready) = self.ready.take() {
                    let _ = ready.send(Err(err));
                }
                return;
            }
            Event::Closed => return,
        };
        let (kind, revision) = match &out {
            HostEvent::Up { revision, .. } => ("up", Some(revision.0)),
            HostEvent::Updated { revision, .. } => ("updated", Some(revision.0)),
            HostEvent::Down { revision, .. } => ("down", Some(revision.0)),
            HostEvent::Synced { revision } => ("synced", Some(revision.0)),
            HostEvent::Resynced { reason, revision } => {
                crate::telemetry::watcher_resynced(reason);
                ("resynced", Some(revision.0))
            }
            HostEvent::Retrying { .. } => ("retrying", None),
        };
        crate::telemetry::watcher_event(kind, revision);
        // Handed to the consumer once the turn's outputs are drained, after
        // the state they lead to is published (`drained`): a consumer that
        // reads `Retrying` then finds the status `Failing`, never the state
        // from before the event.
        self.outbox.push_back(out);
    }

    fn drained(&mut self, machine: &Watcher) {
        ViewStatus::publish(&self.status, machine.status(), self.clock);
        // Straight to the consumer when it has room: no turn of the run
        // loop per event.
        self.flush();
    }

    fn ended(&mut self, _machine: &Watcher) {
        self.status.send_replace(ViewStatus::Closed);
        self.running.send_replace(false);
    }

    fn room(&self) -> bool {
        self.outbox.len() < self.buffer
    }

    async fn deliver(&mut self) {
        if self.outbox.is_empty() {
            return std::future::pending().await;
        }
        let Ok(permit) = self.events.reserve().await else {
            // The consumer is gone: nobody to watch for.
            self.outbox.clear();
            return;
        };
        match self.outbox.pop_front() {
            Some(event) => permit.send(event),
            None => drop(permit),
        }
        // Then whatever else fits, without waiting.
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(value: &[u8], lease: i64, mod_revision: i64) -> KeyValue {
        KeyValue {
            key: Key(b"/coord/hosts/h".to_vec()),
            value: value.to_vec(),
            create_revision: Revision(1),
            mod_revision: Revision(mod_revision),
            lease: LeaseId(lease),
        }
    }

    #[test]
    fn a_record_is_reused_only_when_made_from_the_same_kv() {
        let record = HostRecord::<serde_json::Value>::from_kv(kv(b"{\"a\":1}", 7, 5));
        assert_eq!(record.meta, Ok(serde_json::json!({"a": 1})));
        // A record that claims to be of this kv but holds another meta:
        // reused as is, so no decoding happened.
        let marked = HostRecord {
            meta: Ok(serde_json::json!("reused")),
            ..record.clone()
        };
        let same = HostRecord::reuse_or_decode(Some(marked.clone()), kv(b"{\"a\":1}", 7, 5));
        assert_eq!(same, marked);
        // Any difference of value, lease or revision decodes afresh.
        for other in [
            kv(b"{\"a\":2}", 7, 5),
            kv(b"{\"a\":1}", 8, 5),
            kv(b"{\"a\":1}", 7, 6),
        ] {
            let fresh = HostRecord::reuse_or_decode(Some(marked.clone()), other.clone());
            assert_eq!(fresh, HostRecord::from_kv(other));
        }
        let unknown = HostRecord::<serde_json::Value>::reuse_or_decode(None, kv(b"oops", 7, 5));
        assert!(unknown.meta.is_err());
        assert_eq!(unknown.raw, b"oops".to_vec());
    }
}
