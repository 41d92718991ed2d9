//! In-process locks, for tests: [`coord_core::lock::LockTable`] behind a
//! mutex, with the same slots, tokens and `lost()` as the other backends
//! (an [`evict`](MemoryLocks::evict) stands for a holder declared dead).

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};

use coord_core::lock::{Grant, LockTable, Released, Slots};
use tokio::sync::watch;

use super::outcome::{LockError, LockLost, Taken};
use super::watchdog::signalled;

/// A set of in-process locks; clones share it.
#[derive(Debug, Clone, Default)]
pub struct MemoryLocks {
    inner: Arc<std::sync::Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    table: LockTable,
    /// Each live hold's loss signal, by name and slot.
    holds: BTreeMap<(String, u32), watch::Sender<bool>>,
}

impl MemoryLocks {
    /// An empty set.
    pub fn new() -> Self {
        MemoryLocks::default()
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn try_acquire(
        &self,
        name: &str,
        slots: Slots,
    ) -> Result<Taken<MemoryHold>, LockError> {
        let mut inner = self.inner();
        let grant = inner
            .table
            .try_acquire(name, slots)
            .ok_or(LockError::Locked)?;
        let (lost_tx, lost) = watch::channel(false);
        inner.holds.insert((name.to_string(), grant.slot), lost_tx);
        Ok(Taken {
            slot: grant.slot,
            token: grant.token,
            hold: MemoryHold {
                locks: self.clone(),
                name: name.to_string(),
                grant,
                lost,
                released: false,
            },
        })
    }

    /// Ends the hold of `slot` of `name` as if its holder had died: its
    /// `lost()` completes, and the slot is free. False if nothing held it.
    pub fn evict(&self, name: &str, slot: u32) -> bool {
        let mut inner = self.inner();
        let evicted = inner.table.evict(name, slot).is_some();
        if let Some(lost) = inner.holds.remove(&(name.to_string(), slot)) {
            lost.send_replace(true);
        }
        evicted
    }

    /// How many slots of `name` are held.
    pub fn held(&self, name: &str) -> usize {
        self.inner().table.held(name)
    }
}

#[derive(Debug)]
pub(super) struct MemoryHold {
    locks: MemoryLocks,
    name: String,
    grant: Grant,
    lost: watch::Receiver<bool>,
    released: bool,
}

impl MemoryHold {
    pub(super) fn release(&mut self) -> Released {
        if std::mem::replace(&mut self.released, true) {
            return Released::AlreadyGone;
        }
        let mut inner = self.locks.inner();
        let released = inner.table.release(&self.name, self.grant);
        if released == Released::Released {
            inner.holds.remove(&(self.name.clone(), self.grant.slot));
        }
        released
    }

    pub(super) async fn lost(&self) -> LockLost {
        signalled(&self.lost).await;
        LockLost::TakenOver
    }
}

impl Drop for MemoryHold {
    fn drop(&mut self) {
        self.release();
    }
}
