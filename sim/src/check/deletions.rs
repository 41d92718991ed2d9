//! etcd's deletions of election and lock keys, indexed once per run for
//! every checker that asks when a key incarnation went away.

use std::collections::BTreeMap;

use crate::history::{DeleteCause, LogEntry};

/// Every deletion of etcd's log: when each key incarnation (key, create
/// revision) was deleted, and why.
pub(super) type Deletions = BTreeMap<(String, i64), (u64, Option<DeleteCause>)>;

/// The deletions of each key incarnation of `log`: (key, create revision)
/// -> (at, cause).
pub(super) fn deletions(log: &[LogEntry]) -> Deletions {
    log.iter()
        .filter(|e| !e.present)
        .map(|e| ((e.key.clone(), e.create_revision), (e.at_ms, e.cause)))
        .collect()
}
