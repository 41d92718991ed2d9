//! Why coordctl stops, and the documented exit status of each reason.
//!
//! Without a command, coordctl's own statuses are 1 to 4. With a command
//! (`lock`, `campaign ... -- CMD`), coordctl exits with the command's
//! status, so its own outcomes move to 123-127, as `timeout(1)` and
//! `xargs(1)` keep theirs apart from their command's: a script reads 2
//! as the command's own 2, never as "etcd unreachable".

use std::process::ExitCode;

use coord::Error;

/// Exit status: bad usage or input, nothing written.
pub const USAGE: u8 = 1;
/// Exit status: etcd unreachable or refused (TLS, credentials, a request),
/// or a lock backend failing (a directory that cannot be used).
pub const UNREACHABLE: u8 = 2;
/// Exit status: the lock is held (`--try`, or `--timeout` passed).
pub const HELD: u8 = 3;
/// Exit status: leadership or the lock was lost.
pub const LOST: u8 = 4;
/// Exit status: stdout was closed (a pipe's reader left); 128 + SIGPIPE,
/// as a writer the signal killed.
pub const STDOUT_CLOSED: u8 = 141;
/// Exit status with a command: the hold was lost; the command was stopped.
pub const COMMAND_LOST: u8 = 123;
/// Exit status with a command: the lock or leadership was not taken
/// (`--try`, or `--timeout` passed); the command did not run.
pub const COMMAND_NOT_TAKEN: u8 = 124;
/// Exit status with a command: coordctl itself failed (bad usage, etcd
/// unreachable, a backend failing, no guard for the command); the
/// command did not run, or was stopped.
pub const COMMAND_FAILED: u8 = 125;
/// Exit status: the command exists but cannot be run.
pub const CANNOT_RUN: u8 = 126;
/// Exit status: the command is not found.
pub const NOT_FOUND: u8 = 127;

/// Why a subcommand failed.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// Bad usage or input, found before anything was written.
    #[error("{0}")]
    Usage(String),
    /// What coord reported.
    #[error(transparent)]
    Coord(#[from] Error),
    /// The command could not be started.
    #[error("cannot run {command:?}: {error}")]
    Spawn {
        /// The program.
        command: String,
        /// Why.
        error: std::io::Error,
    },
    /// Serving metrics failed (the address is taken, say).
    #[error("cannot serve metrics: {0}")]
    Metrics(String),
    /// Leadership or the lock was lost (the command, if any, was stopped).
    #[error("lost: {0}")]
    Lost(coord::Loss),
    /// What a lock-family backend reported.
    #[error(transparent)]
    Lock(#[from] coord::lock::LockError),
    /// A lock-family hold was lost (the command, if any, was stopped).
    #[error("lost: {0}")]
    LockLost(coord::lock::LockLost),
    /// The command's guard (see `guard`) could not be started or told:
    /// the command is not run without one.
    #[error("cannot guard the command: {0}")]
    Guard(#[source] std::io::Error),
}

impl Failure {
    /// The exit status of this failure: `with_command` when coordctl runs
    /// (or was to run) a command, whose own statuses coordctl's must not
    /// be taken for.
    pub fn code(&self, with_command: bool) -> u8 {
        let own = self.own_code();
        if !with_command {
            return own;
        }
        match own {
            HELD => COMMAND_NOT_TAKEN,
            LOST => COMMAND_LOST,
            CANNOT_RUN | NOT_FOUND => own,
            _ => COMMAND_FAILED,
        }
    }

    /// The exit status without a command.
    fn own_code(&self) -> u8 {
        match self {
            Failure::Usage(_) | Failure::Metrics(_) => USAGE,
            Failure::Guard(_) => UNREACHABLE,
            Failure::Spawn { error, .. } if error.kind() == std::io::ErrorKind::NotFound => {
                NOT_FOUND
            }
            Failure::Spawn { .. } => CANNOT_RUN,
            Failure::Lost(_) | Failure::LockLost(_) => LOST,
            Failure::Coord(e) => coord_code(e),
            Failure::Lock(e) => lock_code(e),
        }
    }

    /// The exit status, as the process returns it.
    pub fn exit_code(&self, with_command: bool) -> ExitCode {
        ExitCode::from(self.code(with_command))
    }
}

fn lock_code(e: &coord::lock::LockError) -> u8 {
    use coord::lock::LockError as L;
    match e {
        L::Locked | L::Timeout => HELD,
        L::Lost(_) => LOST,
        L::BadName(_) | L::BadOptions(_) | L::NoTtl(_) => USAGE,
        L::Etcd(e) => coord_code(e),
        // A backend failure, or an outcome newer than this match.
        _ => UNREACHABLE,
    }
}

fn coord_code(e: &Error) -> u8 {
    match e {
        Error::InvalidHostId(_)
        | Error::InvalidOptions(_)
        | Error::InvalidPrefix(_)
        | Error::MetadataTooLarge { .. }
        | Error::Encode(_)
        | Error::InvalidWatcherOptions(_)
        | Error::InvalidName { .. }
        | Error::ValueTooLarge { .. }
        | Error::AlreadyCampaigning { .. } => USAGE,
        Error::Locked | Error::Timeout => HELD,
        Error::Lost(_) | Error::NotLeader => LOST,
        Error::Unreachable(_)
        | Error::Registration(_)
        | Error::RevokeNotConfirmed { .. }
        | Error::ResignNotConfirmed { .. }
        | Error::Connect(_)
        | Error::Tls(_)
        | Error::Auth(_)
        | Error::Watch(_)
        | Error::TaskGone
        | Error::Closed
        | Error::Request(_) => UNREACHABLE,
        // An outcome newer than this match: a failure, not a usage error.
        _ => UNREACHABLE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_has_its_documented_status() {
        let bad_id = coord::validate_host_id("a/b").map_err(Error::from);
        assert!(matches!(bad_id, Err(ref e) if coord_code(e) == USAGE));
        assert_eq!(Failure::Coord(Error::Locked).code(false), HELD);
        assert_eq!(Failure::Coord(Error::Timeout).code(false), HELD);
        assert_eq!(Failure::Lost(coord::Loss::KeyDeleted).code(false), LOST);
        assert_eq!(
            Failure::Coord(Error::Lost(coord::Loss::SessionClosed)).code(false),
            LOST
        );
        assert_eq!(
            Failure::Coord(Error::Unreachable(coord::Cause::msg("refused"))).code(false),
            UNREACHABLE
        );
        assert_eq!(
            Failure::Coord(Error::Auth(coord::Cause::msg("no"))).code(false),
            UNREACHABLE
        );
        // A resign etcd did not confirm is a failure to reach it, not "held".
        let unconfirmed = Error::ResignNotConfirmed { key: "n/1".into() };
        assert_eq!(Failure::Coord(unconfirmed).code(false), UNREACHABLE);
        assert_eq!(Failure::Usage("x".into()).code(false), USAGE);
        // With a command, coordctl's own outcomes keep out of its way.
        assert_eq!(Failure::Usage("x".into()).code(true), COMMAND_FAILED);
        assert_eq!(Failure::Coord(Error::Locked).code(true), COMMAND_NOT_TAKEN);
        assert_eq!(
            Failure::Lock(coord::lock::LockError::Timeout).code(true),
            COMMAND_NOT_TAKEN
        );
        assert_eq!(
            Failure::LockLost(coord::lock::LockLost::Expired).code(true),
            COMMAND_LOST
        );
        let unreachable = Error::Unreachable(coord::Cause::msg("refused"));
        assert_eq!(Failure::Coord(unreachable).code(true), COMMAND_FAILED);
        let guard = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(Failure::Guard(guard).code(true), COMMAND_FAILED);
        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(
            Failure::Spawn {
                command: "nope".into(),
                error: missing
            }
            .code(false),
            NOT_FOUND
        );
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert_eq!(
            Failure::Spawn {
                command: "x".into(),
                error: denied
            }
            .code(false),
            CANNOT_RUN
        );
    }
}
