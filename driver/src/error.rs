//! The driver's error type.

use coord_core::election::Loss;
use coord_core::liveness::{AttemptFailure, ConfigError};
use coord_core::LeaseId;

use crate::cause::Cause;
use crate::metadata::HostIdError;

/// Everything a coord handle can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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
    Encode(#[source] Cause),
    /// etcd could not be reached (refused, no leader, or no answer in time)
    /// during the first registration. Any partial lease was revoked.
    #[error("etcd unreachable: {0}")]
    Unreachable(#[source] Cause),
    /// etcd refused the first registration. Any partial lease was revoked.
    #[error("registration failed: {0}")]
    Registration(#[source] AttemptFailure),
    /// `stop` could not confirm the revoke: the key stays until the lease
    /// expires, at most one TTL later.
    #[error("revoke of lease {lease} not confirmed; the key expires within one TTL")]
    RevokeNotConfirmed {
        /// The lease left to expire.
        lease: LeaseId,
    },
    /// Connecting a client failed (bad endpoint or options).
    #[error("cannot create etcd client: {0}")]
    Connect(#[source] Cause),
    /// TLS failed: a CA, certificate or key that does not load, or etcd
    /// and the client that do not accept each other's certificates.
    #[error("TLS: {0}")]
    Tls(#[source] Cause),
    /// etcd refused the user or password (or the user's permissions).
    #[error("etcd refused the credentials: {0}")]
    Auth(#[source] Cause),
    /// Watcher options out of range; nothing was read.
    #[error("invalid watcher options: {0}")]
    InvalidWatcherOptions(#[source] coord_core::watcher::ConfigError),
    /// etcd refused the watcher's first snapshot.
    #[error("watch failed: {0}")]
    Watch(#[source] coord_core::Failure),
    /// The handle's background task is gone (the handle was dropped or the
    /// runtime shut down).
    #[error("the handle's background task has ended")]
    TaskGone,
    /// An election or lock name that cannot be used; nothing was written.
    #[error("invalid election or lock name {name:?}: {why}")]
    InvalidName {
        /// The name.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A candidate's value is larger than etcd accepts; nothing was written.
    #[error("value is {size} bytes, more than the {max} allowed")]
    ValueTooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The campaign, leadership or lock ended against the holder's will
    /// (its key deleted, its session's lease lost, its session closed).
    #[error("lost: {0}")]
    Lost(#[source] Loss),
    /// The request needs leadership (or the lock) and the caller no longer
    /// has it; etcd applied nothing.
    #[error("not the leader (or lock holder)")]
    NotLeader,
    /// `try_lock` found the lock held, or `try_campaign` found another
    /// candidate queued; nothing was left behind.
    #[error("held by another (lock holder or leader)")]
    Locked,
    /// No leadership or lock within the time given; the campaign was
    /// withdrawn.
    #[error("timed out")]
    Timeout,
    /// `resign` (or `unlock`) was not confirmed within the request
    /// timeout. The delete goes on in the background; if it never lands,
    /// the key goes with its session's lease, at most one TTL later.
    #[error(
        "the resign of {key} was not confirmed in time; the key goes with its lease at the latest"
    )]
    ResignNotConfirmed {
        /// The leadership's key.
        key: String,
    },
    /// The session (or pool) is closed.
    #[error("the session is closed")]
    Closed,
    /// This session already campaigns for (or holds, or still leaves) this
    /// name: a second campaign would write the same key.
    #[error("this session already campaigns on {name}")]
    AlreadyCampaigning {
        /// The election's key prefix.
        name: String,
    },
    /// A request failed, or its outcome is unknown (a guarded transaction
    /// may or may not have been applied).
    #[error("request failed: {0}")]
    Request(#[source] AttemptFailure),
}

impl Error {
    pub(crate) fn from_first_attempt(reason: AttemptFailure) -> Self {
        use coord_core::Failure;
        match reason {
            AttemptFailure::Timeout => {
                Error::Unreachable(Cause::msg("no answer before the request deadline"))
            }
            AttemptFailure::Etcd(Failure::Unavailable(m) | Failure::Refused(m)) => {
                Error::Unreachable(Cause::msg(m))
            }
            other => Error::Registration(other),
        }
    }
}

impl From<coord_core::machine::StartError> for Error {
    fn from(e: coord_core::machine::StartError) -> Self {
        use coord_core::machine::StartError as S;
        match e {
            S::Closed => Error::Closed,
            // `AlreadyStarted`: a handle's task starts its machine once.
            _ => Error::TaskGone,
        }
    }
}

impl From<coord_core::session::SessionError> for Error {
    fn from(e: coord_core::session::SessionError) -> Self {
        use coord_core::session::{CampaignError as C, SessionError as S};
        match e {
            S::Start(e) => Error::from(e),
            S::Campaign(C::Closed) => Error::Closed,
            S::Campaign(C::AlreadyCampaigning(name)) => Error::AlreadyCampaigning {
                name: name.to_string(),
            },
            S::UnknownElection => Error::NotLeader,
            // `IdTaken`: the handles number their campaigns themselves,
            // never reusing an id.
            _ => Error::TaskGone,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coord_core::machine::StartError;
    use coord_core::session::{CampaignError, SessionError};
    use coord_core::Key;

    #[test]
    fn core_refusals_become_the_errors_the_handles_document() {
        assert!(matches!(Error::from(StartError::Closed), Error::Closed));
        assert!(matches!(
            Error::from(StartError::AlreadyStarted),
            Error::TaskGone
        ));
        assert!(matches!(
            Error::from(SessionError::Start(StartError::Closed)),
            Error::Closed
        ));
        assert!(matches!(
            Error::from(SessionError::Campaign(CampaignError::Closed)),
            Error::Closed
        ));
        assert!(matches!(
            Error::from(SessionError::Campaign(CampaignError::AlreadyCampaigning(Key(
                b"/e/jobs".to_vec()
            )))),
            Error::AlreadyCampaigning { name } if name == "/e/jobs"
        ));
        assert!(matches!(
            Error::from(SessionError::UnknownElection),
            Error::NotLeader
        ));
        assert!(matches!(
            Error::from(SessionError::Campaign(CampaignError::IdTaken(3))),
            Error::TaskGone
        ));
    }
}
