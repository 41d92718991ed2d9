//! Leader election, key-compatible with etcd's Go `concurrency` package
//! (and so with `etcdctl elect` and go-coord): candidates queue under
//! `<name>/` by create revision; the first leads.
//!
//! An [`Election`] made with [`Election::new`] owns its session (closing it
//! revokes the session's lease); one borrowed from a [`Session`] or an
//! [`ElectionPool`](crate::ElectionPool) does not.
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

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use coord_core::election::{Answer, AskedBy, ElectionId, Loss, Mode};
use coord_core::io::{Get, RangeRequest, Sort, Txn, TxnResponse};
use coord_core::observer::Leader;
use coord_core::{FencingToken, Key, LeaseId};
use tokio::sync::{oneshot, watch};

use crate::api::EtcdApi;
use crate::error::Error;
use crate::metadata::MAX_METADATA_LEN;
use crate::observe::Observe;
use crate::session::{Phase, Request, Session, SessionOptions};

/// Checks an election or lock name and returns its key prefix (`name/`).
/// Refused: empty, ending with `/` (the queue would nest), or holding a
/// control character.
pub(crate) fn queue_prefix(name: &str) -> Result<Key, Error> {
    let why = if name.is_empty() {
        Some("it is empty")
    } else if name.ends_with('/') {
        Some("it ends with '/'")
    } else if name.chars().any(char::is_control) {
        Some("it contains a control character")
    } else if name.len() > 4096 {
        Some("it is longer than 4096 bytes")
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::InvalidName {
            name: name.to_string(),
            why,
        }),
        None => Ok(Key(format!("{name}/").into_bytes())),
    }
}

/// Checks an election or lock name as every constructor does, without
/// anything else: `Error::InvalidName` when it is empty, ends with `/`,
/// holds a control character or is longer than 4,096 bytes.
pub fn validate_name(name: &str) -> Result<(), Error> {
    queue_prefix(name).map(|_| ())
}

/// Checks an election value (or a proclaimed one) as every campaign does:
/// `Error::ValueTooLarge` above [`MAX_METADATA_LEN`]
/// bytes (etcd refuses requests over 1.5 MiB by default).
pub fn validate_value(value: &[u8]) -> Result<(), Error> {
    if value.len() > MAX_METADATA_LEN {
        return Err(Error::ValueTooLarge {
            size: value.len(),
            max: MAX_METADATA_LEN,
        });
    }
    Ok(())
}

/// Where a campaign ended up.
pub(crate) enum Contended {
    Leading(Leadership),
    NotElected,
}

/// Withdraws a campaign whose future is dropped before it is decided.
struct LeaveOnDrop<'a> {
    session: &'a Session,
    id: ElectionId,
    armed: bool,
}

impl Drop for LeaveOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.session.send(Request::Leave { id: self.id });
        }
    }
}

/// Campaigns for the queue under `prefix` until elected (or, with
/// `Mode::Try`, answered once). Cancel-safe: dropping the future withdraws
/// the campaign and deletes its key.
pub(crate) async fn contend(
    session: &Session,
    prefix: Key,
    value: Vec<u8>,
    mode: Mode,
) -> Result<Contended, Error> {
    validate_value(&value)?;
    let id = session.next_id();
    let (phase_tx, mut phase) = watch::channel(Phase::Campaigning);
    session.send(Request::Campaign {
        id,
        name: prefix,
        value,
        mode,
        phase: phase_tx,
    })?;
    let mut guard = LeaveOnDrop {
        session,
        id,
        armed: true,
    };
    let decided = phase
        .wait_for(|p| !matches!(p, Phase::Campaigning))
        .await
        .map(|p| p.clone());
    guard.armed = false;
    match decided {
        Ok(Phase::Leading { key, lease, token }) => Ok(Contended::Leading(Leadership {
            session: session.clone(),
            id,
            key,
            lease,
            token,
            phase,
            resigned: AtomicBool::new(false),
        })),
        Ok(Phase::NotElected { .. }) => Ok(Contended::NotElected),
        Ok(Phase::Lost(loss)) => Err(Error::Lost(loss)),
        Ok(Phase::Refused(e)) => Err(e),
        Ok(Phase::Left) => Err(Error::Lost(Loss::SessionClosed)),
        Ok(Phase::Campaigning) | Err(_) => Err(Error::TaskGone),
    }
}

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
            .backend()
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
            .backend()
            .observe(self.prefix.clone(), self.session.watch_settings())
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

/// Leadership (or a held lock). Dropping it resigns in the background
/// (its key is deleted; if etcd cannot be reached, it goes with the
/// session's lease).
#[derive(Debug)]
pub struct Leadership {
    session: Session,
    id: ElectionId,
    key: Key,
    lease: LeaseId,
    token: FencingToken,
    phase: watch::Receiver<Phase>,
    resigned: AtomicBool,
}

/// A held lock: the same handle as a leadership.
pub type MutexGuard = Leadership;

impl Leadership {
    /// The fencing token: the key's create revision, strictly increasing
    /// across successive leaders (lock holders) of the name. The same name
    /// as the lock family's [`Holder::token`](crate::lock::Holder::token).
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The fencing token; see [`token`](Self::token).
    #[deprecated(
        since = "0.2.0",
        note = "renamed `token()`, as on the lock family's `Holder`"
    )]
    pub fn fence(&self) -> FencingToken {
        self.token
    }

    /// The leader's key, `<name>/<lease hex>`.
    pub fn key(&self) -> String {
        self.key.to_string()
    }

    /// The session's lease the key is attached to.
    pub fn lease(&self) -> LeaseId {
        self.lease
    }

    /// True while leading: not reported lost, and the session's lease
    /// provably alive *now* (the deadline is checked against the clock at
    /// call time, so this is right even after a long GC pause). Use the
    /// guarded [`txn`](Self::txn) for anything that must not happen twice.
    pub fn is_leader(&self) -> bool {
        believes(&self.session, &self.phase, self.lease)
    }

    /// A cloneable view of this leadership for other tasks: `is_leader()`,
    /// `token()` and `lost()`, without the power to resign.
    pub fn probe(&self) -> LeaderProbe {
        LeaderProbe {
            session: self.session.clone(),
            key: self.key.clone(),
            lease: self.lease,
            token: self.token,
            phase: self.phase.clone(),
        }
    }

    /// Completes when the leadership ends: `Some(loss)` when it was lost
    /// (key deleted by anyone, lease lost or its deadline passed, session
    /// closed), `None` when this handle resigned.
    ///
    /// Cancel safety: cancel-safe (it only waits).
    pub async fn lost(&self) -> Option<Loss> {
        ended(&self.phase).await
    }

    /// True once the leadership has ended (lost, or resigned): `lost()`
    /// would complete at once.
    pub fn has_ended(&self) -> bool {
        self.phase.borrow().is_over()
    }

    /// Replaces the leader's value, only while the key still has the
    /// token as its create revision (`Error::NotLeader` otherwise).
    ///
    /// Cancel safety: not cancel-safe: a proclaim sent before the future was
    /// dropped may still be applied; only its answer is lost.
    pub async fn proclaim(&self, value: impl Into<Vec<u8>>) -> Result<(), Error> {
        let value = value.into();
        validate_value(&value)?;
        match self.ask(AskedBy::Proclaim(value)).await? {
            Answer::Proclaimed => Ok(()),
            other => Err(answer_error(other)),
        }
    }

    /// Runs `txn` only while leading: etcd applies it only if the key
    /// still has the token as its create revision, atomically. Returns the
    /// transaction's own result, `Error::NotLeader` if etcd refused the
    /// guard (nothing applied), or `Error::Request` if the outcome is
    /// unknown.
    ///
    /// Cancel safety: not cancel-safe: a transaction sent before the future was
    /// dropped may still be applied (still only while leading); only its answer
    /// is lost.
    pub async fn txn(&self, txn: Txn) -> Result<TxnResponse, Error> {
        match self.ask(AskedBy::Txn(txn)).await? {
            Answer::Txn(resp) => Ok(resp),
            other => Err(answer_error(other)),
        }
    }

    async fn ask(&self, asked: AskedBy) -> Result<Answer, Error> {
        let (reply, answer) = oneshot::channel();
        self.session.send(Request::Ask {
            id: self.id,
            asked,
            reply,
        })?;
        answer.await.map_err(|_| Error::TaskGone)
    }

    /// Steps down: deletes the key if it is still this leadership's (etcd
    /// hands over to the next candidate at once). Returns once etcd
    /// answered, or `Error::ResignNotConfirmed` after the request timeout
    /// while the delete goes on in the background (or the key goes with
    /// the lease). Idempotent with the leadership's end: a leadership
    /// already lost resigns at once.
    ///
    /// Cancel safety: dropping the future does not stop the resign, which
    /// goes on in the background.
    pub async fn resign(self) -> Result<(), Error> {
        self.resigned.store(true, Ordering::Relaxed);
        self.session.send(Request::Leave { id: self.id })?;
        let mut phase = self.phase.clone();
        let timeout = self.session.request_timeout();
        let left = tokio::time::timeout(timeout, async move {
            let _ = phase.wait_for(Phase::is_over).await;
        })
        .await;
        left.map_err(|_| Error::ResignNotConfirmed {
            key: self.key.to_string(),
        })
    }

    /// Releases a lock: the same as [`resign`](Self::resign).
    ///
    /// Cancel safety: as [`resign`](Self::resign).
    pub async fn unlock(self) -> Result<(), Error> {
        self.resign().await
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if !self.resigned.load(Ordering::Relaxed) && !self.phase.borrow().is_over() {
            let _ = self.session.send(Request::Leave { id: self.id });
        }
    }
}

/// Leading, and the session's lease provably alive now.
fn believes(session: &Session, phase: &watch::Receiver<Phase>, lease: LeaseId) -> bool {
    if !matches!(*phase.borrow(), Phase::Leading { .. }) {
        return false;
    }
    let deadline = session.deadline();
    deadline.lease == Some(lease) && deadline.expires_at.is_some_and(|at| session.now() < at)
}

/// How a leadership ended (waiting until it does).
async fn ended(phase: &watch::Receiver<Phase>) -> Option<Loss> {
    let mut phase = phase.clone();
    let ended = phase.wait_for(Phase::is_over).await.map(|p| p.clone());
    match ended {
        Ok(Phase::Lost(loss)) => Some(loss),
        Ok(Phase::Left) => None,
        _ => Some(Loss::SessionClosed),
    }
}

/// A cloneable view of a [`Leadership`] (see [`Leadership::probe`]).
#[derive(Debug, Clone)]
pub struct LeaderProbe {
    session: Session,
    key: Key,
    lease: LeaseId,
    token: FencingToken,
    phase: watch::Receiver<Phase>,
}

impl LeaderProbe {
    /// As [`Leadership::is_leader`].
    pub fn is_leader(&self) -> bool {
        believes(&self.session, &self.phase, self.lease)
    }

    /// As [`Leadership::token`].
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The fencing token; see [`token`](Self::token).
    #[deprecated(
        since = "0.2.0",
        note = "renamed `token()`, as on the lock family's `Holder`"
    )]
    pub fn fence(&self) -> FencingToken {
        self.token
    }

    /// The leader's key.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// As [`Leadership::lost`].
    ///
    /// Cancel safety: cancel-safe (it only waits).
    pub async fn lost(&self) -> Option<Loss> {
        ended(&self.phase).await
    }

    /// True once the leadership has ended (lost, or resigned): `lost()`
    /// would complete at once.
    pub fn has_ended(&self) -> bool {
        self.phase.borrow().is_over()
    }

    /// The session's lease the leadership is on.
    pub fn lease(&self) -> LeaseId {
        self.lease
    }
}

fn answer_error(answer: Answer) -> Error {
    match answer {
        Answer::NotLeader => Error::NotLeader,
        Answer::Failed(f) => Error::Request(f),
        Answer::Proclaimed | Answer::Txn(_) => Error::TaskGone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why(name: &str) -> Option<&'static str> {
        match queue_prefix(name) {
            Ok(_) => None,
            Err(Error::InvalidName { why, .. }) => Some(why),
            Err(other) => panic!("{name:?}: {other}"),
        }
    }

    #[test]
    fn names_are_checked_before_anything_is_written() {
        assert!(matches!(queue_prefix("jobs"), Ok(Key(k)) if k == b"jobs/"));
        assert_eq!(why(""), Some("it is empty"));
        assert_eq!(why("a/"), Some("it ends with '/'"));
        assert_eq!(why("a\nb"), Some("it contains a control character"));
        // Nested names are fine; the queue lives under `name/`.
        assert_eq!(why("team/jobs"), None);
        assert_eq!(why(&"n".repeat(4096)), None);
        assert_eq!(why(&"n".repeat(4097)), Some("it is longer than 4096 bytes"));
    }

    #[test]
    fn validate_name_refuses_what_the_constructors_refuse() {
        assert!(validate_name("team/jobs").is_ok());
        for bad in ["", "jobs/", "a\u{0}b"] {
            assert!(
                matches!(validate_name(bad), Err(Error::InvalidName { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn values_up_to_the_metadata_limit_are_taken() {
        assert!(validate_value(&vec![b'x'; MAX_METADATA_LEN]).is_ok());
        assert!(validate_value(b"").is_ok());
        assert!(matches!(
            validate_value(&vec![b'x'; MAX_METADATA_LEN + 1]),
            Err(Error::ValueTooLarge { size, max })
                if size == MAX_METADATA_LEN + 1 && max == MAX_METADATA_LEN
        ));
    }
}
