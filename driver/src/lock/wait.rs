//! Waiting for a lock on the backends without a wait queue: polling.

use std::future::Future;
use std::time::Duration;

use super::LockError;

/// First and longest pause between tries of a polling wait.
const FIRST_PAUSE: Duration = Duration::from_millis(5);
const LONGEST_PAUSE: Duration = Duration::from_millis(100);

/// Calls `try_once` until it gives a holder or fails with anything but
/// `Locked`, pausing 5 ms, doubling to 100 ms, between tries.
pub(super) async fn polling<T, F, Fut>(mut try_once: F) -> Result<T, LockError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LockError>>,
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
