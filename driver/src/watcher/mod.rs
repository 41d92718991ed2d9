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
//!   decrease, except at a `Reset`: when etcd was wiped, restored from an
//!   older snapshot or replaced by another cluster, the watcher first says
//!   so (`Reset`, with `RevisionWentBack`, `HistoryDiverged` or
//!   `ClusterChanged` and the new revision), then emits the difference at
//!   etcd's new revision (which may be lower than every one before), then
//!   `Resynced` with the same reason. A consumer that stores the last
//!   revision replaces it with the `Reset`'s.
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

mod events;
mod options;
mod task;

pub use events::{DecodeError, HostEvent, HostRecord};
pub use options::{Driving, WatcherOptions};

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use coord_core::watcher::{Consistency, StartPolicy, Watcher, WatcherConfig};
use coord_core::Key;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, oneshot, watch};

use crate::error::Error;
use crate::etcd::EtcdApi;
use crate::metadata::HostMetadata;
use crate::runtime::clock::Clock;
use crate::runtime::runner::run;
use crate::runtime::shared_loop::SharedLoop;
use crate::runtime::status::ViewStatus;

use task::{lock, SharedView, WatcherAdapter};

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
    /// The loop, under [`Driving::Adaptive`]: run by a task of its own,
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
        let adapter = WatcherAdapter::new(
            events_tx,
            buffer,
            Arc::clone(&view),
            ready_tx,
            running_tx,
            status_tx,
            clock,
        );
        let span = tracing::info_span!("watcher", prefix = %opts.prefix);
        let looping =
            tracing::Instrument::instrument(run(client, machine, adapter, clock, close_rx), span);
        let (mut inline, shared) = match opts.driving {
            Driving::Adaptive => {
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
    /// ready. Under [`Driving::Adaptive`], while it waits it runs the
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
    /// does, except that under [`Driving::Adaptive`] the consumer's turn
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
