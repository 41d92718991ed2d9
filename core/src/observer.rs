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
//! leader at the new listing is reported if it differs. etcd's history
//! starting over (wiped, restored, another cluster) is announced first
//! with `Reset`, then the leader at the new listing is reported, changed
//! or not: its revision may be below every one reported before.

use std::collections::BTreeMap;

use crate::ids::{FencingToken, Key, Revision};
use crate::io::Command;
use crate::kv::KeyValue;
use crate::mirror::{
    Change, Mirror, MirrorConfig, MirrorConfigError, MirrorMachine, MirrorReader, ResyncReason,
};
use crate::outbox::{self};
use crate::outcome::{AttemptFailure, Retry};

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
    /// etcd's history started over (wiped, restored from a snapshot, or
    /// another cluster answers): the leader at `revision` is reported
    /// next, whether it changed or not, and revisions from here on may be
    /// below every one reported before.
    Reset {
        /// Why (`RevisionWentBack`, `HistoryDiverged` or `ClusterChanged`).
        reason: ResyncReason,
        /// The new listing's revision.
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

/// The observer machine: a [`MirrorMachine`] that reads its mirror's
/// changes as changes of leader ([`LeaderReader`]). See the module docs.
pub type Observer = MirrorMachine<LeaderReader>;

/// How the observer reads its mirror: the queue as its changes describe
/// it, and its leader reported once per revision at which it changed.
#[derive(Debug)]
pub struct LeaderReader {
    /// The queue as the changes so far describe it.
    replica: BTreeMap<Key, KeyValue>,
    /// The leader last reported (`Some(None)`: "nobody", reported).
    reported: Option<Option<Leader>>,
    /// The revision whose changes are being folded, if any.
    open: Option<Revision>,
}

impl Observer {
    /// An observer of the queue under `config.prefix` (an election's name,
    /// ending with `/`). Nothing happens until `Input::Start`.
    pub fn new(config: MirrorConfig) -> Result<Self, MirrorConfigError> {
        Ok(MirrorMachine::with(
            Mirror::new(config)?,
            LeaderReader {
                replica: BTreeMap::new(),
                reported: None,
                open: None,
            },
        ))
    }

    /// The leader last reported (`None` before the first listing, or when
    /// nobody leads).
    pub fn leader(&self) -> Option<&Leader> {
        self.reader().reported.as_ref().and_then(Option::as_ref)
    }
}

impl MirrorReader for LeaderReader {
    type Event = Event;

    /// Folds one change into the replica; the leader of a revision is
    /// reported once its changes are all in (the next revision's first
    /// change, or the end of the input).
    fn read(&mut self, _mirror: &Mirror, change: Change, emit: &mut dyn FnMut(Event)) {
        let revision = match &change {
            Change::Put { revision, .. }
            | Change::Deleted { revision, .. }
            | Change::Synced { revision }
            | Change::Reset { revision, .. }
            | Change::Resynced { revision, .. } => Some(*revision),
            _ => None,
        };
        if let (Some(prev), Some(rev)) = (self.open, revision) {
            if rev != prev {
                self.report(prev, emit);
            }
        }
        match change {
            Change::Put { kv, .. } => {
                self.replica.insert(kv.key.clone(), kv);
            }
            Change::Deleted { key, .. } => {
                self.replica.remove(&key);
            }
            Change::Reset { reason, revision } => {
                // The leader at the new listing is reported, changed or
                // not: the consumer learns its revision.
                self.reported = None;
                emit(Event::Reset { reason, revision });
            }
            Change::Synced { .. } | Change::Resynced { .. } | Change::Ignored { .. } => {}
            Change::Retrying(retry) => emit(Event::Retrying(retry)),
            Change::StartFailed { reason } => emit(Event::StartFailed { reason }),
            Change::Closed => emit(Event::Closed),
        }
        if revision.is_some() {
            self.open = revision;
        }
    }

    fn drained(&mut self, emit: &mut dyn FnMut(Event)) {
        if let Some(rev) = self.open.take() {
            self.report(rev, emit);
        }
    }
}

impl LeaderReader {
    /// Reports the leader of the replica if it changed.
    fn report(&mut self, revision: Revision, emit: &mut dyn FnMut(Event)) {
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
            emit(Event::Leader { leader, revision });
        }
    }
}

#[cfg(test)]
mod tests;
