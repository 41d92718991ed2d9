//! What a mirror reports: each change of its view, and why it re-listed.

use crate::ids::{ClusterId, Key, Revision};
use crate::kv::KeyValue;
use crate::outcome::{AttemptFailure, Retry};

/// Why the view was rebuilt from a fresh range.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResyncReason {
    /// The watch's start revision was compacted.
    Compacted {
        /// etcd's compaction revision (0 if it did not say).
        compact_revision: Revision,
    },
    /// etcd's revision went below the one already reflected: it was
    /// restored from an older snapshot or wiped. Revisions start over from
    /// `now`.
    RevisionWentBack {
        /// The revision reflected before.
        seen: Revision,
        /// etcd's revision now.
        now: Revision,
    },
    /// etcd's history at the revision already reflected is not the one
    /// the view was built from: it was restored or wiped and has since
    /// moved past that revision (found by reading back, before resuming a
    /// watch, the key the view saw change last).
    HistoryDiverged {
        /// The revision reflected before.
        seen: Revision,
    },
    /// Another cluster answered (a replaced or restored cluster).
    ClusterChanged {
        /// The cluster seen before.
        from: ClusterId,
        /// The cluster now.
        to: ClusterId,
    },
}

/// One change of the mirrored prefix (or of the mirror itself). Every
/// `Put` and `Deleted` applies to the view exactly as stated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A key appeared (`previous` is `None`) or changed value or lease.
    Put {
        /// The kv now.
        kv: KeyValue,
        /// The kv before, for a change.
        previous: Option<KeyValue>,
        /// Revision this reflects.
        revision: Revision,
    },
    /// A key disappeared.
    Deleted {
        /// The key.
        key: Key,
        /// Its last-seen kv.
        last_seen: KeyValue,
        /// Revision this reflects.
        revision: Revision,
    },
    /// The initial listing is complete (after its `Put`s).
    Synced {
        /// The listing's revision.
        revision: Revision,
    },
    /// etcd's history started over (wiped, restored from a snapshot, or
    /// another cluster answers): announced before the difference to the
    /// new contents, whose revisions (this one's) may be below every
    /// revision reported before. `Resynced` with the same reason follows
    /// the difference.
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
    /// A key under the prefix the filter does not keep (for tracing).
    Ignored {
        /// The key.
        key: Key,
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
