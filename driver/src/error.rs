//! The driver's error type.

use coord_core::liveness::{AttemptFailure, ConfigError};
use coord_core::LeaseId;

use crate::metadata::HostIdError;

/// Everything a coord handle can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The host id is unsafe as a key segment; nothing was written.
    #[error("invalid host id: {0}")]
    InvalidHostId(#[from] HostIdError),
    /// TTL, refresh, timeout or backoff out of range; nothing was written.
    #[error("invalid options: {0}")]
    InvalidOptions(#[from] ConfigError),
    /// The key prefix is empty or contains control characters.
    #[error("invalid key prefix {0:?}: must be non-empty without control characters")]
    InvalidPrefix(String),
    /// The encoded metadata is larger than etcd accepts; nothing was written.
    #[error("metadata is {size} bytes, more than the {max} allowed")]
    MetadataTooLarge {
        /// Encoded size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The metadata could not be encoded as JSON.
    #[error("metadata cannot be encoded as JSON: {0}")]
    Encode(String),
    /// etcd could not be reached (refused, no leader, or no answer in time)
    /// during the first registration. Any partial lease was revoked.
    #[error("etcd unreachable: {0}")]
    Unreachable(String),
    /// etcd refused the first registration. Any partial lease was revoked.
    #[error("registration failed: {0}")]
    Registration(AttemptFailure),
    /// `stop` could not confirm the revoke: the key stays until the lease
    /// expires, at most one TTL later.
    #[error("revoke of lease {lease} not confirmed; the key expires within one TTL")]
    RevokeNotConfirmed {
        /// The lease left to expire.
        lease: LeaseId,
    },
    /// Connecting a client failed (bad endpoint or options).
    #[error("cannot create etcd client: {0}")]
    Connect(String),
    /// Watcher options out of range; nothing was read.
    #[error("invalid watcher options: {0}")]
    InvalidWatcherOptions(coord_core::watcher::ConfigError),
    /// etcd refused the watcher's first snapshot.
    #[error("watch failed: {0}")]
    Watch(coord_core::Failure),
    /// The handle's background task is gone (the handle was dropped or the
    /// runtime shut down).
    #[error("the handle's background task has ended")]
    TaskGone,
}

impl Error {
    pub(crate) fn from_first_attempt(reason: AttemptFailure) -> Self {
        use coord_core::Failure;
        match reason {
            AttemptFailure::Timeout => {
                Error::Unreachable("no answer before the request deadline".into())
            }
            AttemptFailure::Etcd(Failure::Unavailable(m)) => Error::Unreachable(m),
            other => Error::Registration(other),
        }
    }
}
