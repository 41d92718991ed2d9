//! etcd data as the machines see it: key-values and watch events.

use crate::ids::{Key, LeaseId, Revision};

/// A key-value pair with its revisions and lease (`LeaseId(0)`: none).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct KeyValue {
    /// The key.
    pub key: Key,
    /// The value.
    pub value: Vec<u8>,
    /// Revision that created this incarnation of the key.
    pub create_revision: Revision,
    /// Revision of the last put.
    pub mod_revision: Revision,
    /// Attached lease, `LeaseId(0)` for none.
    pub lease: LeaseId,
}

/// One change delivered by a watch. coord watches without prev kv (each
/// machine keeps its own view), so `prev` is `None` from etcd and no
/// machine reads it; it stays for sources that send it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum WatchEvent {
    /// A put; `prev` is the kv before it, when etcd sent it.
    Put {
        /// The new kv.
        kv: KeyValue,
        /// The kv before.
        prev: Option<KeyValue>,
    },
    /// A delete at `revision`; `prev` is the deleted kv, when etcd sent it.
    Delete {
        /// The key.
        key: Key,
        /// Revision of the delete.
        revision: Revision,
        /// The deleted kv.
        prev: Option<KeyValue>,
    },
}

impl WatchEvent {
    /// The revision the change happened at.
    pub fn revision(&self) -> Revision {
        match self {
            WatchEvent::Put { kv, .. } => kv.mod_revision,
            WatchEvent::Delete { revision, .. } => *revision,
        }
    }

    /// The key changed.
    pub fn key(&self) -> &Key {
        match self {
            WatchEvent::Put { kv, .. } => &kv.key,
            WatchEvent::Delete { key, .. } => key,
        }
    }
}
