//! `Watcher`: a view of the hosts under a prefix that converges to etcd's
//! truth, and the stream of changes that explains it.
//!
//! Start: range the prefix, emit a synthetic `Up` per host, then `Synced`,
//! then watch from the range's revision + 1 with prev kv. A put of a new
//! host is `Up`; a put that changes a known host's value or lease is
//! `Updated`; an identical re-put is nothing; a delete of a known host is
//! `Down` with the last-seen kv (from prev kv, else from the view).
//!
//! A broken stream (closed, erroring, or silent: no answer to a progress
//! request within the request timeout) is resumed from the last revision
//! seen + 1, with backoff. A compacted start revision makes the machine
//! range the prefix again and emit the difference against its view (`Down`
//! for hosts gone, `Up` for new ones, `Updated` for changed ones), then
//! `Resynced`, then watch from the new revision + 1. Nothing is lost and
//! nothing repeated: every event applies to the view exactly as emitted,
//! and the revisions of emitted events never decrease (events of one etcd
//! revision, such as a lease revoke deleting several hosts, share it).
//!
//! Keys under the prefix whose tail is not a valid host id (nested paths,
//! empty tail, unsafe characters) are never events: `Ignored` reports them
//! for tracing. The excluded host, if any, never appears.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::backoff::{Backoff, BackoffConfig, BackoffConfigError, FailureClass};
use crate::host_id::validate_host_id;
use crate::ids::{Key, OpId, Revision};
use crate::kv::{KeyValue, WatchEvent};
use crate::outbox::Outbox;
use crate::outcome::{Failure, Outcome};
use crate::time::Instant;

/// How the prefix is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Consistency {
    /// Linearizable (through the leader): never older than a write that
    /// completed before it. Default.
    #[default]
    Linearizable,
    /// Serializable (any member's local state): cheaper, maybe stale; the
    /// watch that follows catches up.
    Serializable,
}

pub use crate::StartPolicy;

/// Configuration of a [`Watcher`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct WatcherConfig {
    /// The prefix watched, e.g. `/coord/hosts/`.
    pub prefix: Key,
    /// A host id never reported (go-coord's `IncludeSelf = false`).
    pub exclude_host: Option<String>,
    /// How the prefix is read.
    pub consistency: Consistency,
    /// Deadline of each request and of each progress request.
    pub request_timeout: Duration,
    /// How long a stream may stay quiet before its liveness is probed with
    /// a progress request.
    pub probe_interval: Duration,
    /// Pacing of retries.
    pub backoff: BackoffConfig,
    /// Seed of the jitter PRNG.
    pub seed: u64,
    /// What a failed first range does.
    pub start: StartPolicy,
}

impl WatcherConfig {
    /// Defaults: linearizable, request timeout 5 s, probe every 10 s,
    /// default backoff, fail-fast start.
    pub fn new(prefix: Key, seed: u64) -> Self {
        WatcherConfig {
            prefix,
            exclude_host: None,
            consistency: Consistency::Linearizable,
            request_timeout: Duration::from_secs(5),
            probe_interval: Duration::from_secs(10),
            backoff: BackoffConfig::default(),
            seed,
            start: StartPolicy::FailFast,
        }
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.prefix.0.is_empty() {
            return Err(ConfigError::EmptyPrefix);
        }
        if self.request_timeout < Duration::from_millis(10)
            || self.request_timeout > Duration::from_secs(300)
        {
            return Err(ConfigError::RequestTimeoutOutOfRange(self.request_timeout));
        }
        if self.probe_interval < Duration::from_millis(10)
            || self.probe_interval > Duration::from_secs(3600)
        {
            return Err(ConfigError::ProbeIntervalOutOfRange(self.probe_interval));
        }
        self.backoff.validate()?;
        Ok(())
    }
}

/// Why a [`WatcherConfig`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The prefix is empty (it would watch the whole key space).
    #[error("the watched prefix is empty")]
    EmptyPrefix,
    /// Request timeout must be between 10 ms and 5 minutes.
    #[error("request timeout must be between 10 ms and 5 min, got {0:?}")]
    RequestTimeoutOutOfRange(Duration),
    /// Probe interval must be between 10 ms and one hour.
    #[error("probe interval must be between 10 ms and 1 h, got {0:?}")]
    ProbeIntervalOutOfRange(Duration),
    /// Invalid backoff.
    #[error(transparent)]
    Backoff(#[from] BackoffConfigError),
}

/// Misuse of the machine's API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    /// `Start` twice.
    #[error("watcher already started")]
    AlreadyStarted,
    /// `Start` after close.
    #[error("watcher is closed")]
    Closed,
}

/// A range's result.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Listing {
    /// Every kv under the prefix.
    pub kvs: Vec<KeyValue>,
    /// The revision read at.
    pub revision: Revision,
}

/// What kind of message a watch stream delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum MessageKind {
    /// The watch was created (no events).
    Created,
    /// Events.
    Events,
    /// A progress notification: every event up to `revision` was sent.
    Progress,
}

/// Everything that can happen to the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Input {
    /// Begin.
    Start,
    /// Stop watching; idempotent.
    Close,
    /// `poll_timeout()` passed.
    Timeout,
    /// A `Range` ended.
    Listed {
        /// The command's op.
        op: OpId,
        /// How.
        outcome: Outcome<Listing>,
    },
    /// A message on the watch stream opened by `stream`.
    WatchMessage {
        /// The `Watch` op.
        stream: OpId,
        /// What kind.
        kind: MessageKind,
        /// Events (empty for created and progress).
        events: Vec<WatchEvent>,
        /// The response header's revision.
        revision: Revision,
    },
    /// The watch stream failed to open, broke, ended, or was cancelled by
    /// etcd; `Failure::Compacted` when its start revision is compacted.
    WatchClosed {
        /// The `Watch` op.
        stream: OpId,
        /// Why.
        failure: Failure,
    },
}

/// Work for the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Range every key under `prefix`; complete with `Listed`.
    Range {
        /// Completion tag.
        op: OpId,
        /// The prefix.
        prefix: Key,
        /// Read consistency.
        consistency: Consistency,
    },
    /// Watch `prefix` from `start_revision` with prev kv; messages come as
    /// `WatchMessage{stream: op}`, the end as `WatchClosed{stream: op}`.
    Watch {
        /// Stream tag.
        op: OpId,
        /// The prefix.
        prefix: Key,
        /// First revision wanted.
        start_revision: Revision,
    },
    /// Ask the stream for a progress notification (a liveness probe).
    RequestProgress {
        /// The stream.
        stream: OpId,
    },
    /// Cancel and drop the stream; later messages from it are ignored.
    CancelWatch {
        /// The stream.
        stream: OpId,
    },
    /// The request passed its deadline: drop it.
    Abandon {
        /// The request.
        op: OpId,
    },
}

/// Why the view was rebuilt from a fresh range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResyncReason {
    /// The watch's start revision was compacted.
    Compacted {
        /// etcd's compaction revision (0 if it did not say).
        compact_revision: Revision,
    },
}

/// Why a key under the prefix is not reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IgnoreReason {
    /// The tail after the prefix is not a valid host id.
    NotAHostId,
}

/// News for the user. Every `Up`, `Updated` and `Down` applies to the view
/// exactly as stated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A host not in the view appeared.
    Up {
        /// Host id.
        host: String,
        /// Its kv.
        kv: KeyValue,
        /// Revision this reflects.
        revision: Revision,
    },
    /// A host in the view changed value or lease.
    Updated {
        /// Host id.
        host: String,
        /// The new kv.
        kv: KeyValue,
        /// The kv before.
        previous: KeyValue,
        /// Revision this reflects.
        revision: Revision,
    },
    /// A host in the view disappeared.
    Down {
        /// Host id.
        host: String,
        /// Its last-seen kv.
        last_seen: KeyValue,
        /// Revision this reflects.
        revision: Revision,
    },
    /// The initial snapshot is complete (after its `Up`s).
    Synced {
        /// The snapshot's revision.
        revision: Revision,
    },
    /// The view was rebuilt from a fresh range (after the differences).
    Resynced {
        /// Why.
        reason: ResyncReason,
        /// The range's revision.
        revision: Revision,
    },
    /// A key under the prefix that is not reported (for tracing).
    Ignored {
        /// The key.
        key: Key,
        /// Why.
        reason: IgnoreReason,
    },
    /// The first range failed under `StartPolicy::FailFast`; `Closed`
    /// follows.
    StartFailed {
        /// Why.
        failure: Option<Failure>,
    },
    /// Terminal.
    Closed,
}

/// What `poll` yields.
pub type Output = crate::outbox::Output<Command, Event>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListReason {
    Initial,
    Resync(Revision),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// Quiet; probe at `at` unless a message comes first.
    Quiet { at: Instant },
    /// A progress request (or the watch's creation) awaits an answer by
    /// `deadline`.
    Awaiting { deadline: Instant },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Resume,
    List(ListReason),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Idle,
    Listing {
        op: OpId,
        deadline: Instant,
        reason: ListReason,
    },
    Watching {
        stream: OpId,
        probe: Probe,
    },
    Waiting {
        next_at: Instant,
        then: Then,
    },
    Closed,
}

/// The watcher state machine. See the module docs.
#[derive(Debug)]
pub struct Watcher {
    config: WatcherConfig,
    state: State,
    backoff: Backoff,
    out: Outbox<Command, Event>,
    view: BTreeMap<String, KeyValue>,
    /// Every change up to here is reflected in the view.
    revision: Revision,
}

impl Watcher {
    /// A machine for `config`. Nothing happens until `Input::Start`.
    pub fn new(config: WatcherConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let backoff = Backoff::new(config.backoff.clone(), config.seed);
        Ok(Watcher {
            config,
            state: State::Idle,
            backoff,
            out: Outbox::new(),
            view: BTreeMap::new(),
            revision: Revision(0),
        })
    }

    /// The live hosts, exactly as the events so far describe them (the kv
    /// of each is the one its last `Up` or `Updated` carried).
    pub fn view(&self) -> &BTreeMap<String, KeyValue> {
        &self.view
    }

    /// Every change up to this revision is reflected in the view.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// True once closed (terminal).
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// True while a watch stream is open and the view is current.
    pub fn is_watching(&self) -> bool {
        matches!(self.state, State::Watching { .. })
    }

    /// The next command or event.
    #[must_use]
    pub fn poll(&mut self) -> Option<Output> {
        self.out.pop()
    }

    /// The next deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.state {
            State::Idle | State::Closed => None,
            State::Listing { deadline, .. } => Some(*deadline),
            State::Watching { probe, .. } => Some(match probe {
                Probe::Quiet { at } => *at,
                Probe::Awaiting { deadline } => *deadline,
            }),
            State::Waiting { next_at, .. } => Some(*next_at),
        }
    }

    /// Feeds one input.
    pub fn handle(&mut self, now: Instant, input: Input) -> Result<(), UsageError> {
        match input {
            Input::Start => match self.state {
                State::Idle => {
                    self.list(now, ListReason::Initial);
                    Ok(())
                }
                State::Closed => Err(UsageError::Closed),
                _ => Err(UsageError::AlreadyStarted),
            },
            Input::Close => {
                self.close();
                Ok(())
            }
            Input::Timeout => {
                self.on_timeout(now);
                Ok(())
            }
            Input::Listed { op, outcome } => {
                self.on_listed(now, op, outcome);
                Ok(())
            }
            Input::WatchMessage {
                stream,
                kind,
                events,
                revision,
            } => {
                self.on_message(now, stream, kind, events, revision);
                Ok(())
            }
            Input::WatchClosed { stream, failure } => {
                self.on_closed(now, stream, failure);
                Ok(())
            }
        }
    }

    fn list(&mut self, now: Instant, reason: ListReason) {
        let op = self.out.op();
        self.out.cmd(Command::Range {
            op,
            prefix: self.config.prefix.clone(),
            consistency: self.config.consistency,
        });
        self.state = State::Listing {
            op,
            deadline: now + self.config.request_timeout,
            reason,
        };
    }

    fn watch(&mut self, now: Instant) {
        let op = self.out.op();
        self.out.cmd(Command::Watch {
            op,
            prefix: self.config.prefix.clone(),
            start_revision: Revision(self.revision.0.saturating_add(1)),
        });
        // The creation must be confirmed within a request timeout.
        self.state = State::Watching {
            stream: op,
            probe: Probe::Awaiting {
                deadline: now + self.config.request_timeout,
            },
        };
    }

    fn retry(&mut self, now: Instant, class: FailureClass, then: Then) {
        let next_at = now + self.backoff.next_delay(class);
        self.state = State::Waiting { next_at, then };
    }

    fn close(&mut self) {
        match std::mem::replace(&mut self.state, State::Closed) {
            State::Closed => {}
            State::Listing { op, .. } => {
                self.out.cmd(Command::Abandon { op });
                self.out.event(Event::Closed);
            }
            State::Watching { stream, .. } => {
                self.out.cmd(Command::CancelWatch { stream });
                self.out.event(Event::Closed);
            }
            State::Idle | State::Waiting { .. } => self.out.event(Event::Closed),
        }
    }

    fn on_timeout(&mut self, now: Instant) {
        match std::mem::replace(&mut self.state, State::Closed) {
            State::Listing {
                op,
                deadline,
                reason,
            } if now >= deadline => {
                self.out.cmd(Command::Abandon { op });
                self.list_failed(now, reason, None);
            }
            State::Watching {
                stream,
                probe: Probe::Awaiting { deadline },
            } if now >= deadline => {
                // No creation or progress answer in time: silently broken.
                self.out.cmd(Command::CancelWatch { stream });
                self.retry(now, FailureClass::Slow, Then::Resume);
            }
            State::Watching {
                stream,
                probe: Probe::Quiet { at },
            } if now >= at => {
                self.out.cmd(Command::RequestProgress { stream });
                self.state = State::Watching {
                    stream,
                    probe: Probe::Awaiting {
                        deadline: now + self.config.request_timeout,
                    },
                };
            }
            State::Waiting { next_at, then } if now >= next_at => match then {
                Then::Resume => self.watch(now),
                Then::List(reason) => self.list(now, reason),
            },
            other => self.state = other,
        }
    }

    fn list_failed(&mut self, now: Instant, reason: ListReason, failure: Option<Failure>) {
        if reason == ListReason::Initial && self.config.start == StartPolicy::FailFast {
            self.out.event(Event::StartFailed { failure });
            self.state = State::Closed;
            self.out.event(Event::Closed);
            return;
        }
        let class = failure.as_ref().map_or(FailureClass::Slow, Failure::class);
        self.retry(now, class, Then::List(reason));
    }

    fn on_listed(&mut self, now: Instant, op: OpId, outcome: Outcome<Listing>) {
        let (reason, listing) = match std::mem::replace(&mut self.state, State::Closed) {
            State::Listing {
                op: want, reason, ..
            } if want == op => match outcome {
                Outcome::Ok(listing) => (reason, listing),
                Outcome::Err(f) => return self.list_failed(now, reason, Some(f)),
                Outcome::Unknown => return self.list_failed(now, reason, None),
            },
            other => {
                self.state = other;
                return;
            }
        };
        self.backoff.reset();
        // The fresh truth, keyed by host id.
        let mut fresh: BTreeMap<String, KeyValue> = BTreeMap::new();
        for kv in listing.kvs {
            if let Some(host) = self.host_of(&kv.key) {
                fresh.insert(host, kv);
            }
        }
        // A range never goes back in time for the consumer.
        let revision = listing.revision.max(self.revision);
        let gone: Vec<String> = self
            .view
            .keys()
            .filter(|h| !fresh.contains_key(*h))
            .cloned()
            .collect();
        for host in gone {
            if let Some(last_seen) = self.view.remove(&host) {
                self.out.event(Event::Down {
                    host,
                    last_seen,
                    revision,
                });
            }
        }
        for (host, kv) in fresh {
            self.apply_put(host, kv, revision);
        }
        self.revision = revision;
        match reason {
            ListReason::Initial => self.out.event(Event::Synced { revision }),
            ListReason::Resync(compact_revision) => self.out.event(Event::Resynced {
                reason: ResyncReason::Compacted { compact_revision },
                revision,
            }),
        }
        self.watch(now);
    }

    /// Records `kv` for `host`, emitting `Up` or `Updated`. An identical
    /// value and lease is no change: no event, and the view keeps the kv
    /// last reported, so the view is always exactly the replay of the
    /// events.
    fn apply_put(&mut self, host: String, kv: KeyValue, revision: Revision) {
        match self.view.get(&host) {
            None => {
                self.view.insert(host.clone(), kv.clone());
                self.out.event(Event::Up { host, kv, revision });
            }
            Some(old) if old.value == kv.value && old.lease == kv.lease => {}
            Some(old) => {
                let previous = old.clone();
                self.view.insert(host.clone(), kv.clone());
                self.out.event(Event::Updated {
                    host,
                    kv,
                    previous,
                    revision,
                });
            }
        }
    }

    /// The host id of `key`, if it is one this watcher reports.
    fn host_of(&mut self, key: &Key) -> Option<String> {
        let tail = key.0.strip_prefix(self.config.prefix.0.as_slice())?;
        let host = match std::str::from_utf8(tail) {
            Ok(h) if validate_host_id(h).is_ok() => h.to_string(),
            _ => {
                self.out.event(Event::Ignored {
                    key: key.clone(),
                    reason: IgnoreReason::NotAHostId,
                });
                return None;
            }
        };
        if self.config.exclude_host.as_deref() == Some(host.as_str()) {
            return None;
        }
        Some(host)
    }

    fn on_message(
        &mut self,
        now: Instant,
        stream_op: OpId,
        kind: MessageKind,
        events: Vec<WatchEvent>,
        header: Revision,
    ) {
        let stream = match self.state {
            State::Watching { stream, .. } if stream == stream_op => stream,
            _ => return,
        };
        // Any message proves the stream alive.
        self.state = State::Watching {
            stream,
            probe: Probe::Quiet {
                at: now + self.config.probe_interval,
            },
        };
        for ev in events {
            let rev = ev.revision();
            if rev <= self.revision {
                // Already reflected (a replay after a resume).
                continue;
            }
            match ev {
                WatchEvent::Put { kv, .. } => {
                    if let Some(host) = self.host_of(&kv.key) {
                        self.apply_put(host, kv, rev);
                    }
                }
                WatchEvent::Delete { key, prev, .. } => {
                    if let Some(host) = self.host_of(&key) {
                        if let Some(seen) = self.view.remove(&host) {
                            self.out.event(Event::Down {
                                host,
                                last_seen: prev.unwrap_or(seen),
                                revision: rev,
                            });
                        }
                    }
                }
            }
            self.revision = rev;
        }
        // Only a progress notification promises that nothing up to its
        // revision is still to come.
        if kind == MessageKind::Progress && header > self.revision {
            self.revision = header;
        }
        self.backoff.reset();
    }

    fn on_closed(&mut self, now: Instant, stream_op: OpId, failure: Failure) {
        match self.state {
            State::Watching { stream, .. } if stream == stream_op => {}
            _ => return,
        }
        self.out.cmd(Command::CancelWatch { stream: stream_op });
        match failure {
            Failure::Compacted(rev) => {
                self.list(now, ListReason::Resync(Revision(rev)));
            }
            other => self.retry(now, other.class(), Then::Resume),
        }
    }
}

#[cfg(test)]
#[path = "watcher_tests.rs"]
mod tests;
