//! The keep-alive link of a held lease: the open stream and what its
//! replies proved, or the broken stream waiting to be reopened.

use std::collections::VecDeque;
use std::time::Duration;

use crate::ids::OpId;
use crate::outcome::Failure;
use crate::time::Instant;

/// An open keep-alive stream and what its replies proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stream {
    pub(super) op: OpId,
    /// Send times of keep-alives not yet acknowledged, oldest first.
    pub(super) unacked: VecDeque<Instant>,
    /// Last send time.
    pub(super) last_send: Instant,
    /// The lease is surely alive until here (and maybe not after).
    pub(super) expires_at: Instant,
    /// Live replies received on this stream.
    pub(super) replies: u64,
    /// Live replies after which the stream counts as working: 1 for a
    /// stream opened while registering (the registration proves it), 2
    /// for a reopened one (its opening reply alone proves too little: a
    /// stream that ends right after it must not be reopened at once,
    /// over and over).
    pub(super) proof: u64,
}

impl Stream {
    /// A stream just opened at `now` while registering (the open sends
    /// the first keep-alive), for a lease known alive until `expires_at`.
    pub(super) fn opened(op: OpId, now: Instant, expires_at: Instant) -> Self {
        Stream {
            op,
            unacked: VecDeque::from([now]),
            last_send: now,
            expires_at,
            replies: 0,
            proof: 1,
        }
    }

    /// A stream just opened at `now` in place of a held lease's broken
    /// one: it works once it has also answered a keep-alive of its own.
    pub(super) fn reopened(op: OpId, now: Instant, expires_at: Instant) -> Self {
        Stream {
            proof: 2,
            ..Stream::opened(op, now, expires_at)
        }
    }

    /// Whether the stream has answered enough to count as working: a
    /// break is then answered by reopening at once.
    pub(super) fn works(&self) -> bool {
        self.replies >= self.proof
    }

    /// Records a live reply: the oldest unacknowledged send plus the TTL is
    /// a time the lease surely lives to. An unsolicited reply (nothing
    /// unacknowledged) proves nothing about timing and is not counted.
    pub(super) fn ack(&mut self, ttl_secs: i64) {
        self.replies += 1;
        if let Some(sent) = self.unacked.pop_front() {
            let ttl = Duration::from_secs(u64::try_from(ttl_secs).unwrap_or(0));
            self.expires_at = self.expires_at.max(sent + ttl);
        }
    }

    /// When the oldest unanswered keep-alive, unanswered for `wait`, makes
    /// the stream count as silently broken.
    pub(super) fn silent_at(&self, wait: Duration) -> Option<Instant> {
        self.unacked.front().map(|sent| *sent + wait)
    }
}

/// The keep-alive link of a held lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Link {
    /// A stream is open (or reopened and awaiting its first reply).
    Up(Stream),
    /// The stream broke; reopen at `retry_at` unless the deadline passes.
    Down {
        retry_at: Instant,
        expires_at: Instant,
        failure: Failure,
    },
}

impl Link {
    pub(super) fn expires_at(&self) -> Instant {
        match self {
            Link::Up(s) => s.expires_at,
            Link::Down { expires_at, .. } => *expires_at,
        }
    }
}
