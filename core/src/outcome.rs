//! How an etcd request ended, as the driver reports it to a machine.

/// A definite etcd or network failure. The driver maps its client's errors
/// onto these; the machines decide what each means for them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Failure {
    /// The server could not be reached or refused at once (connection
    /// refused, `Unavailable`, no leader). Retried soon.
    #[error("etcd unavailable: {0}")]
    Unavailable(String),
    /// The lease the request named does not exist (expired or revoked).
    #[error("lease not found")]
    LeaseNotFound,
    /// The requested revision is compacted; `0` is the compact revision.
    #[error("revision compacted (compact revision {0})")]
    Compacted(i64),
    /// A stream (watch, keep-alive) ended or broke.
    #[error("stream closed: {0}")]
    StreamClosed(String),
    /// The server is overloaded or rate limiting. Backed off slowly.
    #[error("etcd overloaded: {0}")]
    Overloaded(String),
    /// Anything else etcd said (invalid argument, permission denied, ...).
    #[error("etcd error: {0}")]
    Other(String),
}

impl Failure {
    /// How a retry after this failure is paced.
    pub fn class(&self) -> crate::FailureClass {
        match self {
            Failure::Unavailable(_) | Failure::StreamClosed(_) | Failure::LeaseNotFound => {
                crate::FailureClass::Fast
            }
            Failure::Compacted(_) | Failure::Overloaded(_) | Failure::Other(_) => {
                crate::FailureClass::Slow
            }
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
