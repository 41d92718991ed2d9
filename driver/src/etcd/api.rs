//! The `EtcdApi` trait and the types it speaks (see the module docs of
//! [`etcd`](crate::etcd)).

use std::future::Future;

use coord_core::io::{Listing, MessageKind, RangeRequest, Txn, TxnResponse};
use coord_core::kv::WatchEvent;
use coord_core::{ClusterId, Failure, LeaseId, Outcome, Revision};

pub use coord_core::io::Granted;

/// How an etcd request failed, classified for the state machines.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EtcdError {
    /// etcd could not be reached or answered that it cannot serve now
    /// (`Unavailable`, no leader). Nothing was applied.
    #[error("etcd unavailable: {0}")]
    Unavailable(String),
    /// No connection could be made: nothing listens at etcd's address
    /// (connection refused). The request reached no etcd; nothing was
    /// applied.
    #[error("etcd refused the connection: {0}")]
    Refused(String),
    /// The lease does not exist (expired or revoked).
    #[error("lease not found")]
    LeaseNotFound,
    /// The revision asked for is compacted.
    #[error("revision compacted (compact revision {compact_revision})")]
    Compacted {
        /// etcd's current compaction revision, or 0 if it did not say.
        compact_revision: i64,
    },
    /// The revision asked for is ahead of etcd's ("required revision is a
    /// future revision"): a lagging member, or an etcd restored or wiped.
    #[error("revision ahead of etcd's")]
    FutureRevision,
    /// etcd is overloaded or rate limiting.
    #[error("etcd overloaded: {0}")]
    Overloaded(String),
    /// A response exceeded a message size limit (the client's decode limit
    /// or etcd's send limit).
    #[error("response too large: {0}")]
    TooLarge(String),
    /// The connection was reset or aborted under the request: by etcd, or
    /// at once by a proxy in front of it that could not reach it. Its
    /// effect is unknown, as for `Indeterminate`; the prober paces a probe
    /// that failed so as one refused.
    #[error("connection reset: {0}")]
    Reset(String),
    /// The request failed in a way that leaves its effect unknown (the
    /// connection broke mid-request, a deadline passed).
    #[error("outcome unknown: {0}")]
    Indeterminate(String),
    /// Anything else etcd refused (invalid argument, permission, ...).
    #[error("etcd error: {0}")]
    Other(String),
}

impl EtcdError {
    /// The core's view of a unary request that failed this way.
    pub(crate) fn into_outcome<T>(self) -> Outcome<T> {
        match self {
            EtcdError::Indeterminate(_) | EtcdError::Reset(_) => Outcome::Unknown,
            other => Outcome::Err(other.into_failure()),
        }
    }

    /// The core's view of a stream that broke this way.
    pub(crate) fn into_failure(self) -> Failure {
        match self {
            EtcdError::Unavailable(m) => Failure::Unavailable(m),
            EtcdError::Refused(m) => Failure::Refused(m),
            EtcdError::LeaseNotFound => Failure::LeaseNotFound,
            EtcdError::Compacted { compact_revision } => Failure::Compacted(compact_revision),
            EtcdError::Overloaded(m) => Failure::Overloaded(m),
            EtcdError::TooLarge(m) => Failure::TooLarge(m),
            EtcdError::FutureRevision => Failure::FutureRevision,
            EtcdError::Indeterminate(m) | EtcdError::Reset(m) => Failure::StreamClosed(m),
            EtcdError::Other(m) => Failure::Other(m),
        }
    }
}

/// Maps a unary result onto the core's outcome.
pub(crate) fn outcome<T>(r: Result<T, EtcdError>) -> Outcome<T> {
    match r {
        Ok(v) => Outcome::Ok(v),
        Err(e) => e.into_outcome(),
    }
}

/// The etcd operations coord needs (see the [module docs](crate::etcd) for
/// implementing it). Implementations must be cheap to clone (each request
/// runs on its own task with its own clone) and must never panic on
/// anything the server sends. The provided `probe_hub`, `for_probe` and
/// `silent` let clients share one prober and re-dial a silent member; a
/// wrapper delegates them to the client it wraps.
pub trait EtcdApi: Clone + Send + Sync + 'static {
    /// Sends keep-alives on an open keep-alive stream.
    type Keeper: KeepAliveSender;
    /// Receives keep-alive replies on an open keep-alive stream.
    type Replies: KeepAliveReplies;
    /// Sends progress requests on an open watch stream.
    type WatchControl: WatchControl;
    /// Receives an open watch stream's messages.
    type WatchEvents: WatchEvents;

    /// The key-values `request` selects (in the order it asks for), and the
    /// revision read at.
    fn range(
        &self,
        request: RangeRequest,
    ) -> impl Future<Output = Result<Listing, EtcdError>> + Send;

    /// Runs a transaction (compares, then one branch, atomically).
    fn txn(&self, txn: Txn) -> impl Future<Output = Result<TxnResponse, EtcdError>> + Send;

    /// Watches `key` (every key under it, with `prefix`) from
    /// `start_revision`, without prev kv (coord never reads it). The first
    /// message is `Created`; a compacted start revision ends the stream
    /// with `EtcdError::Compacted`.
    fn watch(
        &self,
        key: Vec<u8>,
        prefix: bool,
        start_revision: Revision,
    ) -> impl Future<Output = Result<(Self::WatchControl, Self::WatchEvents), EtcdError>> + Send;

    /// Grants a lease of `ttl_secs` seconds.
    fn lease_grant(&self, ttl_secs: i64)
        -> impl Future<Output = Result<Granted, EtcdError>> + Send;

    /// Revokes a lease, deleting every key attached to it.
    fn lease_revoke(&self, lease: LeaseId) -> impl Future<Output = Result<(), EtcdError>> + Send;

    /// The prober this client shares among its handles, if it has one
    /// (see [`ProbeHub`](crate::ProbeHub)); without one, each handle
    /// probes on its own. Default: none.
    fn probe_hub(&self) -> Option<crate::ProbeHub> {
        None
    }

    /// The copy of this client the probe task uses: one that does not keep
    /// the hub alive. Default: a clone.
    fn for_probe(&self) -> Self {
        self.clone()
    }

    /// Told that etcd went silent (a request, stream or probe unanswered):
    /// a client that can, re-dials, so that a member stalled with its
    /// connections open is left. A handle that found the silence awaits
    /// this before it sends again, so it should return once the client is
    /// where the next requests should go (and return at once when it
    /// cannot move). Default: nothing.
    fn silent(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Opens a keep-alive stream for `lease` and sends one keep-alive; its
    /// reply (with the remaining TTL) is the first thing `Replies` yields.
    /// Fails with `LeaseNotFound` if the lease is gone.
    fn lease_keep_alive(
        &self,
        lease: LeaseId,
    ) -> impl Future<Output = Result<(Self::Keeper, Self::Replies), EtcdError>> + Send;
}

/// The sending half of a keep-alive stream.
pub trait KeepAliveSender: Send + 'static {
    /// Sends one keep-alive request. An error means the stream is broken.
    fn send(&mut self) -> impl Future<Output = Result<(), EtcdError>> + Send;
}

/// The receiving half of a keep-alive stream.
pub trait KeepAliveReplies: Send + 'static {
    /// The next reply's remaining TTL in seconds (0: the lease is gone), an
    /// error, or `None` when the stream ended.
    fn next(&mut self) -> impl Future<Output = Option<Result<i64, EtcdError>>> + Send;
}

/// One message of a watch stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchMessage {
    /// Created, events, or a progress notification.
    pub kind: MessageKind,
    /// The events (empty unless `kind` is `Events`).
    pub events: Vec<WatchEvent>,
    /// The response header's revision.
    pub revision: Revision,
    /// The response header's cluster id.
    pub cluster: ClusterId,
}

/// The sending half of a watch stream.
pub trait WatchControl: Send + 'static {
    /// Asks for a progress notification. An error means the stream is
    /// broken.
    fn request_progress(&mut self) -> impl Future<Output = Result<(), EtcdError>> + Send;

    /// Ends the watch on the server (best effort, without waiting for an
    /// answer). Dropping both halves must end it too.
    fn cancel(&mut self) -> impl Future<Output = ()> + Send;
}

/// The receiving half of a watch stream.
pub trait WatchEvents: Send + 'static {
    /// The next message, an error (`Compacted` when the start revision was
    /// compacted), or `None` when the stream ended.
    fn next(&mut self) -> impl Future<Output = Option<Result<WatchMessage, EtcdError>>> + Send;
}
