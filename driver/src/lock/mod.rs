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

mod etcd;
mod file;
mod flock;
mod holder;
mod memory;
mod outcome;
mod pid;
#[cfg(all(feature = "postgres", not(madsim)))]
mod postgres;
#[cfg(all(feature = "redis", not(madsim)))]
mod redis;
mod wait;
mod watchdog;

use std::time::Duration;

pub use coord_core::lock::{
    validate_lock_name, LockNameError, PidProbe, Released, Slots, SlotsError, Strategy,
    MAX_LOCK_NAME_LEN,
};
pub use coord_core::FencingToken;
pub use file::{FileConfig, FileLocks, Swept};
pub use flock::{FlockConfig, FlockLocks};
pub use memory::MemoryLocks;
#[cfg(all(feature = "postgres", not(madsim)))]
pub use postgres::{PostgresConfig, PostgresLocks};
#[cfg(all(feature = "redis", not(madsim)))]
pub use redis::{RedisConfig, RedisLocks};

/// Probes process `pid` on this host as file locks judge a marker's
/// holder: `Gone` when there is no such process or it is a zombie (dead,
/// not yet reaped), `Alive` with its start time (Linux: clock ticks since
/// boot), or `Denied`/`Failed` when it cannot tell. Sends no signal.
pub fn probe_pid(pid: u32) -> PidProbe {
    pid::probe(pid)
}

/// When process `pid` started (Linux: `/proc/<pid>/stat` field 22, clock
/// ticks since boot): with the pid, it names one process, where a pid
/// alone may be reused. `None` where it cannot be read.
pub fn process_start_time(pid: u32) -> Option<u64> {
    pid::start_time(pid)
}

use crate::session::Session;
use holder::Hold;
pub use holder::Holder;
pub use outcome::{LockError, LockLost};

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

    /// etcd locks on `session`: lock `n` is the [`Mutex`](crate::Mutex) named
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
            Backend::Memory(m) => m
                .try_acquire(name, self.slots)
                .map(|t| Holder::new(name, t, Hold::Memory)),
            Backend::Flock(f) => f
                .try_acquire(name)
                .map(|t| Holder::new(name, t, Hold::Flock)),
            Backend::File(f) => f
                .try_acquire(name)
                .map(|t| Holder::new(name, t, Hold::File)),
            #[cfg(all(feature = "redis", not(madsim)))]
            Backend::Redis(r) => r
                .try_acquire(name)
                .await
                .map(|t| Holder::new(name, t, |h| Hold::Redis(Box::new(h)))),
            #[cfg(all(feature = "postgres", not(madsim)))]
            Backend::Postgres(p) => p
                .try_acquire(name)
                .await
                .map(|t| Holder::new(name, t, |h| Hold::Postgres(Box::new(h)))),
            Backend::Etcd { session, prefix } => etcd::try_slots(session, prefix, name, self.slots)
                .await
                .map(|t| Holder::new(name, t, |g| Hold::Etcd(Some(g)))),
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
                    etcd::wait_slots(session, prefix, name, self.slots)
                        .await
                        .map(|t| Holder::new(name, t, |g| Hold::Etcd(Some(g))))
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
