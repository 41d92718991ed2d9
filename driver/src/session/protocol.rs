//! What a session's handles and its loop say to each other: the requests
//! the handles send, and the phase of each campaign, its lease's deadline
//! and the session's counters that the loop publishes.

use coord_core::election::{Answer, AskedBy, ElectionId, Loss, Mode};
use coord_core::kv::KeyValue;
use coord_core::{FencingToken, Instant, Key, LeaseId};
use tokio::sync::{oneshot, watch};

use crate::error::Error;

/// Where a campaign is, as its handles see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    Campaigning,
    Leading {
        key: Key,
        lease: LeaseId,
        token: FencingToken,
    },
    NotElected {
        leader: Option<KeyValue>,
    },
    Lost(Loss),
    Left,
    Refused(Error),
}

impl Phase {
    pub(crate) fn is_over(&self) -> bool {
        !matches!(self, Phase::Campaigning | Phase::Leading { .. })
    }
}

/// What the handles ask of the session's loop.
pub(crate) enum Request {
    Campaign {
        id: ElectionId,
        name: Key,
        value: Vec<u8>,
        mode: Mode,
        phase: watch::Sender<Phase>,
    },
    Leave {
        id: ElectionId,
    },
    Ask {
        id: ElectionId,
        asked: AskedBy,
        reply: oneshot::Sender<Answer>,
    },
    Close,
}

/// The lease's proof of life, for `is_leader()` checks at call time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Deadline {
    pub(crate) lease: Option<LeaseId>,
    pub(crate) expires_at: Option<Instant>,
}

/// A session's counters, for a pool's `stats()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Counters {
    pub(crate) campaigns: usize,
    pub(crate) heals: u64,
}
