//! A model of the etcd v3 semantics coord relies on: one global revision;
//! keys with create/mod revision, version and lease; range by prefix;
//! put/delete with prev kv; transactions with compares on create revision,
//! mod revision, version, value and lease; leases with TTL, expiry (deleting
//! attached keys in one revision), keep-alive, revoke and time-to-live;
//! watch history with prev kv; compaction.
//!
//! Pure and deterministic: time comes in as `now` (virtual milliseconds).

use std::collections::{BTreeMap, BTreeSet};

/// A key-value pair as etcd stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// Key bytes.
    pub key: Vec<u8>,
    /// Value bytes.
    pub value: Vec<u8>,
    /// Revision of the put that created this incarnation of the key.
    pub create_revision: i64,
    /// Revision of the last put.
    pub mod_revision: i64,
    /// Puts since creation (1 after the create).
    pub version: i64,
    /// Attached lease, 0 for none.
    pub lease: i64,
}

/// A watch event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A put; `prev` is the value before, if any.
    Put {
        /// The new kv.
        kv: KeyValue,
        /// The kv before.
        prev: Option<KeyValue>,
    },
    /// A delete at `revision`; `prev` is the deleted kv.
    Delete {
        /// The key.
        key: Vec<u8>,
        /// The revision of the delete.
        revision: i64,
        /// The deleted kv.
        prev: KeyValue,
        /// Why.
        cause: DeleteCause,
    },
}

/// Why a key was deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteCause {
    /// A delete (or a transaction's).
    Deleted,
    /// Its lease was revoked.
    Revoked,
    /// Its lease expired.
    Expired,
    /// etcd was wiped (or restored from an older snapshot).
    Wiped,
}

impl Event {
    /// The revision the event happened at.
    pub fn revision(&self) -> i64 {
        match self {
            Event::Put { kv, .. } => kv.mod_revision,
            Event::Delete { revision, .. } => *revision,
        }
    }

    /// The key the event is about.
    pub fn key(&self) -> &[u8] {
        match self {
            Event::Put { kv, .. } => &kv.key,
            Event::Delete { key, .. } => key,
        }
    }
}

/// Model errors, as etcd reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelError {
    /// "requested lease not found".
    LeaseNotFound,
    /// "required revision has been compacted"; carries the compact revision.
    Compacted(i64),
    /// "required revision is a future revision".
    FutureRevision,
}

/// What a compare looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Create revision (0 if the key is absent).
    CreateRevision(i64),
    /// Mod revision (0 if absent).
    ModRevision(i64),
    /// Version (0 if absent).
    Version(i64),
    /// Value (empty if absent).
    Value(Vec<u8>),
    /// Lease (0 if absent or none).
    Lease(i64),
}

/// How a compare compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    /// Equal.
    Equal,
    /// Not equal.
    NotEqual,
    /// Less.
    Less,
    /// Greater.
    Greater,
}

/// One compare of a transaction. With `prefix` it must hold for every key
/// under `key` (and, when there is none, for an absent key), as etcd's
/// range compares do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compare {
    /// The key, or the prefix.
    pub key: Vec<u8>,
    /// Compare every key under `key`.
    pub prefix: bool,
    /// The comparison.
    pub op: CompareOp,
    /// What and against which value.
    pub target: Target,
}

/// The order of a read's results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    /// By key.
    Key,
    /// By create revision, oldest first.
    CreateAscending,
    /// By create revision, newest first.
    CreateDescending,
}

/// What a read selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Select {
    /// The key, or the prefix.
    pub key: Vec<u8>,
    /// Every key under `key`.
    pub prefix: bool,
    /// Order.
    pub sort: Sort,
    /// At most this many (0: all).
    pub limit: usize,
}

/// One operation of a transaction branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOp {
    /// Put with an optional lease (0 for none).
    Put {
        /// Key.
        key: Vec<u8>,
        /// Value.
        value: Vec<u8>,
        /// Lease.
        lease: i64,
    },
    /// Delete one key.
    Delete {
        /// Key.
        key: Vec<u8>,
    },
    /// A read (it sees the branch's earlier writes).
    Get(Select),
    /// A nested transaction.
    Txn(Box<TxnRequest>),
}

/// A transaction.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxnRequest {
    /// The conditions.
    pub compares: Vec<Compare>,
    /// Run when every compare holds.
    pub success: Vec<TxnOp>,
    /// Run otherwise.
    pub failure: Vec<TxnOp>,
}

/// What one operation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    /// A put.
    Put,
    /// A delete; keys deleted.
    Delete(i64),
    /// A read's kvs.
    Get(Vec<KeyValue>),
    /// A nested transaction.
    Txn(TxnResult),
}

/// What a transaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnResult {
    /// Whether the compares held.
    pub succeeded: bool,
    /// One result per operation of the branch that ran.
    pub results: Vec<OpResult>,
}

/// The branches a transaction takes, decided before anything is applied
/// (etcd evaluates every compare, nested ones too, against the state before
/// the transaction).
struct Path {
    succeeded: bool,
    nested: Vec<Path>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Lease {
    ttl: i64,
    expires_at: u64,
    keys: BTreeSet<Vec<u8>>,
}

/// The model of one etcd cluster's state.
#[derive(Debug, Clone)]
pub struct EtcdModel {
    revision: i64,
    compacted: i64,
    kvs: BTreeMap<Vec<u8>, KeyValue>,
    leases: BTreeMap<i64, Lease>,
    history: Vec<Event>,
    next_lease: i64,
    min_ttl: i64,
}

impl Default for EtcdModel {
    fn default() -> Self {
        Self::new()
    }
}

impl EtcdModel {
    /// An empty store at revision 1 (as a fresh etcd reports), with etcd's
    /// minimum lease TTL under default timing (2 s).
    pub fn new() -> Self {
        EtcdModel {
            revision: 1,
            compacted: 0,
            kvs: BTreeMap::new(),
            leases: BTreeMap::new(),
            history: Vec::new(),
            next_lease: 0x694d_0000_0000,
            min_ttl: 2,
        }
    }

    /// etcd wiped: every key, lease and event gone, the revision back at 1
    /// (lease ids keep counting, as a new etcd's would not repeat them).
    /// Returns the keys that were present.
    pub fn wipe(&mut self) -> Vec<KeyValue> {
        let gone = std::mem::take(&mut self.kvs).into_values().collect();
        self.leases.clear();
        self.history.clear();
        self.revision = 1;
        self.compacted = 0;
        gone
    }

    /// The current revision.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The compaction revision (0 if never compacted).
    pub fn compacted(&self) -> i64 {
        self.compacted
    }

    /// Grants a lease; returns its id and the TTL granted (at least the
    /// minimum TTL).
    pub fn grant(&mut self, now: u64, ttl: i64) -> (i64, i64) {
        self.next_lease += 1;
        let id = self.next_lease;
        let ttl = ttl.max(self.min_ttl);
        self.leases.insert(
            id,
            Lease {
                ttl,
                expires_at: now + ttl_ms(ttl),
                keys: BTreeSet::new(),
            },
        );
        (id, ttl)
    }

    /// Renews a lease for its full TTL; returns the TTL, or 0 if the lease
    /// does not exist (as etcd's keep-alive stream does).
    pub fn keep_alive(&mut self, now: u64, id: i64) -> i64 {
        match self.leases.get_mut(&id) {
            Some(l) => {
                l.expires_at = now + ttl_ms(l.ttl);
                l.ttl
            }
            None => 0,
        }
    }

    /// Remaining TTL in whole seconds (rounded down) and granted TTL, or
    /// `None` if the lease does not exist.
    pub fn time_to_live(&self, now: u64, id: i64) -> Option<(i64, i64)> {
        self.leases.get(&id).map(|l| {
            let left = l.expires_at.saturating_sub(now) / 1000;
            (i64::try_from(left).unwrap_or(i64::MAX), l.ttl)
        })
    }

    /// Ids of every live lease.
    pub fn leases(&self) -> Vec<i64> {
        self.leases.keys().copied().collect()
    }

    /// Revokes a lease, deleting its keys in one revision.
    pub fn revoke(&mut self, id: i64) -> Result<(), ModelError> {
        self.end_lease(id, DeleteCause::Revoked)
    }

    fn end_lease(&mut self, id: i64, cause: DeleteCause) -> Result<(), ModelError> {
        let lease = self.leases.remove(&id).ok_or(ModelError::LeaseNotFound)?;
        if !lease.keys.is_empty() {
            self.revision += 1;
            for key in lease.keys {
                self.delete_at(&key, self.revision, cause);
            }
        }
        Ok(())
    }

    /// Deletes every lease whose expiry has passed (each in its own
    /// revision, as etcd's lessor revokes them one by one). Returns them.
    pub fn expire(&mut self, now: u64) -> Vec<i64> {
        let due: Vec<i64> = self
            .leases
            .iter()
            .filter(|(_, l)| l.expires_at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in &due {
            let _ = self.end_lease(*id, DeleteCause::Expired);
        }
        due
    }

    /// What a new etcd leader does: every lease's TTL starts over at `now`.
    pub fn reset_lease_ttls(&mut self, now: u64) {
        for l in self.leases.values_mut() {
            l.expires_at = now + ttl_ms(l.ttl);
        }
    }

    /// Puts `key` (attached to `lease`, 0 for none). Returns the revision.
    pub fn put(&mut self, key: &[u8], value: &[u8], lease: i64) -> Result<i64, ModelError> {
        let req = TxnRequest {
            success: vec![TxnOp::Put {
                key: key.to_vec(),
                value: value.to_vec(),
                lease,
            }],
            ..TxnRequest::default()
        };
        self.txn(&req).map(|_| self.revision)
    }

    /// Deletes `key`; returns the deleted kv, if any.
    pub fn delete(&mut self, key: &[u8]) -> Option<KeyValue> {
        let prev = self.kvs.get(key).cloned()?;
        self.revision += 1;
        self.delete_at(key, self.revision, DeleteCause::Deleted);
        Some(prev)
    }

    /// Runs a transaction: if every compare holds, `success`, else
    /// `failure`, all in one revision (none if the branch writes nothing).
    /// Fails without effect if a put names a missing lease.
    pub fn txn(&mut self, req: &TxnRequest) -> Result<TxnResult, ModelError> {
        let path = self.decide(req);
        self.check_leases(req, &path)?;
        let rev = self.revision + 1;
        let mut wrote = false;
        let result = self.apply(req, &path, rev, &mut wrote);
        if wrote {
            self.revision = rev;
        }
        Ok(result)
    }

    fn decide(&self, req: &TxnRequest) -> Path {
        let succeeded = req.compares.iter().all(|c| self.holds(c));
        let ops = if succeeded {
            &req.success
        } else {
            &req.failure
        };
        let nested = ops
            .iter()
            .filter_map(|op| match op {
                TxnOp::Txn(t) => Some(self.decide(t)),
                _ => None,
            })
            .collect();
        Path { succeeded, nested }
    }

    fn check_leases(&self, req: &TxnRequest, path: &Path) -> Result<(), ModelError> {
        let ops = if path.succeeded {
            &req.success
        } else {
            &req.failure
        };
        let mut nested = path.nested.iter();
        for op in ops {
            match op {
                TxnOp::Put { lease, .. } if *lease != 0 && !self.leases.contains_key(lease) => {
                    return Err(ModelError::LeaseNotFound);
                }
                TxnOp::Txn(t) => {
                    if let Some(p) = nested.next() {
                        self.check_leases(t, p)?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn apply(&mut self, req: &TxnRequest, path: &Path, rev: i64, wrote: &mut bool) -> TxnResult {
        let ops = if path.succeeded {
            &req.success
        } else {
            &req.failure
        };
        let mut nested = path.nested.iter();
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            results.push(match op {
                TxnOp::Put { key, value, lease } => {
                    self.put_at(key, value, *lease, rev);
                    *wrote = true;
                    OpResult::Put
                }
                TxnOp::Delete { key } => {
                    let existed = self.kvs.contains_key(key);
                    if existed {
                        self.delete_at(key, rev, DeleteCause::Deleted);
                        *wrote = true;
                    }
                    OpResult::Delete(i64::from(existed))
                }
                TxnOp::Get(select) => OpResult::Get(self.select(select)),
                TxnOp::Txn(t) => match nested.next() {
                    Some(p) => OpResult::Txn(self.apply(t, p, rev, wrote)),
                    None => OpResult::Txn(TxnResult {
                        succeeded: false,
                        results: Vec::new(),
                    }),
                },
            });
        }
        TxnResult {
            succeeded: path.succeeded,
            results,
        }
    }

    /// The kvs `select` picks now, in its order.
    pub fn select(&self, select: &Select) -> Vec<KeyValue> {
        let mut kvs: Vec<KeyValue> = if select.prefix {
            self.kvs
                .range(select.key.clone()..)
                .take_while(|(k, _)| k.starts_with(&select.key))
                .map(|(_, v)| v.clone())
                .collect()
        } else {
            self.kvs.get(&select.key).cloned().into_iter().collect()
        };
        match select.sort {
            Sort::Key => {}
            Sort::CreateAscending => kvs.sort_by_key(|kv| kv.create_revision),
            Sort::CreateDescending => kvs.sort_by_key(|kv| std::cmp::Reverse(kv.create_revision)),
        }
        if select.limit > 0 {
            kvs.truncate(select.limit);
        }
        kvs
    }

    fn holds(&self, c: &Compare) -> bool {
        let kvs = self.select(&Select {
            key: c.key.clone(),
            prefix: c.prefix,
            sort: Sort::Key,
            limit: 0,
        });
        if kvs.is_empty() {
            // etcd: a value compare on no key always fails; the others
            // compare against zero.
            return match &c.target {
                Target::Value(_) => false,
                _ => compare_kv(c, None),
            };
        }
        kvs.iter().all(|kv| compare_kv(c, Some(kv)))
    }

    fn put_at(&mut self, key: &[u8], value: &[u8], lease: i64, rev: i64) {
        let prev = self.kvs.get(key).cloned();
        if let Some(p) = &prev {
            if p.lease != 0 && p.lease != lease {
                if let Some(l) = self.leases.get_mut(&p.lease) {
                    l.keys.remove(key);
                }
            }
        }
        if lease != 0 {
            if let Some(l) = self.leases.get_mut(&lease) {
                l.keys.insert(key.to_vec());
            }
        }
        let kv = KeyValue {
            key: key.to_vec(),
            value: value.to_vec(),
            create_revision: prev.as_ref().map_or(rev, |p| p.create_revision),
            mod_revision: rev,
            version: prev.as_ref().map_or(1, |p| p.version + 1),
            lease,
        };
        self.kvs.insert(key.to_vec(), kv.clone());
        self.history.push(Event::Put { kv, prev });
    }

    fn delete_at(&mut self, key: &[u8], rev: i64, cause: DeleteCause) {
        if let Some(prev) = self.kvs.remove(key) {
            if prev.lease != 0 {
                if let Some(l) = self.leases.get_mut(&prev.lease) {
                    l.keys.remove(key);
                }
            }
            self.history.push(Event::Delete {
                key: key.to_vec(),
                revision: rev,
                prev,
                cause,
            });
        }
    }

    /// The kv at `key` now.
    pub fn get(&self, key: &[u8]) -> Option<&KeyValue> {
        self.kvs.get(key)
    }

    /// Every kv whose key starts with `prefix`, at `revision` (the current
    /// one if `None`), with the revision read at.
    pub fn range(
        &self,
        prefix: &[u8],
        revision: Option<i64>,
    ) -> Result<(Vec<KeyValue>, i64), ModelError> {
        let at = revision.unwrap_or(self.revision);
        if at > self.revision {
            return Err(ModelError::FutureRevision);
        }
        if at < self.compacted {
            return Err(ModelError::Compacted(self.compacted));
        }
        if at == self.revision {
            let kvs = self
                .kvs
                .range(prefix.to_vec()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(_, v)| v.clone())
                .collect();
            return Ok((kvs, self.revision));
        }
        // Rebuild the past state by undoing newer events.
        let mut state: BTreeMap<Vec<u8>, KeyValue> = self.kvs.clone();
        for ev in self.history.iter().rev().take_while(|e| e.revision() > at) {
            match ev {
                Event::Put { kv, prev } => match prev {
                    Some(p) => {
                        state.insert(kv.key.clone(), p.clone());
                    }
                    None => {
                        state.remove(&kv.key);
                    }
                },
                Event::Delete { key, prev, .. } => {
                    state.insert(key.clone(), prev.clone());
                }
            }
        }
        let kvs = state
            .into_iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v)
            .collect();
        Ok((kvs, at))
    }

    /// Events under `prefix` from revision `from` (inclusive), as a watch
    /// started there would deliver them; `Compacted` if `from` is at or
    /// below the compaction revision (and not 0, which means "now").
    pub fn events_since(&self, prefix: &[u8], from: i64) -> Result<Vec<Event>, ModelError> {
        self.events_of(prefix, true, from)
    }

    /// Events of `key` (every key under it, with `prefix`) from revision
    /// `from`, as a watch started there would deliver them.
    pub fn events_of(&self, key: &[u8], prefix: bool, from: i64) -> Result<Vec<Event>, ModelError> {
        Ok(self.events_from(key, prefix, from)?.cloned().collect())
    }

    /// The events [`events_of`](Self::events_of) returns, in order, read
    /// in place.
    pub fn events_from<'a>(
        &'a self,
        key: &'a [u8],
        prefix: bool,
        from: i64,
    ) -> Result<impl Iterator<Item = &'a Event> + 'a, ModelError> {
        if from != 0 && from <= self.compacted {
            return Err(ModelError::Compacted(self.compacted));
        }
        // History is in revision order: start at `from` at once.
        let start = self.history.partition_point(|e| e.revision() < from);
        Ok(self.history[start..].iter().filter(move |e| {
            if prefix {
                e.key().starts_with(key)
            } else {
                e.key() == key
            }
        }))
    }

    /// Compacts history up to `rev` (at most the current revision).
    pub fn compact(&mut self, rev: i64) -> Result<(), ModelError> {
        if rev > self.revision {
            return Err(ModelError::FutureRevision);
        }
        if rev <= self.compacted {
            return Err(ModelError::Compacted(self.compacted));
        }
        self.compacted = rev;
        self.history.retain(|e| e.revision() > rev);
        Ok(())
    }
}

fn compare_kv(c: &Compare, kv: Option<&KeyValue>) -> bool {
    let ord = match &c.target {
        Target::CreateRevision(v) => kv.map_or(0, |k| k.create_revision).cmp(v),
        Target::ModRevision(v) => kv.map_or(0, |k| k.mod_revision).cmp(v),
        Target::Version(v) => kv.map_or(0, |k| k.version).cmp(v),
        Target::Lease(v) => kv.map_or(0, |k| k.lease).cmp(v),
        Target::Value(v) => kv.map_or(&[][..], |k| &k.value[..]).cmp(&v[..]),
    };
    match c.op {
        CompareOp::Equal => ord.is_eq(),
        CompareOp::NotEqual => ord.is_ne(),
        CompareOp::Less => ord.is_lt(),
        CompareOp::Greater => ord.is_gt(),
    }
}

fn ttl_ms(ttl: i64) -> u64 {
    u64::try_from(ttl).unwrap_or(0).saturating_mul(1000)
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
