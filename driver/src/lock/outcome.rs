//! What the lock backends give and fail with: a hold [`Taken`], a
//! [`LockError`], and how a hold is lost ([`LockLost`]); and the checks the
//! server backends share.

#[cfg(any(feature = "redis", feature = "postgres"))]
use std::time::Duration;

use coord_core::lock::LockNameError;
use coord_core::FencingToken;

/// A slot of a name taken by a backend: its slot, its fencing token and
/// the backend's hold of it (which [`Holder`](super::Holder) wraps).
#[derive(Debug)]
pub(super) struct Taken<H> {
    pub(super) slot: u32,
    pub(super) token: FencingToken,
    pub(super) hold: H,
}

/// What a lock call can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Every slot of the name is held (`try_acquire`).
    #[error("the lock is held")]
    Locked,
    /// `acquire` waited its whole timeout.
    #[error("timed out waiting for the lock")]
    Timeout,
    /// The hold ended without `release` (see [`Holder::lost`](super::Holder::lost)).
    #[error("the lock was lost: {0}")]
    Lost(LockLost),
    /// The name is not a lock name; nothing was written.
    #[error(transparent)]
    BadName(#[from] LockNameError),
    /// The locker's options are out of range; nothing was written.
    #[error("bad lock options: {0}")]
    BadOptions(String),
    /// The backend has no TTL to extend.
    #[error("the {0} backend has no TTL to extend")]
    NoTtl(&'static str),
    /// The backend failed (I/O, a server that does not answer, a corrupt
    /// token file): the state of the lock is as before the call.
    #[error("{backend} backend: {cause}")]
    Backend {
        /// Which backend.
        backend: &'static str,
        /// What failed, with the backend's own error underneath.
        #[source]
        cause: crate::Cause,
    },
    /// A lock directory holds something other than a regular file where a
    /// lock, marker or token file belongs (a FIFO, a socket, a device, a
    /// directory): it is refused without being opened for good, and
    /// nothing is written. Remove it; no holder made it.
    #[error("{backend} backend: {} is a {found}, not a regular file", path.display())]
    NotAFile {
        /// Which backend.
        backend: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// What it is.
        found: &'static str,
    },
    /// The etcd backend failed, with coord's error of what etcd did (so a
    /// caller tells an unreachable etcd, `Error::Unreachable`, from a
    /// refused request or a lost session): the state of the lock is as
    /// before the call.
    #[error("etcd backend: {0}")]
    Etcd(#[source] crate::Error),
}

/// Why a hold ended without its holder releasing it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LockLost {
    /// Another process judged this holder dead or stale and took the lock
    /// over, or an operator removed the marker or evicted the hold.
    #[error("taken over or removed")]
    TakenOver,
    /// The hold's TTL lapsed before it was extended (the backend was
    /// unreachable for a whole TTL, or the holder was paused that long),
    /// or its key changed hands.
    #[error("expired")]
    Expired,
    /// The connection (and so the session) holding it ended: Postgres
    /// dropped its advisory locks.
    #[error("disconnected")]
    Disconnected,
    /// The server left a check of the connection holding it unanswered for
    /// the request timeout (stalled, or cut off): the holder ended the
    /// connection, so Postgres drops its advisory locks once it reads the
    /// close, or finds the connection dead on its own.
    #[error("the server did not answer")]
    Unanswered,
    /// The etcd session's lease or the holder's key is gone.
    #[error("etcd: {0:?}")]
    Etcd(crate::Loss),
}

/// A server backend's request timeout, 10 ms to 5 min; else
/// [`LockError::BadOptions`] naming `backend`.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(super) fn check_request_timeout(backend: &str, timeout: Duration) -> Result<(), LockError> {
    if timeout < Duration::from_millis(10) || timeout > Duration::from_secs(300) {
        return Err(LockError::BadOptions(format!(
            "the {backend} request timeout must be 10 ms to 5 min, got {timeout:?}"
        )));
    }
    Ok(())
}

/// The error of a server backend that gave no answer within `within`.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(super) fn no_answer(backend: &'static str, within: Duration) -> LockError {
    LockError::Backend {
        backend,
        cause: crate::Cause::msg(format!("no answer within {within:?}")),
    }
}
