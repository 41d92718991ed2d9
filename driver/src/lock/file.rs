//! Marker-file locks: slot 0 of name `n` is held by whoever created
//! `<dir>/n.held` (slot `i` above 0: `<dir>/n.held.i`), a
//! [`Marker`](coord_core::lock::Marker) naming its pid, the pid's start
//! time, its host and its token. A marker is created whole and at once
//! (written aside, then hard-linked into place, which fails if the name
//! exists), so nobody ever reads half of one.
//!
//! A holder refreshes its marker (its modification time) every
//! `stale_after / 3`, and checks it is still its own: `lost()` fires when
//! it was removed or replaced. Whoever finds a marker judges it
//! ([`verdict`](coord_core::lock::verdict)): on its own host by probing
//! the pid (dead, or reused by a process that started at another time:
//! taken over at once); elsewhere, or where the pid cannot tell, by the
//! stale window: a marker not refreshed for `stale_after` is taken over.
//! `stale_after` is how long after the holder looks dead a marker is
//! taken over, not a limit on how long a live holder may hold.
//!
//! Taking over is race-free between processes that find the same dead
//! marker at once: each takes an exclusive `flock` on the marker's file
//! before removing it, and removes it only if the name still refers to
//! that same file. So the directory must support `flock` (local file
//! systems, and NFS v4 across hosts); the token counter (`n.token`, as
//! for [`flock`](super::flock)) needs it too.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use coord_core::lock::{
    verdict, verdict_unreadable, Marker, PidProbe, Released, Slots, Strategy, Verdict,
};
use coord_core::FencingToken;

use super::flock::{bump_token, check_dir, flock, io_error, open_regular, try_flock};
use super::outcome::{LockError, LockLost, Taken};
use super::pid;
use super::watchdog::Watchdog;

/// Shortest and longest stale window accepted.
const STALE_RANGE: (Duration, Duration) = (Duration::from_millis(300), Duration::from_secs(86_400));

/// Where and how file locks are kept and judged.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FileConfig {
    /// The directory of the markers (which must exist).
    pub dir: PathBuf,
    /// Holders per name at once (1: a mutex).
    pub slots: Slots,
    /// How markers are judged. Default `PidFirst`.
    pub strategy: Strategy,
    /// How long after its holder stops refreshing it a marker the pid
    /// cannot judge is taken over. Default 30 s; 300 ms to 1 day.
    pub stale_after: Duration,
    /// The host name markers record and are compared with. Default: this
    /// machine's.
    pub host: Option<String>,
    /// The process markers name as their holder: on this host, its death
    /// frees them at once. Default: this process. A process that hands a
    /// hold's life to another (a guard that outlives it until the work
    /// done under the lock has stopped, as `coordctl lock` has) names that
    /// one; refreshing and releasing the marker stay with this process.
    pub owner: Option<u32>,
}

/// Builder-style setters: the struct is `#[non_exhaustive]`, so that a
/// new option is not a breaking change; start from `FileConfig::default()`
/// (or its constructor) and set what differs.
impl FileConfig {
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
    /// These options with [`strategy`](Self::strategy) set.
    pub fn with_strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }
    /// These options with [`stale_after`](Self::stale_after) set.
    pub fn with_stale_after(mut self, stale_after: Duration) -> Self {
        self.stale_after = stale_after;
        self
    }
    /// These options with [`host`](Self::host) set.
    pub fn with_host(mut self, host: impl Into<String>) -> Self {
        self.host = Some(host.into());
        self
    }
    /// These options with [`owner`](Self::owner) set.
    pub fn with_owner(mut self, pid: u32) -> Self {
        self.owner = Some(pid);
        self
    }
}

impl FileConfig {
    /// Mutexes in `dir`, judged `PidFirst` with a 30 s stale window.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileConfig {
            dir: dir.into(),
            slots: Slots::ONE,
            strategy: Strategy::PidFirst,
            stale_after: Duration::from_secs(30),
            host: None,
            owner: None,
        }
    }
}

/// Marker-file locks in one directory.
#[derive(Debug, Clone)]
pub struct FileLocks {
    dir: PathBuf,
    slots: Slots,
    strategy: Strategy,
    stale_after: Duration,
    host: String,
    owner: Option<u32>,
}

/// What [`FileLocks::sweep`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swept {
    /// The markers removed, judged dead, reused or stale.
    pub removed: Vec<PathBuf>,
    /// Markers left in place (held, or inconclusive).
    pub kept: usize,
}

/// A file's identity: a name may come to refer to another file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
}

impl Identity {
    fn of(meta: &std::fs::Metadata) -> Identity {
        Identity {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// What was found under a marker's name.
enum Found {
    /// A holder that may not be taken over.
    Held,
    /// A dead marker, now removed.
    Removed,
    /// The name changed while it was judged: look again.
    Changed,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn age(meta: &std::fs::Metadata) -> Duration {
    meta.modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .unwrap_or(Duration::ZERO)
}

fn fail(what: &str, path: &Path, e: std::io::Error) -> LockError {
    io_error("file", what, path, e)
}

impl FileLocks {
    /// Opens the directory of `config` (for [`sweep`](Self::sweep); a
    /// [`Locker::file`](super::Locker::file) opens its own). Fails on
    /// options out of range or a directory that cannot be used.
    pub fn open(config: FileConfig) -> Result<FileLocks, LockError> {
        if config.stale_after < STALE_RANGE.0 || config.stale_after > STALE_RANGE.1 {
            return Err(LockError::BadOptions(format!(
                "stale_after must be {:?} to {:?}, got {:?}",
                STALE_RANGE.0, STALE_RANGE.1, config.stale_after
            )));
        }
        let host = match config.host {
            Some(h) if h.is_empty() || h.chars().any(|c| c.is_whitespace() || c.is_control()) => {
                return Err(LockError::BadOptions(format!(
                    "host {h:?} is empty or holds whitespace or a control character"
                )))
            }
            Some(h) => h,
            None => pid::this_host(),
        };
        check_dir("file", &config.dir)?;
        Ok(FileLocks {
            dir: config.dir,
            slots: config.slots,
            strategy: config.strategy,
            stale_after: config.stale_after,
            host,
            owner: config.owner.filter(|pid| *pid > 0),
        })
    }

    fn slot_path(&self, name: &str, slot: u32) -> PathBuf {
        if slot == 0 {
            self.dir.join(format!("{name}.held"))
        } else {
            self.dir.join(format!("{name}.held.{slot}"))
        }
    }

    pub(super) fn try_acquire(&self, name: &str) -> Result<Taken<FileHold>, LockError> {
        for slot in 0..self.slots.get() {
            let path = self.slot_path(name, slot);
            // The marker is judged first, so that trying a held lock
            // costs no token and writes nothing. One removed, gone or
            // replaced meanwhile: create, or look again (a few times; a
            // name that keeps changing is busy).
            for _ in 0..3 {
                if let Found::Held = self.judge(&path)? {
                    break;
                }
                if let Some(taken) = self.create(name, slot, &path)? {
                    return Ok(taken);
                }
            }
        }
        Err(LockError::Locked)
    }

    /// Creates the slot's marker if nobody has one; `None` if one exists.
    /// The marker names its token, so the token is issued first; the
    /// token counter stays locked until the marker is in place (or found
    /// taken), so that a later hold never has an earlier token: two
    /// creators otherwise could issue tokens in one order and link their
    /// markers in the other. (A token issued for a marker that could not
    /// be linked is skipped: tokens grow, not densely.)
    fn create(
        &self,
        name: &str,
        slot: u32,
        path: &Path,
    ) -> Result<Option<Taken<FileHold>>, LockError> {
        let (token, _issuing) = bump_token("file", &self.dir, name)?;
        let me = std::process::id();
        let owner = self.owner.unwrap_or(me);
        let marker = Marker {
            pid: owner,
            start_time: pid::start_time(owner),
            host: self.host.clone(),
            acquired_ms: now_ms(),
            token: token.0,
        };
        let text = marker.encode().map_err(|e| LockError::Backend {
            backend: "file",
            cause: crate::Cause::new(e),
        })?;
        // Written aside (a name no lock has: it starts with '.'), then
        // linked into place: the link fails if the marker exists.
        static ASIDE: AtomicU64 = AtomicU64::new(0);
        let n = ASIDE.fetch_add(1, Ordering::Relaxed);
        let aside = self.dir.join(format!(".{name}.{me}.{n}.new"));
        let mut create = OpenOptions::new();
        create.write(true).create(true).truncate(true);
        let written = open_regular("file", &create, &aside)?.and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            let meta = f.metadata()?;
            Ok((f, meta))
        });
        let (file, meta) = match written {
            Ok(w) => w,
            Err(e) => {
                let _ = std::fs::remove_file(&aside);
                return Err(fail("cannot write", &aside, e));
            }
        };
        let linked = std::fs::hard_link(&aside, path);
        let _ = std::fs::remove_file(&aside);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(None),
            Err(e) => return Err(fail("cannot create", path, e)),
        }
        let hold = FileHold::start(path.to_path_buf(), file, &meta, token, self.stale_after);
        Ok(Some(Taken { slot, token, hold }))
    }

    /// Judges the marker at `path` and removes it if it may be taken
    /// over.
    fn judge(&self, path: &Path) -> Result<Found, LockError> {
        let mut file = match open_regular("file", OpenOptions::new().read(true), path)? {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Changed),
            Err(e) => return Err(fail("cannot open", path, e)),
        };
        let meta = file.metadata().map_err(|e| fail("cannot stat", path, e))?;
        let mut bytes = Vec::new();
        let limit = u64::try_from(coord_core::lock::marker::MAX_MARKER_LEN + 1).unwrap_or(u64::MAX);
        (&mut file)
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(|e| fail("cannot read", path, e))?;
        let verdict = self.verdict_of(&bytes, age(&meta));
        if !verdict.takes_over() {
            return Ok(Found::Held);
        }
        // Only one taker removes it: the one holding its file's lock
        // (until this function returns).
        let _taking = match try_flock(file) {
            Ok(Ok(locked)) => locked,
            Ok(Err(_busy)) => return Ok(Found::Held),
            Err(e) => return Err(fail("cannot lock", path, e)),
        };
        let now = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Changed),
            Err(e) => return Err(fail("cannot stat", path, e)),
        };
        if Identity::of(&now) != Identity::of(&meta) {
            return Ok(Found::Changed);
        }
        // A stale marker refreshed meanwhile is alive after all.
        if verdict == Verdict::Stale && age(&now) < self.stale_after {
            return Ok(Found::Held);
        }
        match std::fs::remove_file(path) {
            Ok(()) => {
                tracing::warn!(path = %path.display(), ?verdict, "took over a lock marker");
                Ok(Found::Removed)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Found::Changed),
            Err(e) => Err(fail("cannot remove", path, e)),
        }
    }

    fn verdict_of(&self, bytes: &[u8], age: Duration) -> Verdict {
        match Marker::parse(bytes) {
            Ok(marker) => {
                let probe = if marker.host == self.host && self.strategy != Strategy::TimeOnly {
                    pid::probe(marker.pid)
                } else {
                    PidProbe::NotProbed
                };
                verdict(
                    self.strategy,
                    &marker,
                    &self.host,
                    probe,
                    age,
                    self.stale_after,
                )
            }
            Err(_) => verdict_unreadable(self.strategy, age, self.stale_after),
        }
    }

    /// Removes every marker in the directory that may be taken over (dead,
    /// reused, stale: semaphore slots nobody asks for too), and files
    /// left aside by a crash mid-create.
    pub fn sweep(&self) -> Result<Swept, LockError> {
        let mut swept = Swept::default();
        let entries =
            std::fs::read_dir(&self.dir).map_err(|e| fail("cannot list", &self.dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| fail("cannot list", &self.dir, e))?;
            let file_name = entry.file_name();
            let Some(file_name) = file_name.to_str() else {
                continue;
            };
            let path = entry.path();
            if file_name.starts_with('.') && file_name.ends_with(".new") {
                let old = std::fs::metadata(&path).is_ok_and(|m| age(&m) >= self.stale_after);
                if old && std::fs::remove_file(&path).is_ok() {
                    swept.removed.push(path);
                }
                continue;
            }
            if !is_marker_name(file_name) {
                continue;
            }
            match self.judge(&path)? {
                Found::Removed => swept.removed.push(path),
                Found::Held => swept.kept += 1,
                Found::Changed => {}
            }
        }
        swept.removed.sort();
        Ok(swept)
    }
}

/// `n.held` or `n.held.<digits>`, `n` a lock name.
fn is_marker_name(file_name: &str) -> bool {
    if file_name.starts_with('.') {
        return false;
    }
    if file_name.ends_with(".held") {
        return file_name.len() > ".held".len();
    }
    match file_name.rsplit_once(".held.") {
        Some((name, slot)) => {
            !name.is_empty() && !slot.is_empty() && slot.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

/// A held marker: refreshed in the background, checked to be ours. Its
/// file stays open while it is held, so its inode cannot be reused by a
/// marker created after it was removed: "the same file" is sound.
#[derive(Debug)]
pub(super) struct FileHold {
    path: PathBuf,
    _open: File,
    identity: Identity,
    /// The refresher: fires when the marker is found removed or replaced.
    refresher: Watchdog,
    released: bool,
}

/// Whether `path` still names the marker `identity`.
fn ours(path: &Path, identity: Identity) -> bool {
    std::fs::metadata(path).is_ok_and(|m| Identity::of(&m) == identity)
}

/// Refreshes the marker's modification time if it is still ours.
fn touch(path: &Path, identity: Identity) -> bool {
    let Ok(Ok(file)) = open_regular("file", OpenOptions::new().write(true), path) else {
        return false;
    };
    let same = file.metadata().is_ok_and(|m| Identity::of(&m) == identity);
    same && file.set_modified(SystemTime::now()).is_ok()
}

impl FileHold {
    fn start(
        path: PathBuf,
        open: File,
        meta: &std::fs::Metadata,
        token: FencingToken,
        stale_after: Duration,
    ) -> FileHold {
        let identity = Identity::of(meta);
        let every = stale_after / 3;
        let refreshed = path.clone();
        let refresher = Watchdog::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if !touch(&refreshed, identity) {
                    tracing::warn!(path = %refreshed.display(), token = token.0, "lock marker taken over or removed");
                    return LockLost::TakenOver;
                }
            }
        });
        FileHold {
            path,
            _open: open,
            identity,
            refresher,
            released: false,
        }
    }

    pub(super) fn refresh(&mut self) -> Result<(), LockError> {
        if !self.released && touch(&self.path, self.identity) {
            Ok(())
        } else {
            Err(LockError::Lost(LockLost::TakenOver))
        }
    }

    pub(super) fn release(&mut self) -> Result<Released, LockError> {
        if std::mem::replace(&mut self.released, true) {
            return Ok(Released::AlreadyGone);
        }
        self.refresher.stop();
        let file = match open_regular("file", OpenOptions::new().read(true), &self.path)? {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Released::AlreadyGone),
            Err(e) => return Err(fail("cannot open", &self.path, e)),
        };
        let mine = file
            .metadata()
            .is_ok_and(|m| Identity::of(&m) == self.identity);
        if !mine {
            return Ok(Released::AlreadyGone);
        }
        // A taker judging it holds this lock while it removes it: wait
        // for it, then look again.
        let _removing = flock(file).map_err(|e| fail("cannot lock", &self.path, e))?;
        if !ours(&self.path, self.identity) {
            return Ok(Released::AlreadyGone);
        }
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(Released::Released),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Released::AlreadyGone),
            Err(e) => Err(fail("cannot remove", &self.path, e)),
        }
    }

    pub(super) async fn lost(&self) -> LockLost {
        self.refresher.fired().await
    }
}

impl Drop for FileHold {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            tracing::warn!(path = %self.path.display(), error = %e, "lock marker not released");
        }
    }
}
