//! A hold's background task whose end means the hold is lost: a file
//! marker's refresher, a Redis key's extender, a Postgres lock's
//! connection. One type serves the three holds.

use std::future::Future;

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Runs a hold's background task; the task ending by itself fires the
/// watchdog (the hold is lost). Stopping it (or dropping it) aborts the
/// task without firing.
#[derive(Debug)]
pub(super) struct Watchdog {
    fired: watch::Receiver<bool>,
    task: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Spawns `task` on the current tokio runtime.
    pub(super) fn spawn<F>(task: F) -> Watchdog
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (fire, fired) = watch::channel(false);
        let task = tokio::spawn(async move {
            task.await;
            fire.send_replace(true);
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
        *self.fired.borrow()
    }

    /// Aborts the task (idempotent). A watchdog that had not fired then
    /// never fires.
    pub(super) fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    /// Completes once the task ended by itself; never if it was stopped
    /// first.
    pub(super) async fn fired(&self) {
        super::signalled(&self.fired).await;
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
    async fn a_task_that_ends_fires_it() {
        let dog = Watchdog::spawn(async {});
        tokio::time::timeout(Duration::from_secs(30), dog.fired())
            .await
            .expect("a task that ended fires the watchdog");
        assert!(dog.has_fired());
    }

    #[tokio::test]
    async fn a_stopped_task_never_fires_it() {
        // Kept alive: the task would end by itself were it dropped.
        let (_release, wait) = tokio::sync::oneshot::channel::<()>();
        let mut dog = Watchdog::spawn(async move {
            let _ = wait.await;
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
