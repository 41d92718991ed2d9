//! Stand-ins shared by the simulator's tests of single handles against
//! hand-written etcds, for the parts a test does not exercise.

use coord::{
    EtcdError, KeepAliveReplies, KeepAliveSender, WatchControl, WatchEvents, WatchMessage,
};

/// A keep-alive stream of a lease etcd does not know: sends fail with
/// "lease not found", and no reply ever comes.
pub(crate) struct NoLease;

impl KeepAliveSender for NoLease {
    async fn send(&mut self) -> Result<(), EtcdError> {
        Err(EtcdError::LeaseNotFound)
    }
}

impl KeepAliveReplies for NoLease {
    async fn next(&mut self) -> Option<Result<i64, EtcdError>> {
        None
    }
}

/// A watch that takes progress requests and ends at once.
pub(crate) struct NoWatch;

impl WatchControl for NoWatch {
    async fn request_progress(&mut self) -> Result<(), EtcdError> {
        Ok(())
    }
    async fn cancel(&mut self) {}
}

impl WatchEvents for NoWatch {
    async fn next(&mut self) -> Option<Result<WatchMessage, EtcdError>> {
        None
    }
}
