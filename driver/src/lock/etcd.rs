//! The etcd backend: a name's slots as etcd mutexes (`concurrency.Mutex`
//! keys, so `etcdctl lock` queues with slot 0) on one session.

use std::future::Future;

use coord_core::lock::Slots;

use super::outcome::{LockError, Taken};
use crate::election::{Mutex, MutexGuard};
use crate::session::Session;

/// A free slot of `name` now, one round trip per slot; `Locked` if none.
pub(super) async fn try_slots(
    session: &Session,
    prefix: &str,
    name: &str,
    slots: Slots,
) -> Result<Taken<MutexGuard>, LockError> {
    for slot in 0..slots.get() {
        let mutex = Mutex::on(session, &etcd_name(prefix, name, slot)).map_err(etcd_error)?;
        match mutex.try_lock().await {
            Ok(guard) => return Ok(taken(slot, guard)),
            // Held by someone, or by this session already.
            Err(crate::Error::Locked | crate::Error::AlreadyCampaigning { .. }) => continue,
            Err(e) => return Err(etcd_error(e)),
        }
    }
    Err(LockError::Locked)
}

/// Queues for every slot of `name` at once and keeps the first slot
/// won; the other waits are dropped (withdrawing their keys). A slot
/// won at the same moment as the first is released.
pub(super) async fn wait_slots(
    session: &Session,
    prefix: &str,
    name: &str,
    slots: Slots,
) -> Result<Taken<MutexGuard>, LockError> {
    let mut mutexes = Vec::new();
    for slot in 0..slots.get() {
        let mutex = Mutex::on(session, &etcd_name(prefix, name, slot)).map_err(etcd_error)?;
        mutexes.push((slot, mutex));
    }
    let waits = mutexes.iter().map(|(slot, mutex)| {
        let slot = *slot;
        Box::pin(async move { (slot, mutex.lock().await) })
    });
    let mut waits: Vec<_> = waits.collect();
    let (slot, result) = std::future::poll_fn(|cx| {
        for w in waits.iter_mut() {
            if let std::task::Poll::Ready(done) = w.as_mut().poll(cx) {
                return std::task::Poll::Ready(done);
            }
        }
        std::task::Poll::Pending
    })
    .await;
    // Dropping the other waits withdraws them from their queues.
    drop(waits);
    let guard = result.map_err(etcd_error)?;
    Ok(taken(slot, guard))
}

fn taken(slot: u32, guard: MutexGuard) -> Taken<MutexGuard> {
    Taken {
        slot,
        token: guard.token(),
        hold: guard,
    }
}

pub(super) fn etcd_name(prefix: &str, name: &str, slot: u32) -> String {
    if slot == 0 {
        format!("{prefix}{name}")
    } else {
        // Not under slot 0's queue (`prefix + name + "/"`), nor any
        // other name's: lock names never start with '.'.
        format!("{prefix}.slots/{name}/{slot}")
    }
}

pub(super) fn etcd_error(e: crate::Error) -> LockError {
    match e {
        crate::Error::Locked => LockError::Locked,
        crate::Error::Timeout => LockError::Timeout,
        e => LockError::Etcd(e),
    }
}
