//! What a watcher tells its consumer: hosts as records, and their changes
//! as events.

use std::time::Duration;

use coord_core::kv::KeyValue;
use coord_core::watcher::ResyncReason;
use coord_core::{AttemptFailure, LeaseId, Revision};
use serde::de::DeserializeOwned;

/// Metadata another agent wrote that does not decode as the expected type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metadata does not decode: {0}")]
pub struct DecodeError(pub String);

/// A host as the watcher last saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct HostRecord<M> {
    /// The decoded metadata, or why it does not decode.
    pub meta: Result<M, DecodeError>,
    /// The raw value.
    pub raw: Vec<u8>,
    /// The lease the key is attached to.
    pub lease: LeaseId,
    /// Revision of the last change of this host the watcher reported (an
    /// identical re-put of the same value and lease is not a change).
    pub mod_revision: Revision,
}

impl<M: DeserializeOwned> HostRecord<M> {
    pub(super) fn from_kv(kv: KeyValue) -> Self {
        HostRecord {
            meta: serde_json::from_slice(&kv.value).map_err(|e| DecodeError(e.to_string())),
            raw: kv.value,
            lease: kv.lease,
            mod_revision: kv.mod_revision,
        }
    }

    /// The record of `kv`: `known` (the view's record of the same host)
    /// when it was made from that very kv, so a value is decoded once
    /// however many events carry it; else decoded afresh.
    pub(super) fn reuse_or_decode(known: Option<Self>, kv: KeyValue) -> Self {
        match known {
            Some(r)
                if r.mod_revision == kv.mod_revision
                    && r.lease == kv.lease
                    && r.raw == kv.value =>
            {
                r
            }
            _ => Self::from_kv(kv),
        }
    }
}

/// A change of the hosts under the prefix. `revision` is the etcd revision
/// the change reflects; revisions never decrease along the stream but
/// after etcd was restored or wiped (see the [module docs](crate::watcher)).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum HostEvent<M> {
    /// A host appeared (also: each host of the first snapshot).
    Up {
        /// Host id.
        host: String,
        /// What it holds.
        record: HostRecord<M>,
        /// Revision.
        revision: Revision,
    },
    /// A host's metadata or lease changed.
    Updated {
        /// Host id.
        host: String,
        /// What it holds now.
        record: HostRecord<M>,
        /// What it held before.
        previous: HostRecord<M>,
        /// Revision.
        revision: Revision,
    },
    /// A host disappeared.
    Down {
        /// Host id.
        host: String,
        /// What it held when last seen.
        last_seen: HostRecord<M>,
        /// Revision.
        revision: Revision,
    },
    /// The first snapshot is complete (every host up at `revision` has had
    /// its `Up`).
    Synced {
        /// Revision of the snapshot.
        revision: Revision,
    },
    /// etcd's history started over: it was wiped, restored from an older
    /// snapshot, or another cluster answers (the reason says which). The
    /// difference to its contents follows (`Down`, `Up`, `Updated`), then
    /// `Resynced`. From this event on, revisions (this one's first) may be
    /// below every revision seen before: the one time they go down. A
    /// consumer that stores the last revision starts over from this one.
    Reset {
        /// Why (`RevisionWentBack`, `HistoryDiverged` or `ClusterChanged`).
        reason: ResyncReason,
        /// Revision of the new snapshot.
        revision: Revision,
    },
    /// The view was rebuilt from a fresh snapshot after the watch lost its
    /// place (compaction), or because etcd was restored, wiped or replaced
    /// (the reason says which; `Reset` came first); the differences came
    /// just before.
    Resynced {
        /// Why.
        reason: ResyncReason,
        /// Revision of the snapshot.
        revision: Revision,
    },
    /// Listing or watching failed; the watcher tries again in `retry_in`
    /// (backoff). Until a later event, the view may be stale; `status()`
    /// says since when.
    Retrying {
        /// Failures since the last success.
        attempt: u32,
        /// What failed (`None` never happens for a watcher today).
        failure: Option<AttemptFailure>,
        /// When the next attempt starts, from the failure.
        retry_in: Duration,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use coord_core::Key;

    fn kv(value: &[u8], lease: i64, mod_revision: i64) -> KeyValue {
        KeyValue {
            key: Key(b"/coord/hosts/h".to_vec()),
            value: value.to_vec(),
            create_revision: Revision(1),
            mod_revision: Revision(mod_revision),
            lease: LeaseId(lease),
        }
    }

    #[test]
    fn a_record_is_reused_only_when_made_from_the_same_kv() {
        let record = HostRecord::<serde_json::Value>::from_kv(kv(b"{\"a\":1}", 7, 5));
        assert_eq!(record.meta, Ok(serde_json::json!({"a": 1})));
        // A record that claims to be of this kv but holds another meta:
        // reused as is, so no decoding happened.
        let marked = HostRecord {
            meta: Ok(serde_json::json!("reused")),
            ..record.clone()
        };
        let same = HostRecord::reuse_or_decode(Some(marked.clone()), kv(b"{\"a\":1}", 7, 5));
        assert_eq!(same, marked);
        // Any difference of value, lease or revision decodes afresh.
        for other in [
            kv(b"{\"a\":2}", 7, 5),
            kv(b"{\"a\":1}", 8, 5),
            kv(b"{\"a\":1}", 7, 6),
        ] {
            let fresh = HostRecord::reuse_or_decode(Some(marked.clone()), other.clone());
            assert_eq!(fresh, HostRecord::from_kv(other));
        }
        let unknown = HostRecord::<serde_json::Value>::reuse_or_decode(None, kv(b"oops", 7, 5));
        assert!(unknown.meta.is_err());
        assert_eq!(unknown.raw, b"oops".to_vec());
    }
}
