//! What a campaign is asked and what it tells: its id and mode, what a
//! caller asks of a leader and the answer, the campaign's events, its
//! standing, and why it was lost.

use crate::ids::{FencingToken, Key, LeaseId};
use crate::io::{Completion, Txn, TxnResponse};
use crate::kv::KeyValue;
use crate::lease::LostReason;
use crate::outcome::{AttemptFailure, Retry};
use crate::time::Instant;

/// Identifies one campaign within its session. Chosen by the caller,
/// unique for the session's life, never 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct ElectionId(pub u64);

/// How a campaign waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Mode {
    /// Queue and wait until elected.
    Wait,
    /// One round trip: lead now if nobody is queued, else leave no key.
    Try,
}

/// Why a candidate or leader lost its place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Loss {
    /// Its key was deleted (by anyone: an operator, a guarded transaction
    /// that found it gone, a compaction re-list that no longer shows it).
    #[error("its key was deleted")]
    KeyDeleted,
    /// The session's lease was lost (its keys go with it).
    #[error("the session's lease was lost: {0}")]
    LeaseLost(LostReason),
    /// The session was closed.
    #[error("the session was closed")]
    SessionClosed,
}

/// The answer to a proclaim or a guarded transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The leader's value was replaced.
    Proclaimed,
    /// The guarded transaction ran; its own result.
    Txn(TxnResponse),
    /// Refused: the caller does not lead (any more). Nothing was applied.
    NotLeader,
    /// The request failed or its outcome is unknown.
    Failed(AttemptFailure),
}

/// What happened to a campaign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElectionEvent {
    /// Elected: the key has the lowest create revision under the name.
    Elected {
        /// The leader's key.
        key: Key,
        /// The lease it is attached to (the session's).
        lease: LeaseId,
        /// Its create revision.
        token: FencingToken,
    },
    /// A try found someone queued: no key was left.
    NotElected {
        /// Who leads (the lowest create revision), if anyone.
        leader: Option<KeyValue>,
    },
    /// The campaign or leadership ended against the candidate's will.
    Lost {
        /// Why.
        reason: Loss,
    },
    /// Left on request (resign, cancel): the key is deleted (or goes with
    /// the session's lease).
    Left,
    /// A proclaim or guarded transaction was answered.
    Answered {
        /// The caller's request id.
        request: u64,
        /// The answer.
        answer: Answer,
    },
    /// A request failed and is retried at `next_at`.
    Retrying(Retry),
}

/// Where a campaign is, as its session reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Waiting for the session to hold a lease.
    Pending,
    /// Joining the queue.
    Joining,
    /// Queued behind others.
    Queued {
        /// Its create revision.
        token: FencingToken,
    },
    /// Leading.
    Leading {
        /// Its key.
        key: Key,
        /// Its create revision.
        token: FencingToken,
    },
    /// Deleting its key.
    Leaving,
    /// Ended.
    Done,
}

/// What a caller asks of a leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskedBy {
    /// Replace the leader's value.
    Proclaim(Vec<u8>),
    /// Run this transaction only while leading.
    Txn(Txn),
}

/// Everything that can happen to a campaign: what its session tells it,
/// what its user asks through the session, and what etcd answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CampaignInput {
    /// The session holds this lease: a pending campaign joins the queue.
    LeaseReady(LeaseId),
    /// The session's lease is lost: a queued or leading campaign is lost
    /// too; one not queued yet waits for the next lease.
    LeaseLost(LostReason),
    /// The session closes (or will never hold a lease): the campaign ends.
    SessionClosing,
    /// Leave: cancel the campaign or resign. Idempotent.
    Leave,
    /// The user asks the leader something, answered with `request`.
    Ask {
        /// The answer's number.
        request: u64,
        /// What is asked.
        asked: AskedBy,
    },
    /// The deadline from `poll_timeout` may have passed.
    Timeout,
    /// etcd answers again after a silence (see
    /// [`Input::Returned`](crate::machine::Input::Returned)).
    Returned {
        /// When the probe that found etcd back was sent.
        probe_sent: Instant,
    },
    /// A completion routed to this campaign.
    Io(Completion),
}
