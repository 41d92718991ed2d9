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
/// with `flock`: a lock file or a token counter. Anything but a regular
/// file found at `path` is refused (see [`open_regular`]).
fn open_lockable(backend: &'static str, path: &Path) -> Result<File, LockError> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    open_regular(backend, &options, path)?.map_err(|e| io_error(backend, "cannot open", path, e))
}

/// Opens `path` with `options` if it is a regular file (or, with
/// `create`, is missing): `Err(LockError::NotAFile)` for a FIFO, a
/// socket, a device or a directory, found without blocking. A FIFO's
/// `open(2)` would otherwise wait for a writer for ever: the file is
/// looked at first, and opened with `O_NONBLOCK` in case it was replaced
/// meanwhile. The inner error is the open's own (a missing file, say).
pub(super) fn open_regular(
    backend: &'static str,
    options: &OpenOptions,
    path: &Path,
) -> Result<std::io::Result<File>, LockError> {
    use std::os::unix::fs::OpenOptionsExt;
    refuse_special(backend, path)?;
    let mut options = options.clone();
    options.custom_flags(nix::libc::O_NONBLOCK);
    let file = match options.open(path) {
        Ok(file) => file,
        Err(e) => return Ok(Err(e)),
    };
    match file.metadata() {
        Ok(meta) => refuse(backend, path, Some(&meta))?,
        Err(e) => return Ok(Err(e)),
    }
    Ok(Ok(file))
}

/// `Err(LockError::NotAFile)` if something other than a regular file is
/// at `path` (nothing there is fine).
pub(super) fn refuse_special(backend: &'static str, path: &Path) -> Result<(), LockError> {
    refuse(backend, path, std::fs::metadata(path).ok().as_ref())
}

/// `Err(LockError::NotAFile)` if `meta` (of `path`) is not a regular
/// file's.
fn refuse(
    backend: &'static str,
    path: &Path,
    meta: Option<&std::fs::Metadata>,
) -> Result<(), LockError> {
    match meta.and_then(file_kind) {
        None => Ok(()),
        Some(found) => Err(LockError::NotAFile {
            backend,
            path: path.to_path_buf(),
            found,
        }),
    }
}

/// What a file that is not a regular one is, `None` for a regular file.
fn file_kind(meta: &std::fs::Metadata) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("directory")
    } else if t.is_fifo() {
        Some("FIFO")
    } else if t.is_socket() {
        Some("socket")
    } else if t.is_char_device() {
        Some("character device")
    } else if t.is_block_device() {
        Some("block device")
    } else {
        Some("special file")
    }
}

/// The token counter of `name`: `<dir>/<name>.token`.
fn token_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.token"))
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
    let path = token_path(dir, name);
    let fail = |what: &str, e| io_error(backend, what, &path, e);
    let file = open_lockable(backend, &path)?;
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
        // Checked before any lock file is created, which would stay.
        refuse_special("flock", &token_path(&self.dir, name))?;
        for slot in 0..self.slots.get() {
            let path = self.slot_path(name, slot);
            let file = open_lockable("flock", &path)?;
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
        match self.file.take() {
            Some(held) => {
                // Unlocked, not only closed: that frees it also for a
                // duplicate of the descriptor (one handed to another
                // process, see `Holder::hold_fds`), which closing this
                // one alone would leave holding it.
                if let Err((_, e)) = held.unlock() {
                    // Dropping the lock (here) tries the unlock once more.
                    tracing::warn!(error = %e, "flock: unlock failed");
                }
                Released::Released
            }
            None => Released::AlreadyGone,
        }
    }

    /// The locked file while held.
    pub(super) fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.file.as_ref().map(|f| f.as_fd())
    }
}
