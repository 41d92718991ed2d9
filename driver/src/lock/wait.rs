//! Waiting for a lock: polling for the backends without a wait queue,
//! and racing a name's slots for etcd.

use std::future::Future;
use std::time::Duration;

use super::{etcd_error, etcd_name, Holder, LockError, Slots};
use crate::mutex::Mutex;
use crate::session::Session;

/// First and longest pause between tries of a polling wait.
const FIRST_PAUSE: Duration = Duration::from_millis(5);
const LONGEST_PAUSE: Duration = Duration::from_millis(100);

/// Calls `try_once` until it gives a holder or fails with anything but
/// `Locked`, pausing 5 ms, doubling to 100 ms, between tries.
pub(super) async fn polling<F, Fut>(mut try_once: F) -> Result<Holder, LockError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Holder, LockError>>,
{
    let mut pause = FIRST_PAUSE;
    loop {
        match try_once().await {
            Err(LockError::Locked) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(LONGEST_PAUSE);
            }
            other => return other,
        }
    }
}

/// Queues for every slot of `name` at once and keeps the first slot
/// won; the other waits are dropped (withdrawing their keys). A slot
/// won at the same moment as the first is released.
pub(super) async fn etcd_slots(
    session: &Session,
    prefix: &str,
    name: &str,
    slots: Slots,
) -> Result<Holder, LockError> {
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
    Ok(Holder::etcd(name, slot, guard))
}
