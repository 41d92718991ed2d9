//! What a mirror reports about itself: whether its view is current.

use crate::ids::Revision;
use crate::outcome::AttemptFailure;
use crate::time::Instant;

/// What a mirror is doing, readable at any time: whether its view is
/// current, being rebuilt, or possibly stale because etcd keeps failing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MirrorStatus {
    /// Not started, or the first listing is being read (no failure yet).
    Starting,
    /// A watch is open (or being opened after a success) and the view
    /// reflects every change up to `revision`.
    Watching {
        /// Every change up to here is in the view.
        revision: Revision,
    },
    /// The view is being rebuilt from a fresh listing (after a compaction,
    /// or to check for a restored etcd); it may lag until then.
    Relisting {
        /// The revision the view reflects meanwhile.
        revision: Revision,
    },
    /// Listing or watching failed and has not succeeded since: the view
    /// may be stale. Cleared by the next listing or watch message that
    /// succeeds.
    Failing {
        /// The revision the view reflects meanwhile.
        revision: Revision,
        /// When the first failure of this run happened.
        since: Instant,
        /// Failures so far.
        attempt: u32,
        /// The last failure.
        failure: AttemptFailure,
    },
    /// Closed (terminal).
    Closed,
}

/// A run of failures with no success between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Failing {
    pub(super) since: Instant,
    pub(super) last: AttemptFailure,
    /// What the last failure showed of etcd.
    pub(super) showed: Showed,
}

/// What a failure showed of etcd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Showed {
    /// Nothing of its data: it was unreachable, refused, failed or was
    /// silent.
    NotServing,
    /// It answers, from behind the view or as another cluster: a check
    /// (a linearizable listing) is due.
    AnsweredBehind,
}
