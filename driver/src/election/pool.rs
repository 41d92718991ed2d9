//! `ElectionPool`: elections for many names on ONE session (one lease, one
//! keep-alive stream), unlike go-coord's pool, which holds a session per
//! name. Keep-alive load does not grow with the number of names.

use std::time::Duration;

use crate::election::Election;
use crate::error::Error;
use crate::etcd::EtcdApi;
use crate::runtime::status::LeaseStatus;
use crate::session::{Session, SessionOptions};

/// A pool's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Campaigns and leaderships in progress (one per name).
    pub names: usize,
    /// Leases the pool holds right now: 1 while registered, 0 while
    /// healing or closed.
    pub leases_held: usize,
    /// Times the pool's lease was lost and replaced.
    pub heals: u64,
    /// True once closed.
    pub closed: bool,
    /// The lease TTL asked for.
    pub ttl: Duration,
}

/// Elections for many names sharing one session: one lease and one
/// keep-alive stream however many names (go-coord's pool holds a session
/// per name), so keep-alive load does not grow with names. When the
/// session's lease is lost, every leadership borrowed from the pool reports lost and later
/// campaigns use the new lease: a dead session is never handed out.
#[derive(Debug, Clone)]
pub struct ElectionPool {
    session: Session,
}

impl ElectionPool {
    /// A pool on a new session (go-coord's `NewElectionPool`).
    ///
    /// Cancel safety: as [`Session::new`](crate::Session::new): a lease granted
    /// before the drop expires within one TTL.
    pub async fn new<A: EtcdApi>(client: A, opts: SessionOptions) -> Result<ElectionPool, Error> {
        Ok(ElectionPool {
            session: Session::new(client, opts).await?,
        })
    }

    /// The election for `name`, borrowing the pool's session (its `close`
    /// leaves the pool alone).
    pub fn election(&self, name: &str) -> Result<Election, Error> {
        if self.session.is_closed() {
            return Err(Error::Closed);
        }
        Election::on(&self.session, name)
    }

    /// The pool's numbers now.
    pub fn stats(&self) -> PoolStats {
        let counters = self.session.counters();
        let status = self.session.state().borrow().clone();
        PoolStats {
            names: counters.campaigns,
            leases_held: usize::from(matches!(status, LeaseStatus::Registered { .. })),
            heals: counters.heals,
            closed: matches!(status, LeaseStatus::Closed { .. } | LeaseStatus::Abandoned),
            ttl: self.session.ttl(),
        }
    }

    /// The pool's session.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Revokes the pool's lease: every leadership held through the pool
    /// ends at once (their keys go with the lease).
    ///
    /// Cancel safety: as [`Session::close`](crate::Session::close).
    pub async fn close(&self) -> Result<(), Error> {
        self.session.close().await
    }
}
