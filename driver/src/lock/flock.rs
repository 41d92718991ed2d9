//! `flock` locks: slot 0 of name `n` is an exclusive `flock` on
//! `<dir>/n.lock` (slot `i` above 0: `<dir>/n.lock.i`). The kernel
//! releases it when its file is closed, so on any exit of the holder,
//! kill -9 included. Single host only: do not put the directory on NFS
//! (where `flock` may be emulated, or local to each client). Lock files
//! are never removed: removing one while it is held would let a second
//! holder lock a new file under the same name.
//!
//! The fencing token is a counter in `<dir>/n.token`, incremented (under
//! a `flock` of its own, for the instant of the update) by every new
//! holder, so it grows across holders, crashes and restarts.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use coord_core::lock::{Released, Slots};
use coord_core::FencingToken;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::outcome::{LockError, Taken};

/// Where and how: the directory (which must exist) and the slots per
/// name.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FlockConfig {
    /// The directory of the lock files.
    pub dir: PathBuf,
    /// Holders per name at once (1: a mutex).
    pub slots: Slots,
}

/// Builder-style setters: the struct is `#[non_exhaustive]`, so that a
/// new option is not a breaking change; start from `FlockConfig::default()`
/// (or its constructor) and set what differs.
impl FlockConfig {
    /// These options with [`dir`](Self::dir) set.
    pub fn with_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = dir.into();
        self
    }
    /// These options with [`slots`](Self::slots) set.
    pub fn with_slots(mut self, slots: Slots) -> Self {
        self.slots = slots;
        self
    }
}

impl FlockConfig {
    /// Mutexes in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FlockConfig {
            dir: dir.into(),
            slots: Slots::ONE,
        }
    }
}

/// `flock` locks in one directory.
#[derive(Debug, Clone)]
pub struct FlockLocks {
    dir: PathBuf,
    slots: Slots,
}

pub(super) fn io_error(
    backend: &'static str,
    what: &str,
    path: &Path,
    e: std::io::Error,
) -> LockError {
    LockError::Backend {
        backend,
        cause: crate::Cause::described(format!("{what} {}: {e}", path.display()), e),
    }
}

/// Checks that `dir` is a directory.
pub(super) fn check_dir(backend: &'static str, dir: &Path) -> Result<(), LockError> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(LockError::BadOptions(format!(
            "{} is not a directory",
            dir.display()
        ))),
        Err(e) => Err(io_error(backend, "cannot use", dir, e)),
    }
}

/// An exclusive `flock` on `file` if free now: `Ok(Err(file))` if another
/// holds one.
pub(super) fn try_flock(file: File) -> std::io::Result<Result<Flock<File>, File>> {
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(held) => Ok(Ok(held)),
        Err((file, Errno::EWOULDBLOCK)) => Ok(Err(file)),
        Err((_, e)) => Err(e.into()),
    }
}

/// An exclusive `flock` on `file`, waiting for it (only for locks held
/// for an instant: a token update, a marker's removal).
pub(super) fn flock(file: File) -> std::io::Result<Flock<File>> {
    Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| e.into())
}

/// Opens (creating if missing, never truncating) a file that is locked
/// with `flock`: a lock file or a token counter.
fn open_lockable(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Width of the token counter's digits: the file is rewritten in place
/// with the same length, never truncated.
const TOKEN_WIDTH: usize = 20;

/// The counter of a name's tokens, locked: no other token of the name is
/// issued until this is dropped.
pub(super) type TokensLocked = Flock<File>;

/// Increments the counter `<dir>/<name>.token` under a `flock` of its
/// own and returns the new value, durably written, with the counter still
/// locked. A backend that takes its lock after issuing the token keeps the
/// counter locked until it has (or failed), so that tokens are issued in
/// the order holds begin.
pub(super) fn bump_token(
    backend: &'static str,
    dir: &Path,
    name: &str,
) -> Result<(FencingToken, TokensLocked), LockError> {
    let path = dir.join(format!("{name}.token"));
    let fail = |what: &str, e| io_error(backend, what, &path, e);
    let file = open_lockable(&path).map_err(|e| fail("cannot open", e))?;
    let mut file = flock(file).map_err(|e| fail("cannot lock", e))?;
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(|e| fail("cannot read", e))?;
    let text = text.trim();
    let last: i64 = if text.is_empty() {
        0
    } else {
        text.parse().map_err(|_| LockError::Backend {
            backend,
            cause: crate::Cause::msg(format!(
                "token file {} is corrupt ({:?}): tokens cannot be trusted to grow; remove it only if no fenced resource has seen a token",
                path.display(),
                text.chars().take(40).collect::<String>()
            )),
        })?
    };
    let next = last.checked_add(1).ok_or_else(|| LockError::Backend {
        backend,
        cause: crate::Cause::msg(format!("token file {} is at its maximum", path.display())),
    })?;
    let line = format!("{next:0TOKEN_WIDTH$}\n");
    file.write_all_at(line.as_bytes(), 0)
        .and_then(|()| file.sync_data())
        .map_err(|e| fail("cannot write", e))?;
    // Closing the file (dropping it) releases its lock.
    Ok((FencingToken(next), file))
}

impl FlockLocks {
    pub(super) fn new(config: FlockConfig) -> Result<FlockLocks, LockError> {
        check_dir("flock", &config.dir)?;
        Ok(FlockLocks {
            dir: config.dir,
            slots: config.slots,
        })
    }

    fn slot_path(&self, name: &str, slot: u32) -> PathBuf {
        if slot == 0 {
            self.dir.join(format!("{name}.lock"))
        } else {
            self.dir.join(format!("{name}.lock.{slot}"))
        }
    }

    pub(super) fn try_acquire(&self, name: &str) -> Result<Taken<FlockHold>, LockError> {
        for slot in 0..self.slots.get() {
            let path = self.slot_path(name, slot);
            let file =
                open_lockable(&path).map_err(|e| io_error("flock", "cannot open", &path, e))?;
            match try_flock(file) {
                Ok(Ok(held)) => {
                    // Issued while the lock is held: in the order of holds.
                    let (token, _) = bump_token("flock", &self.dir, name)?;
                    return Ok(Taken {
                        slot,
                        token,
                        hold: FlockHold { file: Some(held) },
                    });
                }
                Ok(Err(_busy)) => continue,
                Err(e) => return Err(io_error("flock", "cannot lock", &path, e)),
            }
        }
        Err(LockError::Locked)
    }
}

#[derive(Debug)]
pub(super) struct FlockHold {
    file: Option<Flock<File>>,
}

impl FlockHold {
    pub(super) fn release(&mut self) -> Released {
        // Closing the file releases the lock.
        match self.file.take() {
            Some(_) => Released::Released,
            None => Released::AlreadyGone,
        }
    }
}
