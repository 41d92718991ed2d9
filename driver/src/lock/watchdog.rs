//! A hold's background task whose end means the hold is lost: a file
//! marker's refresher, a Redis key's extender, a Postgres lock's
//! connection. One type serves the three holds.

use std::future::Future;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::outcome::LockLost;

/// Runs a hold's background task; the task ending by itself fires the
/// watchdog with the loss it returns (the hold is lost). Stopping it (or
/// dropping it) aborts the task without firing.
#[derive(Debug)]
pub(super) struct Watchdog {
    fired: watch::Receiver<Option<LockLost>>,
    task: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Spawns `task` on the current tokio runtime.
    pub(super) fn spawn<F>(task: F) -> Watchdog
    where
        F: Future<Output = LockLost> + Send + 'static,
    {
        let (fire, fired) = watch::channel(None);
        let task = tokio::spawn(async move {
            let lost = task.await;
            fire.send_replace(Some(lost));
        });
        Watchdog {
            fired,
            task: Some(task),
        }
    }

    /// Whether the task ended by itself (the hold is lost).
    // Asked by the Redis and Postgres holds only.
    #[cfg_attr(
        not(all(any(feature = "redis", feature = "postgres"), not(madsim))),
        allow(dead_code)
    )]
    pub(super) fn has_fired(&self) -> bool {
        self.fired.borrow().is_some()
    }

    /// Aborts the task (idempotent). A watchdog that had not fired then
    /// never fires.
    pub(super) fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    /// The loss, once the task ended by itself; never if it was stopped
    /// first.
    pub(super) async fn fired(&self) -> LockLost {
        let mut fired = self.fired.clone();
        // An error: stopped, the task was aborted before it ended.
        let lost = fired
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|l| l.clone());
        match lost {
            Some(lost) => lost,
            None => std::future::pending().await,
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(all(test, not(madsim)))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_task_that_ends_fires_it_with_its_loss() {
        let dog = Watchdog::spawn(async { LockLost::Expired });
        let lost = tokio::time::timeout(Duration::from_secs(30), dog.fired())
            .await
            .expect("a task that ended fires the watchdog");
        assert_eq!(lost, LockLost::Expired);
        assert!(dog.has_fired());
    }

    #[tokio::test]
    async fn a_stopped_task_never_fires_it() {
        // Kept alive: the task would end by itself were it dropped.
        let (_release, wait) = tokio::sync::oneshot::channel::<()>();
        let mut dog = Watchdog::spawn(async move {
            let _ = wait.await;
            LockLost::TakenOver
        });
        dog.stop();
        dog.stop();
        // The aborted task drops its end of the signal without firing.
        let mut signal = dog.fired.clone();
        let closed = tokio::time::timeout(Duration::from_secs(30), signal.changed())
            .await
            .expect("the aborted task is dropped");
        assert!(closed.is_err(), "the aborted task fired");
        assert!(!dog.has_fired());
        let fired = tokio::time::timeout(Duration::ZERO, dog.fired()).await;
        assert!(fired.is_err(), "fired() completed for a stopped watchdog");
    }
}

/// Completes once `signal` turns true (a hold's loss, set by its
/// refresher or connection task); never if its sender is gone first (the
/// hold was released).
pub(super) async fn signalled(signal: &tokio::sync::watch::Receiver<bool>) {
    let mut signal = signal.clone();
    if signal.wait_for(|set| *set).await.is_err() {
        std::future::pending::<()>().await;
    }
}
