//! How an etcd request ended, as the driver reports it to a machine.

/// A definite etcd or network failure. The driver maps its client's errors
/// onto these; the machines decide what each means for them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub enum Failure {
    /// The server answered that it cannot serve now, or could not be
    /// reached (`Unavailable`, no leader). Retried soon.
    #[error("etcd unavailable: {0}")]
    Unavailable(String),
    /// No connection could be made: nothing listens at etcd's address
    /// (connection refused). The request never reached an etcd, so asking
    /// again costs etcd nothing. Retried soon, as `Unavailable`.
    #[error("etcd refused the connection: {0}")]
    Refused(String),
    /// The lease the request named does not exist (expired or revoked).
    #[error("lease not found")]
    LeaseNotFound,
    /// The requested revision is compacted; `0` is the compact revision.
    #[error("revision compacted (compact revision {0})")]
    Compacted(i64),
    /// The requested revision is ahead of etcd's (a lagging member, or an
    /// etcd restored or wiped behind what was seen).
    #[error("revision ahead of etcd's")]
    FutureRevision,
    /// A stream (watch, keep-alive) ended or broke.
    #[error("stream closed: {0}")]
    StreamClosed(String),
    /// The server is overloaded or rate limiting. Backed off slowly.
    #[error("etcd overloaded: {0}")]
    Overloaded(String),
    /// A response exceeded a message size limit (the client's decode
    /// limit or the server's send limit): ask for less at once.
    #[error("response too large: {0}")]
    TooLarge(String),
    /// Anything else etcd said (invalid argument, permission denied, ...).
    #[error("etcd error: {0}")]
    Other(String),
}

impl Failure {
    /// How a retry after this failure is paced.
    pub fn class(&self) -> crate::FailureClass {
        match self {
            Failure::Unavailable(_)
            | Failure::Refused(_)
            | Failure::StreamClosed(_)
            | Failure::LeaseNotFound
            | Failure::FutureRevision => crate::FailureClass::Fast,
            Failure::Compacted(_)
            | Failure::Overloaded(_)
            | Failure::TooLarge(_)
            | Failure::Other(_) => crate::FailureClass::Slow,
        }
    }
}

/// The result of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Outcome<T> {
    /// etcd applied the request and answered.
    Ok(T),
    /// The request definitely failed (nothing was applied).
    Err(Failure),
    /// No answer in time: the request may or may not have been applied.
    Unknown,
}

impl<T> Outcome<T> {
    /// Maps the value of an `Ok`, keeping failures and unknowns.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Outcome<U> {
        match self {
            Outcome::Ok(v) => Outcome::Ok(f(v)),
            Outcome::Err(e) => Outcome::Err(e),
            Outcome::Unknown => Outcome::Unknown,
        }
    }
}

/// Why one attempt of a machine (a registration, a listing, a campaign)
/// failed. Every machine reports failed attempts with this type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AttemptFailure {
    /// etcd answered with a failure.
    #[error(transparent)]
    Etcd(Failure),
    /// No answer before the request deadline, or (a lease's registration)
    /// an answer that came only once the lease's own deadline had passed.
    #[error("no answer before the request deadline")]
    Timeout,
    /// The lease turned out dead (TTL 0 or not found).
    #[error("the lease is gone")]
    LeaseGone,
}

impl AttemptFailure {
    /// How a retry after this failure is paced.
    pub fn class(&self) -> crate::FailureClass {
        match self {
            AttemptFailure::Etcd(f) => f.class(),
            AttemptFailure::Timeout => crate::FailureClass::Slow,
            AttemptFailure::LeaseGone => crate::FailureClass::Fast,
        }
    }

    /// The failure of a request that ended with `outcome` (`None` if it
    /// succeeded).
    pub fn of<T>(outcome: &Outcome<T>) -> Option<AttemptFailure> {
        match outcome {
            Outcome::Ok(_) => None,
            Outcome::Err(Failure::LeaseNotFound) => Some(AttemptFailure::LeaseGone),
            Outcome::Err(f) => Some(AttemptFailure::Etcd(f.clone())),
            Outcome::Unknown => Some(AttemptFailure::Timeout),
        }
    }
}

/// What every machine that retries reports before waiting: the failures so
/// far, when it tries again, and what failed last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    /// Failures since the last success.
    pub attempt: u32,
    /// When the next attempt starts.
    pub next_at: crate::Instant,
    /// What failed, if an attempt did (a heal that begins after a loss has
    /// no failed attempt yet).
    pub failure: Option<AttemptFailure>,
}
