//! A campaign on a session's queue until it leads (`contend`), and what
//! leading gives: the [`Leadership`] handle (a held lock's guard too), with
//! its fencing token, its loss signal and the writes etcd applies only
//! while it leads, and the cloneable [`LeaderProbe`].

use std::sync::atomic::{AtomicBool, Ordering};

use coord_core::election::{Answer, AskedBy, ElectionId, Loss, Mode};
use coord_core::io::{Txn, TxnResponse};
use coord_core::{FencingToken, Key, LeaseId};
use tokio::sync::{oneshot, watch};

use super::names::validate_value;
use crate::error::Error;
use crate::session::{Phase, Request, Session};

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
