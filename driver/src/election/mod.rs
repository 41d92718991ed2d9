//! Leader election, key-compatible with etcd's Go `concurrency` package
//! (and so with `etcdctl elect` and go-coord): candidates queue under
//! `<name>/` by create revision; the first leads. The same queue serves a
//! [`Mutex`] (`etcdctl lock`), and an [`ElectionPool`] runs elections for
//! many names on one lease.
//!
//! An [`Election`] made with [`Election::new`] owns its session (closing it
//! revokes the session's lease); one borrowed from a [`Session`] or an
//! [`ElectionPool`] does not.
//!
//! # Contract
//!
//! - Keys are etcd's Go `concurrency` keys: `<name>/<lease id in lowercase
//!   hex>` = the candidate's value, attached to its session's lease. The
//!   leader is the key with the lowest create revision; its create revision
//!   is the **fencing token**, strictly increasing across leaders. `etcdctl
//!   elect NAME VALUE` (and go-coord) queue with coord's candidates.
//! - `campaign` joins with one transaction that creates the key only if
//!   absent and reads the queue at the same revision (so a retry after an
//!   unknown outcome finds its own key), then waits until no key with a lower
//!   create revision is left. It fails with `Error::Lost` as soon as its own
//!   key is deleted (by anyone) or its session's lease is lost: no zombie
//!   candidate. Dropping the future (or `campaign_timeout`) withdraws it and
//!   deletes its key.
//! - `try_campaign` is one round trip: it creates the key only if nobody is
//!   queued at all (a range compare over the name), so a loser leaves no key
//!   and gets `Error::Locked`, as `Mutex::try_lock` does.
//! - A `Leadership` has `token()` (the fencing token); `is_leader()`, which checks the lease's
//!   proven deadline (send time of the last acknowledged keep-alive plus its
//!   TTL) against the clock at call time, so it is right even after a long GC
//!   pause; `lost()`, which completes when the key is deleted by anyone, the
//!   lease is lost or its deadline passes, or the session is closed (`None`
//!   after this handle resigned); `proclaim(value)` and `txn(txn)`, both
//!   applied by etcd only while the key still has the token as its create
//!   revision (`Error::NotLeader` otherwise, nothing applied; `Error::Request`
//!   when the outcome is unknown); `resign()`, which deletes the key only if
//!   it is still this leadership's; and `probe()`, a cloneable view for other
//!   tasks. Dropping a `Leadership` resigns in the background.
//! - `leader()` reads the current leader once; `observe()` streams every
//!   change of leader (`Observed { leader, revision }`, `leader: None` when
//!   nobody leads), once per revision, through broken streams and
//!   compactions (the watcher's list-and-watch). `Observe::start(client,
//!   name)` observes without a session: it writes nothing.
//! - One campaign per name per session at a time (`Error::AlreadyCampaigning`:
//!   both would write the same key); a campaign on a name whose previous
//!   campaign is still leaving waits for the old key to go. A campaign that
//!   has not joined yet when its session loses the lease joins again with the
//!   next lease (a try, one round trip, fails instead). Bad input writes nothing: an empty name,
//!   one ending in `/` or holding a control character (`Error::InvalidName`),
//!   a value over 1 MiB (`Error::ValueTooLarge`).

mod leadership;
mod mutex;
mod names;
mod observe;
mod pool;

pub(crate) use leadership::{contend, Contended};
pub use leadership::{LeaderProbe, Leadership, MutexGuard};
pub use mutex::Mutex;
pub(crate) use names::queue_prefix;
pub use names::{validate_name, validate_value};
pub(crate) use observe::ObserveSettings;
pub use observe::{Observe, Observed};
pub use pool::{ElectionPool, PoolStats};

use std::time::Duration;

use coord_core::election::Mode;
use coord_core::io::{Get, RangeRequest, Sort};
use coord_core::observer::Leader;
use coord_core::{FencingToken, Key};

use crate::error::Error;
use crate::etcd::EtcdApi;
use crate::session::{Session, SessionOptions};

/// An election under one name.
#[derive(Debug)]
pub struct Election {
    session: Session,
    name: String,
    prefix: Key,
    owns_session: bool,
}

impl Election {
    /// An election on a session of its own (go-coord's `NewElection`):
    /// [`close`](Self::close) revokes it. Fails fast, writing nothing, on a
    /// bad name or options, or if the session's first lease grant fails.
    ///
    /// Cancel safety: as [`Session::new`]: a lease granted before the drop
    /// expires within one TTL.
    pub async fn new<A: EtcdApi>(
        client: A,
        name: &str,
        opts: SessionOptions,
    ) -> Result<Election, Error> {
        let prefix = queue_prefix(name)?;
        let session = Session::new(client, opts).await?;
        Ok(Election {
            session,
            name: name.to_string(),
            prefix,
            owns_session: true,
        })
    }

    /// An election on `session`, which it does not own: closing the
    /// election leaves the session alone.
    pub fn on(session: &Session, name: &str) -> Result<Election, Error> {
        Ok(Election {
            session: session.clone(),
            name: name.to_string(),
            prefix: queue_prefix(name)?,
            owns_session: false,
        })
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The session campaigns run on.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Campaigns with `value` and waits until elected. Queues behind every
    /// candidate with a lower create revision (coord's and `etcdctl
    /// elect`'s alike). Fails with `Error::Lost` as soon as the candidate's
    /// key is deleted or the session's lease is lost while it waits (no
    /// zombie candidate). Cancel-safe: dropping the future withdraws the
    /// campaign and deletes its key. One campaign per name per session at a
    /// time (`Error::AlreadyCampaigning`).
    pub async fn campaign(&self, value: impl Into<Vec<u8>>) -> Result<Leadership, Error> {
        match contend(&self.session, self.prefix.clone(), value.into(), Mode::Wait).await? {
            Contended::Leading(l) => Ok(l),
            Contended::NotElected => Err(Error::TaskGone),
        }
    }

    /// [`campaign`](Self::campaign) bounded by `timeout`: `Error::Timeout`
    /// withdraws the campaign (its key is deleted).
    ///
    /// Cancel safety: as [`campaign`](Self::campaign): dropping the future
    /// withdraws the campaign.
    pub async fn campaign_timeout(
        &self,
        value: impl Into<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Leadership, Error> {
        match tokio::time::timeout(timeout, self.campaign(value)).await {
            Ok(result) => result,
            Err(_) => Err(Error::Timeout),
        }
    }

    /// One round trip: leadership if nobody else is queued, else
    /// `Error::Locked`, leaving no key behind (the try rule of
    /// [`Mutex::try_lock`](crate::Mutex::try_lock) and the lock family's
    /// `try_acquire`). Never blocks behind another candidate.
    ///
    /// Cancel safety: cancel-safe: dropping the future withdraws the try and
    /// deletes its key if it was created.
    pub async fn try_campaign(&self, value: impl Into<Vec<u8>>) -> Result<Leadership, Error> {
        match contend(&self.session, self.prefix.clone(), value.into(), Mode::Try).await? {
            Contended::Leading(l) => Ok(l),
            Contended::NotElected => Err(Error::Locked),
        }
    }

    /// The current leader (the key with the lowest create revision), read
    /// linearizably once; `None` when nobody leads.
    ///
    /// Cancel safety: cancel-safe (a read).
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        let request = RangeRequest {
            get: Get {
                key: self.prefix.clone(),
                prefix: true,
                sort: Sort::CreateAscending,
                limit: 1,
            },
            consistency: coord_core::io::Consistency::Linearizable,
            after: None,
            revision: coord_core::Revision(0),
        };
        let listing = self
            .session
            .client()
            .range(request, self.session.request_timeout())
            .await?;
        Ok(listing.kvs.into_iter().next().map(|kv| Leader {
            key: kv.key,
            value: kv.value,
            token: FencingToken(kv.create_revision.0),
        }))
    }

    /// Every change of leader from now on, "no leader" included, through
    /// broken streams and compactions. The first item is the current
    /// leader.
    pub fn observe(&self) -> Observe {
        self.session
            .client()
            .observe(self.prefix.clone(), self.session.observe_settings())
    }

    /// Closes the election: a standalone one closes (revokes) its session,
    /// ending its leadership and campaigns; a borrowed one does nothing
    /// (resign its leadership to step down).
    ///
    /// Cancel safety: as [`Session::close`].
    pub async fn close(&self) -> Result<(), Error> {
        if self.owns_session {
            self.session.close().await
        } else {
            Ok(())
        }
    }
}

impl Observe {
    /// Observes the election `name` without a session (nothing is
    /// written): the same stream as [`Election::observe`](crate::Election::observe).
    /// Fails only on a bad name.
    pub fn start<A: EtcdApi>(client: A, name: &str) -> Result<Observe, Error> {
        Self::start_with(client, name, &crate::SessionOptions::default())
    }

    /// [`start`](Self::start) with the request timeout, probe interval,
    /// backoff and seed of `opts` (the rest is unused).
    pub fn start_with<A: EtcdApi>(
        client: A,
        name: &str,
        opts: &crate::SessionOptions,
    ) -> Result<Observe, Error> {
        let seed = opts
            .seed
            .unwrap_or_else(|| crate::liveness::default_seed(name));
        Ok(Self::spawn(
            client,
            queue_prefix(name)?,
            ObserveSettings {
                request_timeout: opts.request_timeout,
                probe_interval: opts.probe_interval,
                backoff: opts.backoff.clone(),
                seed,
            },
        ))
    }
}
