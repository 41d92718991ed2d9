//! A hold of a name on any backend: the [`Holder`] every backend's holds
//! are handed out as, with one `release`, `extend` and `lost`.

use coord_core::lock::Released;
use coord_core::FencingToken;

use super::etcd::etcd_error;
use super::outcome::{LockError, LockLost, Taken};
#[cfg(all(feature = "postgres", not(madsim)))]
use super::postgres;
#[cfg(all(feature = "redis", not(madsim)))]
use super::redis;
use super::{file, flock, memory};
use crate::election::MutexGuard;

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

/// A backend's hold, as a [`Holder`] keeps it.
#[derive(Debug)]
pub(super) enum Hold {
    Memory(memory::MemoryHold),
    Flock(flock::FlockHold),
    File(file::FileHold),
    /// `None` once released.
    Etcd(Option<MutexGuard>),
    #[cfg(all(feature = "redis", not(madsim)))]
    Redis(Box<redis::RedisHold>),
    #[cfg(all(feature = "postgres", not(madsim)))]
    Postgres(Box<postgres::PostgresHold>),
}

impl Holder {
    /// The holder of `name` that `taken` is, its hold wrapped by `wrap`.
    pub(super) fn new<H>(name: &str, taken: Taken<H>, wrap: impl FnOnce(H) -> Hold) -> Holder {
        Holder {
            name: name.to_string(),
            slot: taken.slot,
            token: taken.token,
            hold: wrap(taken.hold),
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

    /// The open files and sockets whose life is this hold's: a `flock`
    /// lock's file, a Postgres lock's connection. A process that keeps a
    /// duplicate of each (passed over a Unix socket, say) keeps the hold
    /// past this process' death, until it closes them; `release` (or
    /// dropping the holder) still ends the hold everywhere. `coordctl`
    /// hands them to the guard of the command it runs, so that a holder
    /// killed with SIGKILL keeps its lock until its command is gone.
    /// Empty for the other backends (their holds live in a server, a
    /// marker file or this process), and once released.
    pub fn hold_fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        match &self.hold {
            Hold::Flock(h) => h.fd().into_iter().collect(),
            #[cfg(all(feature = "postgres", not(madsim)))]
            Hold::Postgres(h) if !h.is_released() => vec![h.fd()],
            _ => Vec::new(),
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
