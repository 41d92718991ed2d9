//! What every handle's run loop shares: request tasks tagged by `OpId`,
//! and sleeping until the machine's next deadline.

use std::collections::BTreeMap;
use std::future::Future;

use coord_core::{OpId, Outcome};
use tokio::task::JoinHandle;

/// In-flight request or stream tasks, by the op that started them.
#[derive(Debug, Default)]
pub(crate) struct Tasks(BTreeMap<OpId, JoinHandle<()>>);

impl Tasks {
    /// Runs `task` in the background as `op`.
    pub(crate) fn spawn<F>(&mut self, op: OpId, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.0.insert(op, tokio::spawn(task));
    }

    /// `op` finished by itself: forget it.
    pub(crate) fn finished(&mut self, op: OpId) {
        self.0.remove(&op);
    }

    /// Stops `op` (dropping its request or stream).
    pub(crate) fn abort(&mut self, op: OpId) {
        if let Some(task) = self.0.remove(&op) {
            task.abort();
        }
    }

    /// Stops everything.
    pub(crate) fn abort_all(&mut self) {
        for (_, task) in std::mem::take(&mut self.0) {
            task.abort();
        }
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        self.abort_all();
    }
}

/// A task that is aborted when this guard is dropped.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs a stream's reading loop in a task of its own, for as long as the
/// returned guard lives. Reads are never cancelled half-way (as a `select!`
/// against other work would do), so no `EtcdApi` needs cancel-safe reads.
pub(crate) fn spawn_reader<F>(reader: F) -> AbortOnDrop
where
    F: Future<Output = ()> + Send + 'static,
{
    AbortOnDrop(tokio::spawn(reader))
}

/// Sleeps until `deadline`, or forever if there is none.
pub(crate) async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Maps the value of an `Outcome`.
pub(crate) fn map_outcome<T, U>(o: Outcome<T>, f: impl FnOnce(T) -> U) -> Outcome<U> {
    match o {
        Outcome::Ok(v) => Outcome::Ok(f(v)),
        Outcome::Err(e) => Outcome::Err(e),
        Outcome::Unknown => Outcome::Unknown,
    }
}
