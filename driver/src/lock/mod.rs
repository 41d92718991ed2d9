//! One lock API over several backends, each with its own crash recovery
//! and a fencing token from every one.
//!
//! | backend | released when the holder dies | `lost()` fires when |
//! |---|---|---|
//! | [`Locker::flock`] | the kernel closes the fd at exit | never (the kernel holds it while the process lives) |
//! | [`Locker::file`] | a pid probe finds it dead, else the stale window passes | its marker was removed or replaced |
//! | [`Locker::etcd`] | the session's lease expires (a TTL) | the lease or the key is lost |
//! | `Locker::redis` (feature `redis`) | its key's TTL lapses | the key expired or changed hands |
//! | `Locker::postgres` (feature `postgres`) | the server ends its session (at once, or after its TCP keepalives go unanswered: about four request timeouts) | its connection ended, or a check of it went unanswered for a request timeout |
//! | [`Locker::memory`] | process exit (tests) | [`MemoryLocks::evict`] ends it |
//!
//! A [`Locker`] hands out [`Holder`]s for names (checked by
//! [`validate_lock_name`] before anything is written). With
//! [`Slots`] above 1 a name is a semaphore: that many holders at once,
//! each in a slot of its own. Every hold has a [`FencingToken`] strictly
//! greater than every earlier hold's under its name, across crashes and
//! restarts of the clients (and of the backend, where it keeps its data).

mod file;
mod flock;
mod memory;
mod pid;
#[cfg(all(feature = "postgres", not(madsim)))]
mod postgres;
#[cfg(all(feature = "redis", not(madsim)))]
mod redis;
mod wait;
mod watchdog;

use std::time::Duration;

pub use coord_core::lock::{
    validate_lock_name, LockNameError, Released, Slots, SlotsError, Strategy, MAX_LOCK_NAME_LEN,
};
pub use coord_core::FencingToken;
pub use file::{FileConfig, FileLocks, Swept};
pub use flock::{FlockConfig, FlockLocks};
pub use memory::MemoryLocks;
#[cfg(all(feature = "postgres", not(madsim)))]
pub use postgres::{PostgresConfig, PostgresLocks};
#[cfg(all(feature = "redis", not(madsim)))]
pub use redis::{RedisConfig, RedisLocks};

use crate::election::MutexGuard;
use crate::mutex::Mutex;
use crate::session::Session;

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
    /// The hold ended without `release` (see [`Holder::lost`]).
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

/// Hands out holds of names on one backend.
#[derive(Debug, Clone)]
pub struct Locker {
    backend: Backend,
    slots: Slots,
}

#[derive(Debug, Clone)]
enum Backend {
    Memory(MemoryLocks),
    Flock(FlockLocks),
    File(FileLocks),
    Etcd {
        session: Session,
        prefix: String,
    },
    #[cfg(all(feature = "redis", not(madsim)))]
    Redis(RedisLocks),
    #[cfg(all(feature = "postgres", not(madsim)))]
    Postgres(PostgresLocks),
}

/// Prefix of the etcd backend's lock names by default: none, so a lock `n`
/// is etcd's `concurrency.Mutex` named `n`, the lock that `etcdctl lock n`,
/// `coordctl lock n` and `Mutex::new(client, "n", ..)` take (keys
/// `n/<lease id in hex>`). Slot `i` above 0 is the mutex `.slots/n/i`.
pub const DEFAULT_ETCD_PREFIX: &str = "";

impl Locker {
    /// In-process locks (tests): `locks` is shared by every locker made
    /// from it.
    pub fn memory(locks: &MemoryLocks, slots: Slots) -> Locker {
        Locker {
            backend: Backend::Memory(locks.clone()),
            slots,
        }
    }

    /// `flock` locks in a directory (see [`FlockConfig`]).
    pub fn flock(config: FlockConfig) -> Result<Locker, LockError> {
        let slots = config.slots;
        Ok(Locker {
            backend: Backend::Flock(FlockLocks::new(config)?),
            slots,
        })
    }

    /// Marker-file locks in a directory (see [`FileConfig`]).
    pub fn file(config: FileConfig) -> Result<Locker, LockError> {
        let slots = config.slots;
        Ok(Locker {
            backend: Backend::File(FileLocks::open(config)?),
            slots,
        })
    }

    /// etcd locks on `session`: lock `n` is the [`Mutex`] named
    /// `prefix + n`, shared with Go's `concurrency.Mutex` and `etcdctl
    /// lock` under the same name (with slots, slot `i` above 0 is the
    /// mutex `prefix + ".slots/" + n + "/" + i`). Holds end with the
    /// session's lease.
    pub fn etcd(session: &Session, prefix: &str, slots: Slots) -> Locker {
        Locker {
            backend: Backend::Etcd {
                session: session.clone(),
                prefix: prefix.to_string(),
            },
            slots,
        }
    }

    /// Redis locks (see [`RedisConfig`]). Nothing is sent until the first
    /// acquire.
    #[cfg(all(feature = "redis", not(madsim)))]
    pub fn redis(config: RedisConfig) -> Result<Locker, LockError> {
        let slots = config.slots;
        Ok(Locker {
            backend: Backend::Redis(RedisLocks::open(config)?),
            slots,
        })
    }

    /// Postgres advisory locks (see [`PostgresConfig`]). Nothing is sent
    /// until the first acquire.
    #[cfg(all(feature = "postgres", not(madsim)))]
    pub fn postgres(config: PostgresConfig) -> Result<Locker, LockError> {
        let slots = config.slots;
        Ok(Locker {
            backend: Backend::Postgres(PostgresLocks::open(config)?),
            slots,
        })
    }

    /// The slots per name.
    pub fn slots(&self) -> Slots {
        self.slots
    }

    /// A free slot of `name` now, or `LockError::Locked`; never waits
    /// for a holder (one round trip for etcd).
    ///
    /// Cancel safety: cancel-safe for memory, flock and file locks (they take
    /// no await), and for etcd (a try withdraws its key). A Redis or Postgres
    /// try dropped after the server took the lock leaves it to be freed as
    /// after a holder's crash: at the TTL (Redis), when its connection closes
    /// (Postgres).
    pub async fn try_acquire(&self, name: &str) -> Result<Holder, LockError> {
        validate_lock_name(name)?;
        match &self.backend {
            Backend::Memory(m) => m.try_acquire(name, self.slots),
            Backend::Flock(f) => f.try_acquire(name),
            Backend::File(f) => f.try_acquire(name),
            #[cfg(all(feature = "redis", not(madsim)))]
            Backend::Redis(r) => r.try_acquire(name).await,
            #[cfg(all(feature = "postgres", not(madsim)))]
            Backend::Postgres(p) => p.try_acquire(name).await,
            Backend::Etcd { session, prefix } => {
                for slot in 0..self.slots.get() {
                    let mutex =
                        Mutex::on(session, &etcd_name(prefix, name, slot)).map_err(etcd_error)?;
                    match mutex.try_lock().await {
                        Ok(guard) => return Ok(Holder::etcd(name, slot, guard)),
                        // Held by someone, or by this session already.
                        Err(crate::Error::Locked | crate::Error::AlreadyCampaigning { .. }) => {
                            continue
                        }
                        Err(e) => return Err(etcd_error(e)),
                    }
                }
                Err(LockError::Locked)
            }
        }
    }

    /// Waits for a slot of `name`, at most `timeout` if given
    /// (`LockError::Timeout`). Cancel-safe: dropping the future gives up
    /// (an etcd waiter withdraws its key). Backends without a wait queue
    /// (memory, flock, file) try again at growing intervals, 5 ms up to
    /// 100 ms, so a freed lock is taken within 100 ms; etcd queues.
    pub async fn acquire(
        &self,
        name: &str,
        timeout: Option<Duration>,
    ) -> Result<Holder, LockError> {
        validate_lock_name(name)?;
        let wait = async {
            match &self.backend {
                Backend::Etcd { session, prefix } => {
                    wait::etcd_slots(session, prefix, name, self.slots).await
                }
                _ => wait::polling(|| async { self.try_acquire(name).await }).await,
            }
        };
        match timeout {
            Some(t) => tokio::time::timeout(t, wait)
                .await
                .unwrap_or(Err(LockError::Timeout)),
            None => wait.await,
        }
    }
}

/// A server backend's request timeout, 10 ms to 5 min; else
/// [`LockError::BadOptions`] naming `backend`.
#[cfg(any(feature = "redis", feature = "postgres"))]
fn check_request_timeout(backend: &str, timeout: Duration) -> Result<(), LockError> {
    if timeout < Duration::from_millis(10) || timeout > Duration::from_secs(300) {
        return Err(LockError::BadOptions(format!(
            "the {backend} request timeout must be 10 ms to 5 min, got {timeout:?}"
        )));
    }
    Ok(())
}

/// The error of a server backend that gave no answer within `within`.
#[cfg(any(feature = "redis", feature = "postgres"))]
fn no_answer(backend: &'static str, within: Duration) -> LockError {
    LockError::Backend {
        backend,
        cause: crate::Cause::msg(format!("no answer within {within:?}")),
    }
}

/// Completes once `signal` turns true (a hold's loss, set by its
/// refresher or connection task); never if its sender is gone first (the
/// hold was released).
async fn signalled(signal: &tokio::sync::watch::Receiver<bool>) {
    let mut signal = signal.clone();
    if signal.wait_for(|set| *set).await.is_err() {
        std::future::pending::<()>().await;
    }
}

fn etcd_name(prefix: &str, name: &str, slot: u32) -> String {
    if slot == 0 {
        format!("{prefix}{name}")
    } else {
        // Not under slot 0's queue (`prefix + name + "/"`), nor any
        // other name's: lock names never start with '.'.
        format!("{prefix}.slots/{name}/{slot}")
    }
}

fn etcd_error(e: crate::Error) -> LockError {
    match e {
        crate::Error::Locked => LockError::Locked,
        crate::Error::Timeout => LockError::Timeout,
        e => LockError::Etcd(e),
    }
}

/// One hold of a name: its slot and fencing token, `release`, and `lost`.
/// Dropping a holder releases it (in the background for etcd; at once
/// for the others).
#[derive(Debug)]
pub struct Holder {
    name: String,
    slot: u32,
    token: FencingToken,
    hold: Hold,
}

#[derive(Debug)]
enum Hold {
    Memory(memory::MemoryHold),
    Flock(flock::FlockHold),
    File(file::FileHold),
    Etcd(Option<MutexGuard>),
    #[cfg(all(feature = "redis", not(madsim)))]
    Redis(Box<redis::RedisHold>),
    #[cfg(all(feature = "postgres", not(madsim)))]
    Postgres(Box<postgres::PostgresHold>),
}

impl Holder {
    fn etcd(name: &str, slot: u32, guard: MutexGuard) -> Holder {
        Holder {
            name: name.to_string(),
            slot,
            token: guard.token(),
            hold: Hold::Etcd(Some(guard)),
        }
    }

    /// The name held.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The slot held (0 for a mutex).
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The fencing token: strictly greater than every earlier hold's of
    /// this name. Give it to whatever the lock protects, which refuses
    /// writes with an older token.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// Releases the hold. Idempotent: `Released` the first time it really
    /// released it, `AlreadyGone` when it was released before, or lost
    /// (taken over, expired) meanwhile.
    ///
    /// Cancel safety: cancel-safe: the holder stays; call `release` again (it
    /// is idempotent) or drop the holder, which releases it.
    pub async fn release(&mut self) -> Result<Released, LockError> {
        match &mut self.hold {
            Hold::Memory(h) => Ok(h.release()),
            Hold::Flock(h) => Ok(h.release()),
            Hold::File(h) => h.release(),
            #[cfg(all(feature = "redis", not(madsim)))]
            Hold::Redis(h) => h.release().await,
            #[cfg(all(feature = "postgres", not(madsim)))]
            Hold::Postgres(h) => h.release().await,
            Hold::Etcd(guard) => match guard.take() {
                None => Ok(Released::AlreadyGone),
                Some(g) if g.has_ended() => Ok(Released::AlreadyGone),
                Some(g) => g
                    .unlock()
                    .await
                    .map(|()| Released::Released)
                    .map_err(etcd_error),
            },
        }
    }

    /// Keeps a hold with a TTL alive now (a file lock refreshes its
    /// marker; etcd's session does it in the background, so this only
    /// checks the hold is still there). `LockError::NoTtl` for flock and
    /// memory, whose holds last as long as the holder; `LockError::Lost`
    /// if the hold is gone.
    ///
    /// Cancel safety: cancel-safe: an extension dropped part-way may or may not
    /// have landed; call `extend` again.
    pub async fn extend(&mut self) -> Result<(), LockError> {
        match &mut self.hold {
            Hold::Memory(_) => Err(LockError::NoTtl("memory")),
            Hold::Flock(_) => Err(LockError::NoTtl("flock")),
            Hold::File(h) => h.refresh(),
            #[cfg(all(feature = "redis", not(madsim)))]
            Hold::Redis(h) => h.extend().await,
            #[cfg(all(feature = "postgres", not(madsim)))]
            Hold::Postgres(_) => Err(LockError::NoTtl("postgres")),
            Hold::Etcd(Some(g)) if !g.has_ended() => Ok(()),
            Hold::Etcd(_) => Err(LockError::Lost(LockLost::TakenOver)),
        }
    }

    /// Completes when the hold is lost without `release`: taken over,
    /// removed, expired. Never completes for flock (the kernel holds the
    /// lock while the process lives) or after `release`.
    ///
    /// Cancel safety: cancel-safe (it only waits).
    pub async fn lost(&self) -> LockLost {
        match &self.hold {
            Hold::Memory(h) => h.lost().await,
            Hold::Flock(_) | Hold::Etcd(None) => std::future::pending().await,
            Hold::File(h) => h.lost().await,
            #[cfg(all(feature = "redis", not(madsim)))]
            Hold::Redis(h) => h.lost().await,
            #[cfg(all(feature = "postgres", not(madsim)))]
            Hold::Postgres(h) => h.lost().await,
            Hold::Etcd(Some(g)) => match g.lost().await {
                Some(loss) => LockLost::Etcd(loss),
                // Released: nothing more can happen.
                None => std::future::pending().await,
            },
        }
    }
}
