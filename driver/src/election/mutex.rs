//! A distributed mutex with a fencing token, key-compatible with etcd's Go
//! `concurrency.Mutex` (and so with `etcdctl lock`): the same queue as an
//! election, with an empty value.

use std::time::Duration;

use coord_core::election::Mode;
use coord_core::Key;

use crate::election::{contend, queue_prefix, Contended, MutexGuard};
use crate::error::Error;
use crate::etcd::EtcdApi;
use crate::session::{Session, SessionOptions};

/// A lock under one name with a fencing token, key-compatible with etcd's
/// Go `concurrency.Mutex` (and so with `etcdctl lock`): the queue of an
/// election, with an empty value. Holders queue by create revision; the
/// first holds it. Holding it means holding its [`MutexGuard`]: `token()` for
/// fencing writes, `lost()` for losing it, `txn()` for writes etcd applies
/// only while it is held, `unlock()`. Dropping a guard unlocks in the
/// background.
#[derive(Debug)]
pub struct Mutex {
    session: Session,
    prefix: Key,
    owns_session: bool,
}

impl Mutex {
    /// A lock on a session of its own; [`close`](Self::close) revokes it.
    ///
    /// Cancel safety: as [`Session::new`](crate::Session::new): a lease granted
    /// before the drop expires within one TTL.
    pub async fn new<A: EtcdApi>(
        client: A,
        name: &str,
        opts: SessionOptions,
    ) -> Result<Mutex, Error> {
        let prefix = queue_prefix(name)?;
        Ok(Mutex {
            session: Session::new(client, opts).await?,
            prefix,
            owns_session: true,
        })
    }

    /// A lock on `session`, which it does not own.
    pub fn on(session: &Session, name: &str) -> Result<Mutex, Error> {
        Ok(Mutex {
            session: session.clone(),
            prefix: queue_prefix(name)?,
            owns_session: false,
        })
    }

    /// Waits until the lock is held. Cancel-safe: dropping the future
    /// withdraws from the queue and deletes its key. `Error::Lost` if the
    /// waiter's key or lease disappears while it waits.
    pub async fn lock(&self) -> Result<MutexGuard, Error> {
        match contend(&self.session, self.prefix.clone(), Vec::new(), Mode::Wait).await? {
            Contended::Leading(guard) => Ok(guard),
            Contended::NotElected => Err(Error::TaskGone),
        }
    }

    /// [`lock`](Self::lock) bounded by `timeout`: `Error::Timeout`
    /// withdraws from the queue.
    ///
    /// Cancel safety: as [`lock`](Self::lock).
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<MutexGuard, Error> {
        match tokio::time::timeout(timeout, self.lock()).await {
            Ok(result) => result,
            Err(_) => Err(Error::Timeout),
        }
    }

    /// One round trip: the lock if nobody holds it or waits for it, else
    /// `Error::Locked`, leaving no key behind.
    ///
    /// Cancel safety: cancel-safe: dropping the future withdraws the try and
    /// deletes its key if it was created.
    pub async fn try_lock(&self) -> Result<MutexGuard, Error> {
        match contend(&self.session, self.prefix.clone(), Vec::new(), Mode::Try).await? {
            Contended::Leading(guard) => Ok(guard),
            Contended::NotElected => Err(Error::Locked),
        }
    }

    /// The session the lock runs on.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// A lock with its own session closes (revokes) it, releasing the lock;
    /// a borrowed one does nothing.
    ///
    /// Cancel safety: as [`Session::close`](crate::Session::close).
    pub async fn close(&self) -> Result<(), Error> {
        if self.owns_session {
            self.session.close().await
        } else {
            Ok(())
        }
    }
}
