//! `Observer`: every change of an election's leader, including "no
//! leader", on a [mirror](crate::mirror) of the election's queue, so it
//! survives broken streams and compactions like every list-and-watch.
//!
//! The leader is the key with the lowest create revision under the name.
//! The first `Leader` event gives the leader at the first listing (or
//! none); then one event per revision at which the leader's key, create
//! revision or value changed. Changes of one revision (a lease revoke
//! deleting several candidates) count once, so a leader is never reported
//! that did not lead at some revision. After a re-list (compaction), the
//! leader at the new listing is reported if it differs.

use std::collections::BTreeMap;

use crate::ids::{FencingToken, Key, Revision};
use crate::io::Command;
use crate::kv::KeyValue;
use crate::lease::UsageError;
use crate::mirror::{Change, Mirror, MirrorConfig, MirrorConfigError};
use crate::outbox::{self, Outbox};
use crate::outcome::{AttemptFailure, Retry};
use crate::time::Instant;

pub use crate::machine::Input;

/// A leader as an observer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// Its key.
    pub key: Key,
    /// Its value.
    pub value: Vec<u8>,
    /// Its create revision (the fencing token of its leadership).
    pub token: FencingToken,
}

/// What an observer reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The leader as of `revision` (`None`: nobody leads).
    Leader {
        /// Who leads.
        leader: Option<Leader>,
        /// The revision this reflects.
        revision: Revision,
    },
    /// A list or watch failed; the next try is at `next_at`.
    Retrying(Retry),
    /// The first listing failed (fail-fast start); `Closed` follows.
    StartFailed {
        /// Why.
        reason: AttemptFailure,
    },
    /// Terminal.
    Closed,
}

/// What `poll` yields.
pub type Output = outbox::Output<Command, Event>;

/// The observer machine. See the module docs.
#[derive(Debug)]
pub struct Observer {
    mirror: Mirror,
    out: Outbox<Command, Event>,
    /// The queue as the changes so far describe it.
    replica: BTreeMap<Key, KeyValue>,
    /// The leader last reported (`Some(None)`: "nobody", reported).
    reported: Option<Option<Leader>>,
}

impl Observer {
    /// An observer of the queue under `config.prefix` (an election's name,
    /// ending with `/`). Nothing happens until `Input::Start`.
    pub fn new(config: MirrorConfig) -> Result<Self, MirrorConfigError> {
        Ok(Observer {
            mirror: Mirror::new(config)?,
            out: Outbox::new(),
            replica: BTreeMap::new(),
            reported: None,
        })
    }

    /// The leader last reported (`None` before the first listing, or when
    /// nobody leads).
    pub fn leader(&self) -> Option<&Leader> {
        self.reported.as_ref().and_then(Option::as_ref)
    }

    /// True once closed.
    pub fn is_closed(&self) -> bool {
        self.mirror.is_closed()
    }

    /// Whether the observed queue is current, being re-read, or possibly
    /// stale because listing or watching keeps failing.
    pub fn status(&self) -> crate::mirror::MirrorStatus {
        self.mirror.status()
    }

    /// The next command or event.
    #[must_use]
    pub fn poll(&mut self) -> Option<Output> {
        self.out.pop()
    }

    /// True while waiting on etcd: listing, or a failure to list or watch
    /// not healed yet (see [`Input::Returned`]).
    pub fn awaits_etcd(&self) -> bool {
        self.mirror.awaits_etcd()
    }

    /// How many requests and streams were found unanswered so far.
    pub fn silences(&self) -> u64 {
        self.mirror.silences()
    }

    /// The next deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.mirror.poll_timeout()
    }

    /// Feeds one input.
    pub fn handle(&mut self, now: Instant, input: Input) -> Result<(), UsageError> {
        self.mirror.handle(now, input, &mut self.out.ids)?;
        self.translate();
        Ok(())
    }

    fn translate(&mut self) {
        // The revision whose changes are being folded, if any.
        let mut open: Option<Revision> = None;
        while let Some(o) = self.mirror.next_output() {
            let change = match o {
                outbox::Output::Command(c) => {
                    self.out.cmd(c);
                    continue;
                }
                outbox::Output::Event(change) => change,
            };
            let revision = match &change {
                Change::Put { revision, .. }
                | Change::Deleted { revision, .. }
                | Change::Synced { revision }
                | Change::Resynced { revision, .. } => Some(*revision),
                _ => None,
            };
            if let (Some(prev), Some(rev)) = (open, revision) {
                if rev != prev {
                    self.report(prev);
                }
            }
            match change {
                Change::Put { kv, .. } => {
                    self.replica.insert(kv.key.clone(), kv);
                }
                Change::Deleted { key, .. } => {
                    self.replica.remove(&key);
                }
                Change::Synced { .. } | Change::Resynced { .. } | Change::Ignored { .. } => {}
                Change::Retrying(retry) => self.out.event(Event::Retrying(retry)),
                Change::StartFailed { reason } => self.out.event(Event::StartFailed { reason }),
                Change::Closed => self.out.event(Event::Closed),
            }
            if revision.is_some() {
                open = revision;
            }
        }
        if let Some(rev) = open {
            self.report(rev);
        }
    }

    /// Reports the leader of the replica if it changed.
    fn report(&mut self, revision: Revision) {
        let leader = self
            .replica
            .values()
            .min_by_key(|kv| kv.create_revision)
            .map(|kv| Leader {
                key: kv.key.clone(),
                value: kv.value.clone(),
                token: FencingToken(kv.create_revision.0),
            });
        if self.reported.as_ref() != Some(&leader) {
            self.reported = Some(leader.clone());
            self.out.event(Event::Leader { leader, revision });
        }
    }
}

crate::machine::impl_machine!(Observer, Input, Event);

#[cfg(test)]
mod tests;
