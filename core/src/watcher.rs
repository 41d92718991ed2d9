//! `Watcher`: a view of the hosts under a prefix that converges to etcd's
//! truth, and the stream of changes that explains it: the host-id view of
//! a [`Mirror`](crate::mirror) of the prefix.
//!
//! Start: range the prefix, emit a synthetic `Up` per host, then `Synced`,
//! then watch from the range's revision + 1. A put of a new
//! host is `Up`; a put that changes a known host's value or lease is
//! `Updated` (so is a key found deleted and created again by a re-list, a
//! new create revision); an identical re-put is nothing; a delete of a
//! known host is `Down` with the last-seen kv: the view's, the kv of the
//! last change reported.
//!
//! Broken, silent and compacted streams are the mirror's business: resumed
//! from the last revision seen + 1, or re-listed with the difference
//! reported (`Down` for hosts gone, `Up` for new ones, `Updated` for
//! changed ones) and then `Resynced`. Every wait before a retry is
//! announced with `Retrying`. Nothing is lost and nothing repeated: every
//! event applies to the view exactly as emitted, and the revisions of
//! emitted events never decrease (events of one etcd revision, such as a
//! lease revoke deleting several hosts, share it), but at a `Reset`: etcd
//! wiped or restored is announced first, and revisions may go down from
//! it on, to its own.
//!
//! Keys under the prefix whose tail is not a valid host id (nested paths,
//! empty tail, unsafe characters) are never events: `Ignored` reports them
//! for tracing. The excluded host, if any, never appears.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::backoff::BackoffConfig;
use crate::ids::{Key, Revision};
use crate::io::Command;
use crate::kv::KeyValue;
use crate::mirror::{Change, KeyFilter, Mirror, MirrorConfig, MirrorMachine, MirrorReader};
use crate::outcome::{AttemptFailure, Retry};

pub use crate::io::Consistency;
pub use crate::mirror::{MirrorConfigError as ConfigError, ResyncReason};
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
    /// Keys per page of a listing.
    pub page_size: u32,
}

impl WatcherConfig {
    /// Defaults: linearizable, request timeout 5 s, probe every 10 s,
    /// default backoff, fail-fast start, pages of 1,000 keys.
    pub fn new(prefix: Key, seed: u64) -> Self {
        let m = MirrorConfig::new(prefix, seed);
        WatcherConfig {
            prefix: m.prefix,
            exclude_host: None,
            consistency: m.consistency,
            request_timeout: m.request_timeout,
            probe_interval: m.probe_interval,
            backoff: m.backoff,
            seed,
            start: m.start,
            page_size: m.page_size,
        }
    }

    /// The mirror's config: host ids only, without the excluded one.
    pub fn mirror(&self) -> MirrorConfig {
        MirrorConfig {
            prefix: self.prefix.clone(),
            filter: KeyFilter::HostIds {
                exclude: self.exclude_host.clone(),
            },
            consistency: self.consistency,
            request_timeout: self.request_timeout,
            probe_interval: self.probe_interval,
            backoff: self.backoff.clone(),
            seed: self.seed,
            start: self.start,
            page_size: self.page_size,
        }
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.mirror().validate()
    }
}

pub use crate::machine::Input;

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
    /// etcd's history started over (wiped, restored from a snapshot, or
    /// another cluster answers): the difference to the new contents
    /// follows, then `Resynced`; from this event on, revisions (this one's
    /// first) may be below every revision reported before.
    Reset {
        /// Why (`RevisionWentBack`, `HistoryDiverged` or `ClusterChanged`).
        reason: ResyncReason,
        /// The new listing's revision.
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
    /// A list or watch failed; the next try is at `next_at`.
    Retrying(Retry),
    /// The first range failed under `StartPolicy::FailFast`; `Closed`
    /// follows.
    StartFailed {
        /// Why.
        reason: AttemptFailure,
    },
    /// Terminal.
    Closed,
}

/// What `poll` yields.
pub type Output = crate::outbox::Output<Command, Event>;

/// The watcher state machine: a [`MirrorMachine`] that reads its mirror's
/// changes as host events ([`HostReader`]). See the module docs.
pub type Watcher = MirrorMachine<HostReader>;

/// How the watcher reads its mirror: a key as the host id after the
/// prefix, a change as the host event that explains it.
#[derive(Debug)]
pub struct HostReader {
    _private: (),
}

impl Watcher {
    /// A machine for `config`. Nothing happens until `Input::Start`.
    pub fn new(config: WatcherConfig) -> Result<Self, ConfigError> {
        Ok(MirrorMachine::with(
            Mirror::new(config.mirror())?,
            HostReader { _private: () },
        ))
    }

    /// The live hosts, exactly as the events so far describe them (the kv
    /// of each is the one its last `Up` or `Updated` carried).
    pub fn view(&self) -> BTreeMap<String, KeyValue> {
        let mirror = self.mirror();
        mirror
            .view()
            .iter()
            .map(|(k, kv)| (host(mirror, k), kv.clone()))
            .collect()
    }

    /// Every change up to this revision is reflected in the view.
    pub fn revision(&self) -> Revision {
        self.mirror().revision()
    }

    /// True while a watch stream is open and the view is current.
    pub fn is_watching(&self) -> bool {
        self.mirror().is_watching()
    }
}

/// The host id of a key the mirror kept (its tail is a valid host id).
fn host(mirror: &Mirror, key: &Key) -> String {
    let tail = key
        .0
        .strip_prefix(mirror.config().prefix.0.as_slice())
        .unwrap_or(&key.0);
    String::from_utf8_lossy(tail).into_owned()
}

impl MirrorReader for HostReader {
    type Event = Event;

    /// Turns one change into the host event that explains it.
    fn read(&mut self, mirror: &Mirror, change: Change, emit: &mut dyn FnMut(Event)) {
        let event = match change {
            Change::Put {
                kv,
                previous: None,
                revision,
            } => Event::Up {
                host: host(mirror, &kv.key),
                kv,
                revision,
            },
            Change::Put {
                kv,
                previous: Some(previous),
                revision,
            } => Event::Updated {
                host: host(mirror, &kv.key),
                kv,
                previous,
                revision,
            },
            Change::Deleted {
                key,
                last_seen,
                revision,
            } => Event::Down {
                host: host(mirror, &key),
                last_seen,
                revision,
            },
            Change::Synced { revision } => Event::Synced { revision },
            Change::Reset { reason, revision } => Event::Reset { reason, revision },
            Change::Resynced { reason, revision } => Event::Resynced { reason, revision },
            Change::Ignored { key } => Event::Ignored {
                key,
                reason: IgnoreReason::NotAHostId,
            },
            Change::Retrying(retry) => Event::Retrying(retry),
            Change::StartFailed { reason } => Event::StartFailed { reason },
            Change::Closed => Event::Closed,
        };
        emit(event);
    }
}

#[cfg(test)]
mod tests;
