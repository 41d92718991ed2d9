//! The etcd requests every machine issues and the completions that answer
//! them: one vocabulary for all machines, so one driver executes them all.
//!
//! A machine only issues the commands it needs and ignores completions for
//! ops it does not wait for (stale, or of a kind it never asked for).

use crate::ids::{ClusterId, Key, LeaseId, OpId, Revision};
use crate::kv::{KeyValue, WatchEvent};
use crate::outcome::{Failure, Outcome};

/// How a range is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Consistency {
    /// Linearizable (through the leader): never older than a write that
    /// completed before it. Default.
    #[default]
    Linearizable,
    /// Serializable (any member's local state): cheaper, maybe stale.
    Serializable,
}

/// The order of a range's results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Sort {
    /// By key, ascending (etcd's natural order). Default.
    #[default]
    Key,
    /// By create revision, oldest first (the election queue's order).
    CreateAscending,
    /// By create revision, newest first.
    CreateDescending,
}

/// Which keys a read selects: one key, or every key under a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Get {
    /// The key, or the prefix.
    pub key: Key,
    /// Select every key starting with `key`.
    pub prefix: bool,
    /// Result order.
    pub sort: Sort,
    /// At most this many results; 0 for all.
    pub limit: u32,
}

impl Get {
    /// Every key under `prefix`, in key order.
    pub fn prefix(prefix: Key) -> Get {
        Get {
            key: prefix,
            prefix: true,
            sort: Sort::Key,
            limit: 0,
        }
    }

    /// Exactly `key`.
    pub fn key(key: Key) -> Get {
        Get {
            key,
            prefix: false,
            sort: Sort::Key,
            limit: 0,
        }
    }
}

/// A range request outside a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct RangeRequest {
    /// What to read.
    pub get: Get,
    /// How.
    pub consistency: Consistency,
    /// For a page after the first: only keys after this one (still within
    /// `get`'s prefix). Key order only.
    pub after: Option<Key>,
    /// Read at this revision (a later page pins the first page's); 0 for
    /// the latest.
    pub revision: Revision,
}

impl RangeRequest {
    /// The latest state of whatever `get` selects.
    pub fn latest(get: Get, consistency: Consistency) -> RangeRequest {
        RangeRequest {
            get,
            consistency,
            after: None,
            revision: Revision(0),
        }
    }
}

/// A range's result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Listing {
    /// The key-values selected, in the order asked for.
    pub kvs: Vec<KeyValue>,
    /// The revision read at (the response header's: the store's current
    /// revision, or the one asked for).
    pub revision: Revision,
    /// More keys matched than the limit let through.
    pub more: bool,
    /// How many keys the range holds in all, whatever the limit (etcd's
    /// `count`; a later page counts from its first key on).
    pub count: u64,
    /// The cluster that answered.
    pub cluster: ClusterId,
}

impl Listing {
    /// A complete listing (no more keys) from an unnamed cluster.
    pub fn complete(kvs: Vec<KeyValue>, revision: Revision) -> Listing {
        Listing {
            count: u64::try_from(kvs.len()).unwrap_or(u64::MAX),
            kvs,
            revision,
            more: false,
            cluster: ClusterId::default(),
        }
    }
}

/// What a compare looks at, and the value compared against.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum CompareTarget {
    /// The key's create revision (0 when absent).
    CreateRevision(Revision),
    /// The key's mod revision (0 when absent).
    ModRevision(Revision),
    /// The key's version (0 when absent).
    Version(i64),
    /// The key's value (a missing key never compares equal).
    Value(Vec<u8>),
    /// The key's lease (0 when absent or none).
    Lease(LeaseId),
}

/// How a compare compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum CompareOp {
    /// `=`.
    Equal,
    /// `!=`.
    NotEqual,
    /// `<`.
    Less,
    /// `>`.
    Greater,
}

/// One condition of a transaction. With `prefix`, it must hold for every
/// key under `key` (and, with no key there, for an absent key).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Compare {
    /// The key or prefix.
    pub key: Key,
    /// Compare every key under `key`.
    pub prefix: bool,
    /// The comparison.
    pub op: CompareOp,
    /// What, against which value.
    pub target: CompareTarget,
}

impl Compare {
    /// One key's `target` compared by `op` (etcd-client's `Compare::*`).
    pub fn new(key: impl Into<Key>, op: CompareOp, target: CompareTarget) -> Compare {
        Compare {
            key: key.into(),
            prefix: false,
            op,
            target,
        }
    }

    /// `key`'s create revision compared with `revision` (0: the key is
    /// absent).
    pub fn create_revision(key: impl Into<Key>, op: CompareOp, revision: Revision) -> Compare {
        Compare::new(key, op, CompareTarget::CreateRevision(revision))
    }

    /// `key`'s mod revision compared with `revision`.
    pub fn mod_revision(key: impl Into<Key>, op: CompareOp, revision: Revision) -> Compare {
        Compare::new(key, op, CompareTarget::ModRevision(revision))
    }

    /// `key`'s version (the number of puts since its creation; 0: absent)
    /// compared with `version`.
    pub fn version(key: impl Into<Key>, op: CompareOp, version: i64) -> Compare {
        Compare::new(key, op, CompareTarget::Version(version))
    }

    /// `key`'s value compared with `value` (a missing key never compares
    /// equal).
    pub fn value(key: impl Into<Key>, op: CompareOp, value: impl Into<Vec<u8>>) -> Compare {
        Compare::new(key, op, CompareTarget::Value(value.into()))
    }

    /// `key`'s lease compared with `lease` (`LeaseId(0)`: none).
    pub fn lease(key: impl Into<Key>, op: CompareOp, lease: LeaseId) -> Compare {
        Compare::new(key, op, CompareTarget::Lease(lease))
    }

    /// The same comparison for every key under this compare's key, as a
    /// prefix (and, with no key there, for an absent key).
    pub fn with_prefix(mut self) -> Compare {
        self.prefix = true;
        self
    }
}

/// One operation of a transaction branch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum TxnOp {
    /// Put `key` = `value`, attached to `lease` (`LeaseId(0)`: none).
    Put {
        /// The key.
        key: Key,
        /// The value.
        value: Vec<u8>,
        /// The lease.
        lease: LeaseId,
    },
    /// Delete `key` (one key).
    Delete {
        /// The key.
        key: Key,
    },
    /// Read at the transaction's revision.
    Get(Get),
    /// A nested transaction.
    Txn(Box<Txn>),
}

impl TxnOp {
    /// Put `key` = `value`, attached to no lease.
    pub fn put(key: impl Into<Key>, value: impl Into<Vec<u8>>) -> TxnOp {
        TxnOp::put_with_lease(key, value, LeaseId(0))
    }

    /// Put `key` = `value`, attached to `lease`: the key is deleted when the
    /// lease ends.
    pub fn put_with_lease(key: impl Into<Key>, value: impl Into<Vec<u8>>, lease: LeaseId) -> TxnOp {
        TxnOp::Put {
            key: key.into(),
            value: value.into(),
            lease,
        }
    }

    /// Delete `key` (one key).
    pub fn delete(key: impl Into<Key>) -> TxnOp {
        TxnOp::Delete { key: key.into() }
    }

    /// Read what `get` selects, at the transaction's revision.
    pub fn get(get: Get) -> TxnOp {
        TxnOp::Get(get)
    }

    /// A nested transaction.
    pub fn txn(txn: Txn) -> TxnOp {
        TxnOp::Txn(Box::new(txn))
    }
}

/// A transaction: if every compare holds, `success` runs, else `failure`,
/// atomically in one revision.
///
/// Built in etcd-client's shape:
///
/// ```
/// use coord_core::io::{Compare, CompareOp, Txn, TxnOp};
/// use coord_core::Revision;
///
/// let txn = Txn::new()
///     .when([Compare::create_revision("/jobs/owner", CompareOp::Equal, Revision(0))])
///     .and_then([TxnOp::put("/jobs/owner", "node-7")])
///     .or_else([TxnOp::delete("/jobs/stale")]);
/// assert_eq!(txn.compares.len(), 1);
/// assert_eq!(txn.success, vec![TxnOp::put("/jobs/owner", b"node-7".to_vec())]);
/// assert_eq!(txn.failure.len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Txn {
    /// The conditions.
    pub compares: Vec<Compare>,
    /// Run when every compare holds.
    pub success: Vec<TxnOp>,
    /// Run otherwise.
    pub failure: Vec<TxnOp>,
}

/// The result of one transaction operation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum TxnOpResponse {
    /// A put was applied.
    Put,
    /// A delete removed this many keys.
    Delete {
        /// Keys deleted (0 or 1).
        deleted: i64,
    },
    /// A read's key-values.
    Get(Vec<KeyValue>),
    /// A nested transaction's result.
    Txn(TxnResponse),
}

/// A transaction's result.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct TxnResponse {
    /// True if the compares held (`success` ran).
    pub succeeded: bool,
    /// The store's revision after the transaction (its own revision if it
    /// wrote).
    pub revision: Revision,
    /// One response per operation of the branch that ran.
    pub responses: Vec<TxnOpResponse>,
    /// The cluster that answered.
    pub cluster: ClusterId,
}

impl Txn {
    /// An empty transaction: no compares, nothing in either branch.
    pub fn new() -> Txn {
        Txn::default()
    }

    /// Adds conditions: `success` runs only if every one holds.
    pub fn when(mut self, compares: impl IntoIterator<Item = Compare>) -> Txn {
        self.compares.extend(compares);
        self
    }

    /// Adds operations run when every compare holds.
    pub fn and_then(mut self, ops: impl IntoIterator<Item = TxnOp>) -> Txn {
        self.success.extend(ops);
        self
    }

    /// Adds operations run when a compare fails.
    pub fn or_else(mut self, ops: impl IntoIterator<Item = TxnOp>) -> Txn {
        self.failure.extend(ops);
        self
    }
}

impl TxnResponse {
    /// The key-values of the `index`-th response, if it is a read.
    pub fn kvs(&self, index: usize) -> Option<&[KeyValue]> {
        match self.responses.get(index) {
            Some(TxnOpResponse::Get(kvs)) => Some(kvs),
            _ => None,
        }
    }
}

/// A granted lease: its id and the TTL etcd granted (seconds; may exceed
/// the TTL asked for, etcd's minimum).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Granted {
    /// The new lease.
    pub lease: LeaseId,
    /// TTL granted, seconds.
    pub ttl_secs: i64,
}

/// What kind of message a watch stream delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum MessageKind {
    /// The watch was created (no events).
    Created,
    /// Events.
    Events,
    /// A progress notification: every event up to `revision` was sent.
    Progress,
}

/// Work for the driver: one etcd request, tagged with the op its
/// completion must carry back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Grant a lease; completes with [`Completion::Granted`].
    Grant {
        /// Completion tag.
        op: OpId,
        /// TTL to ask for, seconds.
        ttl_secs: i64,
    },
    /// Revoke a lease (deleting its keys); completes with
    /// [`Completion::Revoked`].
    Revoke {
        /// Completion tag.
        op: OpId,
        /// The lease.
        lease: LeaseId,
    },
    /// Open a keep-alive stream for `lease`, sending the first keep-alive.
    /// Replies come as [`Completion::KeepAliveReply`]; a failure to open or
    /// a break as [`Completion::KeepAliveClosed`]. Replies must always be
    /// drained.
    OpenKeepAlive {
        /// Stream tag.
        op: OpId,
        /// The lease.
        lease: LeaseId,
    },
    /// Send one keep-alive on an open stream.
    SendKeepAlive {
        /// The stream.
        stream: OpId,
        /// Its lease.
        lease: LeaseId,
    },
    /// Close the stream; later completions tagged with it are ignored.
    CloseKeepAlive {
        /// The stream.
        stream: OpId,
    },
    /// Read; completes with [`Completion::Listed`].
    Range {
        /// Completion tag.
        op: OpId,
        /// What and how.
        request: RangeRequest,
    },
    /// Run a transaction; completes with [`Completion::Txn`].
    Txn {
        /// Completion tag.
        op: OpId,
        /// The transaction.
        txn: Txn,
    },
    /// Watch `key` (or every key under it, with `prefix`) from
    /// `start_revision`, with prev kv. Messages come as
    /// [`Completion::WatchMessage`], the end as [`Completion::WatchClosed`]
    /// (`Failure::Compacted` when the start revision is compacted).
    Watch {
        /// Stream tag.
        op: OpId,
        /// The key or prefix.
        key: Key,
        /// Watch every key under `key`.
        prefix: bool,
        /// First revision wanted.
        start_revision: Revision,
    },
    /// Ask the watch stream for a progress notification (a liveness probe).
    RequestProgress {
        /// The stream.
        stream: OpId,
    },
    /// Cancel and drop the watch stream; later messages from it are ignored.
    CancelWatch {
        /// The stream.
        stream: OpId,
    },
    /// The request `op` passed its deadline: drop it; its completion, if
    /// any, would be ignored.
    Abandon {
        /// The request.
        op: OpId,
    },
}

/// How a request ended, or what a stream delivered: the driver's answer to
/// a [`Command`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Completion {
    /// A `Grant` ended.
    Granted {
        /// The command's op.
        op: OpId,
        /// How.
        outcome: Outcome<Granted>,
    },
    /// A `Revoke` ended.
    Revoked {
        /// The command's op.
        op: OpId,
        /// How.
        outcome: Outcome<()>,
    },
    /// A `Range` ended.
    Listed {
        /// The command's op.
        op: OpId,
        /// How.
        outcome: Outcome<Listing>,
    },
    /// A `Txn` ended.
    Txn {
        /// The command's op.
        op: OpId,
        /// How.
        outcome: Outcome<TxnResponse>,
    },
    /// A keep-alive reply arrived on the stream opened by `stream`.
    KeepAliveReply {
        /// The `OpenKeepAlive` op.
        stream: OpId,
        /// Remaining TTL in seconds; 0 means the lease is gone.
        ttl_secs: i64,
    },
    /// The keep-alive stream failed to open, broke or ended.
    KeepAliveClosed {
        /// The `OpenKeepAlive` op.
        stream: OpId,
        /// Why.
        failure: Failure,
    },
    /// A message on the watch stream opened by `stream`.
    WatchMessage {
        /// The `Watch` op.
        stream: OpId,
        /// What kind.
        kind: MessageKind,
        /// Events (empty for created and progress).
        events: Vec<WatchEvent>,
        /// The response header's revision.
        revision: Revision,
        /// The cluster that answered.
        cluster: ClusterId,
    },
    /// The watch stream failed to open, broke, ended, or was cancelled by
    /// etcd; `Failure::Compacted` when its start revision is compacted.
    WatchClosed {
        /// The `Watch` op.
        stream: OpId,
        /// Why.
        failure: Failure,
    },
}

impl Completion {
    /// The op or stream this completion answers.
    pub fn op(&self) -> OpId {
        match self {
            Completion::Granted { op, .. }
            | Completion::Revoked { op, .. }
            | Completion::Listed { op, .. }
            | Completion::Txn { op, .. } => *op,
            Completion::KeepAliveReply { stream, .. }
            | Completion::KeepAliveClosed { stream, .. }
            | Completion::WatchMessage { stream, .. }
            | Completion::WatchClosed { stream, .. } => *stream,
        }
    }
}

impl Command {
    /// The op or stream this command is about.
    pub fn op(&self) -> OpId {
        match self {
            Command::Grant { op, .. }
            | Command::Revoke { op, .. }
            | Command::OpenKeepAlive { op, .. }
            | Command::Range { op, .. }
            | Command::Txn { op, .. }
            | Command::Watch { op, .. }
            | Command::Abandon { op } => *op,
            Command::SendKeepAlive { stream, .. }
            | Command::CloseKeepAlive { stream }
            | Command::RequestProgress { stream }
            | Command::CancelWatch { stream } => *stream,
        }
    }

    /// True for a command that starts a request or stream (and so carries a
    /// fresh op id).
    pub fn starts_op(&self) -> bool {
        matches!(
            self,
            Command::Grant { .. }
                | Command::Revoke { .. }
                | Command::OpenKeepAlive { .. }
                | Command::Range { .. }
                | Command::Txn { .. }
                | Command::Watch { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_txn_builder_adds_each_part_to_its_own_list() {
        let absent = Compare::create_revision("/k", CompareOp::Equal, Revision(0));
        let held = Compare::lease("/k", CompareOp::Equal, LeaseId(7));
        let put = TxnOp::Put {
            key: Key(b"/k".to_vec()),
            value: b"v".to_vec(),
            lease: LeaseId(7),
        };
        let txn = Txn::new()
            .when([absent.clone()])
            .and_then([put.clone()])
            .or_else([put.clone()])
            .when([held.clone()])
            .and_then([]);
        assert_eq!(
            txn,
            Txn {
                compares: vec![absent, held],
                success: vec![put.clone()],
                failure: vec![put],
            }
        );
    }

    #[test]
    fn a_complete_listing_has_no_more_keys_and_names_no_cluster() {
        let kv = KeyValue {
            key: Key(b"/k".to_vec()),
            value: b"v".to_vec(),
            create_revision: Revision(3),
            mod_revision: Revision(4),
            lease: LeaseId(0),
        };
        assert_eq!(
            Listing::complete(vec![kv.clone()], Revision(7)),
            Listing {
                kvs: vec![kv],
                revision: Revision(7),
                more: false,
                count: 1,
                cluster: ClusterId::default(),
            }
        );
    }
}
