//! A watcher's loop adapter: the core watcher's events turned into the
//! consumer's events and the shared view, with backpressure while the
//! consumer is behind.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use coord_core::watcher::{Event, Input, Watcher};
use coord_core::{AttemptFailure, Failure, Instant};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, warn};

use super::events::{HostEvent, HostRecord};
use crate::error::Error;
use crate::runtime::clock::Clock;
use crate::runtime::runner::Adapter;
use crate::runtime::status::ViewStatus;

/// The hosts as the watcher's loop last saw them, shared with the handle.
/// Hashed: the loop looks a host up for every event, and `view()`, far
/// rarer, sorts.
pub(super) type SharedView<M> = Arc<Mutex<HashMap<String, HostRecord<M>>>>;

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The watcher loop's side of the handle: the events not yet taken by the
/// consumer, the view, and the answer `new` waits for.
pub(super) struct WatcherAdapter<M> {
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

impl<M> WatcherAdapter<M> {
    /// An adapter that hands events to `events`, at most `buffer` waiting
    /// before etcd's streams stop being read, keeps `view`, answers
    /// `ready` once the first snapshot is in (or failed), and publishes
    /// whether the loop runs and the view's status.
    pub(super) fn new(
        events: mpsc::Sender<HostEvent<M>>,
        buffer: usize,
        view: SharedView<M>,
        ready: oneshot::Sender<Result<(), Error>>,
        running: watch::Sender<bool>,
        status: watch::Sender<ViewStatus>,
        clock: Clock,
    ) -> Self {
        WatcherAdapter {
            events,
            outbox: VecDeque::new(),
            buffer,
            view,
            ready: Some(ready),
            running,
            status,
            clock,
        }
    }

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

impl<M: DeserializeOwned + Clone + Send + 'static> Adapter<Watcher> for WatcherAdapter<M> {
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
            Event::Reset { reason, revision } => {
                warn!(
                    ?reason,
                    revision = revision.0,
                    "etcd's history started over"
                );
                HostEvent::Reset { reason, revision }
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
            HostEvent::Reset { revision, .. } => ("reset", Some(revision.0)),
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
