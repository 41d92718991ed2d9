//! One campaign for the leadership of a name (or for a lock: the same
//! queue), on a [`Session`](crate::session)'s lease. Key-compatible with
//! etcd's Go `concurrency` package, so `etcdctl elect` and `etcdctl lock`
//! queue with coord's candidates in both directions.
//!
//! Protocol:
//! - The candidate's key is `<name><lease id in lowercase hex>` (`name`
//!   ends with `/`), its value the candidate's, attached to the session's
//!   lease. The leader is the key with the lowest create revision under
//!   `name`; its create revision is the **fencing token**, strictly
//!   increasing across successive leaders.
//! - Joining is one transaction that creates the key only if absent and
//!   reads the whole queue at the same revision, so a retry after an
//!   unknown outcome finds its own key: `If(create(key) = 0) Then(Put(key),
//!   Get(name*)) Else(Get(name*))`.
//! - A **try** creates the key only if nobody is queued at all (a range
//!   compare over the name): one round trip, and a loser leaves no key.
//! - Queued and leading candidates mirror the queue (the shared
//!   list-and-watch: resumed after broken streams, re-listed after
//!   compaction). A candidate leads once no key with a lower create
//!   revision is left; its own key disappearing (deleted by anyone) is a
//!   loss, reported at once, as is the loss of the session's lease.
//! - Leaving (resign, or a cancelled campaign) deletes the key, guarded by
//!   its create revision when known, retried until etcd answers.
//! - Proclaim and guarded transactions run only while the key still has
//!   the token as its create revision; etcd refuses them otherwise
//!   (`NotLeader`).
//!
//! A candidate is a part of its session, not a machine: the session lends
//! it op ids, routes its completions and drains its outputs.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::backoff::{Backoff, BackoffConfig};
use crate::ids::{FencingToken, Key, LeaseId, OpId, Revision};
use crate::io::{
    Command, Compare, CompareOp, CompareTarget, Completion, Get, Listing, Txn, TxnOp,
    TxnOpResponse, TxnResponse,
};
use crate::kv::KeyValue;
use crate::mirror::{Change, Mirror, MirrorConfig};
use crate::outbox::{OpIds, Output};
use crate::outcome::{AttemptFailure, Outcome, Retry};
use crate::time::Instant;

mod leave;
mod requests;
mod vocabulary;

pub(crate) use vocabulary::CampaignInput;
pub use vocabulary::{Answer, AskedBy, ElectionEvent, ElectionId, Loss, Mode, Standing};

/// Parameters a session gives its candidates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CampaignConfig {
    pub(crate) request_timeout: Duration,
    pub(crate) probe_interval: Duration,
    pub(crate) backoff: BackoffConfig,
    pub(crate) seed: u64,
}

/// The key a session's lease writes under `name`: Go's `%s%x`.
pub fn candidate_key(name: &Key, lease: LeaseId) -> Key {
    let sign = if lease.0.is_negative() { "-" } else { "" };
    let hex = format!("{sign}{:x}", lease.0.unsigned_abs());
    Key([name.as_bytes(), hex.as_bytes()].concat())
}

/// What to tell once a leave is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tell {
    /// `Left`: the user asked to leave.
    Left,
    /// Nothing: the campaign already ended (a try that lost, cleaning up
    /// a key of its own from an earlier attempt).
    Nothing,
}

/// The key a leave deletes, guarded by its create revision when known.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Leave {
    key: Key,
    token: Option<Revision>,
    tell: Tell,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaveStep {
    /// The join is still in flight: its answer says what to delete (a
    /// delete sent now could reach etcd before the join and miss it).
    AwaitJoin {
        op: OpId,
        deadline: Instant,
    },
    InFlight {
        op: OpId,
        deadline: Instant,
    },
    RetryAt(Instant),
}

#[derive(Debug)]
enum State {
    Pending,
    Joining {
        op: OpId,
        deadline: Instant,
        lease: LeaseId,
    },
    Rejoin {
        next_at: Instant,
        lease: LeaseId,
    },
    Queued {
        lease: LeaseId,
        token: Revision,
        mirror: Box<Mirror>,
    },
    Leading {
        lease: LeaseId,
        token: Revision,
        mirror: Box<Mirror>,
    },
    Leaving {
        leave: Leave,
        step: LeaveStep,
    },
    Done,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Asked {
    /// The user's proclaim of this value.
    Proclaim(Vec<u8>),
    /// The user's guarded transaction.
    Txn,
    /// Joining found the key holding another value: make it ours.
    Refresh,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Request {
    id: u64,
    deadline: Instant,
    asked: Asked,
}

/// One campaign. See the module docs.
#[derive(Debug)]
pub(crate) struct Campaign {
    name: Key,
    value: Vec<u8>,
    mode: Mode,
    config: CampaignConfig,
    state: State,
    backoff: Backoff,
    requests: BTreeMap<OpId, Request>,
    out: VecDeque<Output<Command, ElectionEvent>>,
}

impl Campaign {
    pub(crate) fn new(name: Key, value: Vec<u8>, mode: Mode, config: CampaignConfig) -> Self {
        let backoff = Backoff::new(config.backoff.clone(), config.seed);
        Campaign {
            name,
            value,
            mode,
            config,
            state: State::Pending,
            backoff,
            requests: BTreeMap::new(),
            out: VecDeque::new(),
        }
    }

    /// The name (ending with `/`).
    pub(crate) fn name(&self) -> &Key {
        &self.name
    }

    /// Where the campaign is.
    pub(crate) fn standing(&self) -> Standing {
        match &self.state {
            State::Pending => Standing::Pending,
            State::Joining { .. } | State::Rejoin { .. } => Standing::Joining,
            State::Queued { token, .. } => Standing::Queued {
                token: FencingToken(token.0),
            },
            State::Leading { lease, token, .. } => Standing::Leading {
                key: candidate_key(&self.name, *lease),
                token: FencingToken(token.0),
            },
            State::Leaving { .. } => Standing::Leaving,
            State::Done => Standing::Done,
        }
    }

    /// True once nothing is left to do or answer: the session forgets it.
    pub(crate) fn is_finished(&self) -> bool {
        matches!(self.state, State::Done) && self.requests.is_empty()
    }

    /// True while the campaign waits for a lease to join with.
    pub(crate) fn is_pending(&self) -> bool {
        matches!(self.state, State::Pending)
    }

    /// Feeds one input at `now`; `ids` numbers the ops it issues (the
    /// session's, so that their answers are routed back here).
    pub(crate) fn handle(&mut self, now: Instant, input: CampaignInput, ids: &mut OpIds) {
        match input {
            CampaignInput::LeaseReady(lease) => {
                if matches!(self.state, State::Pending) {
                    self.join(now, lease, ids);
                }
            }
            CampaignInput::LeaseLost(reason) => self.end(Loss::LeaseLost(reason)),
            CampaignInput::SessionClosing => self.end(Loss::SessionClosed),
            CampaignInput::Leave => self.leave(now, ids),
            CampaignInput::Ask { request, asked } => self.ask(now, request, asked, ids),
            CampaignInput::Timeout => self.timeout(now, ids),
            CampaignInput::Returned { probe_sent } => self.cut(now, probe_sent, ids),
            CampaignInput::Io(c) => self.io(now, c, ids),
        }
    }

    /// The next command or event, in order (the `poll` of every machine's
    /// shape). Drain after every call that feeds the campaign.
    #[must_use]
    pub(crate) fn poll(&mut self) -> Option<Output<Command, ElectionEvent>> {
        self.out.pop_front()
    }

    /// Requests and streams the queue's mirror found unanswered so far.
    pub(crate) fn silences(&self) -> u64 {
        match &self.state {
            State::Queued { mirror, .. } | State::Leading { mirror, .. } => mirror.silences(),
            _ => 0,
        }
    }

    /// True while waiting on etcd: joining or leaving (or waiting to
    /// retry either), a request in flight, or the queue's mirror waiting.
    pub(crate) fn awaits_etcd(&self) -> bool {
        match &self.state {
            State::Joining { .. } | State::Rejoin { .. } | State::Leaving { .. } => true,
            State::Queued { mirror, .. } | State::Leading { mirror, .. } => {
                mirror.awaits_etcd() || !self.requests.is_empty()
            }
            State::Pending | State::Done => false,
        }
    }

    /// etcd answers again: cuts a backoff wait short. Nothing under
    /// [`Pacing::Plain`](crate::Pacing::Plain).
    fn cut(&mut self, now: Instant, probe_sent: Instant, ids: &mut OpIds) {
        if !self.backoff.heeds_returns() {
            return;
        }
        // Requests sent in the silence are given up now, as their deadline
        // would (a join or leave then waits to be retried, cut below).
        let timeout = self.config.request_timeout;
        let lost = |deadline: Instant| crate::probe::sent_before(deadline, timeout, probe_sent);
        for r in self.requests.values_mut() {
            if lost(r.deadline) {
                r.deadline = now;
            }
        }
        match &mut self.state {
            State::Joining { deadline, .. }
            | State::Leaving {
                step: LeaveStep::InFlight { deadline, .. },
                ..
            } if lost(*deadline) => *deadline = now,
            _ => {}
        }
        self.timeout(now, ids);
        match &mut self.state {
            State::Rejoin { next_at, .. } => *next_at = self.backoff.cut(now, *next_at),
            State::Leaving {
                step: LeaveStep::RetryAt(at),
                ..
            } => *at = self.backoff.cut(now, *at),
            State::Queued { .. } | State::Leading { .. } => {
                self.feed_mirror(now, |m| m.cut(now, probe_sent, ids));
            }
            _ => {}
        }
    }

    /// The next deadline.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let state = match &self.state {
            State::Pending | State::Done => None,
            State::Joining { deadline, .. } => Some(*deadline),
            State::Rejoin { next_at, .. } => Some(*next_at),
            State::Queued { mirror, .. } | State::Leading { mirror, .. } => mirror.poll_timeout(),
            State::Leaving { step, .. } => Some(match step {
                LeaveStep::AwaitJoin { deadline, .. } | LeaveStep::InFlight { deadline, .. } => {
                    *deadline
                }
                LeaveStep::RetryAt(at) => *at,
            }),
        };
        let requests = self.requests.values().map(|r| r.deadline).min();
        match (state, requests) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn cmd(&mut self, c: Command) {
        self.out.push_back(Output::Command(c));
    }

    fn event(&mut self, e: ElectionEvent) {
        self.out.push_back(Output::Event(e));
    }

    fn end(&mut self, loss: Loss) {
        match std::mem::replace(&mut self.state, State::Done) {
            // A waiting campaign not queued yet (a key its join may have
            // made is on the lost lease, which the session revokes) waits
            // for the next lease. A try is one round trip: it fails.
            State::Pending if !matches!(loss, Loss::SessionClosed) => self.state = State::Pending,
            State::Rejoin { .. } if self.waits_on(&loss) => self.state = State::Pending,
            State::Joining { op, .. } if self.waits_on(&loss) => {
                self.cmd(Command::Abandon { op });
                self.state = State::Pending;
            }
            State::Pending | State::Rejoin { .. } => {
                self.event(ElectionEvent::Lost { reason: loss })
            }
            State::Joining { op, .. } => {
                self.cmd(Command::Abandon { op });
                self.event(ElectionEvent::Lost { reason: loss });
            }
            State::Queued { mirror, .. } | State::Leading { mirror, .. } => {
                self.close_mirror(mirror);
                self.event(ElectionEvent::Lost { reason: loss });
            }
            State::Leaving { leave, step } => {
                // The lease's revoke (or expiry) deletes the key.
                if let LeaveStep::InFlight { op, .. } | LeaveStep::AwaitJoin { op, .. } = step {
                    self.cmd(Command::Abandon { op });
                }
                self.left(leave.tell);
            }
            State::Done => {}
        }
    }

    /// True if a campaign not queued yet outlives `loss` (waiting for the
    /// next lease): a waiting one, when the lease (not the session) ended.
    fn waits_on(&self, loss: &Loss) -> bool {
        self.mode == Mode::Wait && !matches!(loss, Loss::SessionClosed)
    }

    fn close_mirror(&mut self, mut mirror: Box<Mirror>) {
        mirror.close();
        self.forward(&mut mirror);
    }

    /// Passes the mirror's commands on; returns its changes.
    fn forward(&mut self, mirror: &mut Mirror) -> Vec<Change> {
        let mut changes = Vec::new();
        while let Some(o) = mirror.poll() {
            match o {
                Output::Command(c) => self.cmd(c),
                Output::Event(change) => changes.push(change),
            }
        }
        changes
    }

    fn join(&mut self, now: Instant, lease: LeaseId, ids: &mut OpIds) {
        let key = candidate_key(&self.name, lease);
        let queue = TxnOp::Get(Get::prefix(self.name.clone()));
        let compare = match self.mode {
            Mode::Wait => Compare::create_revision(key.clone(), CompareOp::Equal, Revision(0)),
            Mode::Try => Compare {
                key: self.name.clone(),
                prefix: true,
                op: CompareOp::Equal,
                target: CompareTarget::CreateRevision(Revision(0)),
            },
        };
        let txn = Txn {
            compares: vec![compare],
            success: vec![
                TxnOp::Put {
                    key,
                    value: self.value.clone(),
                    lease,
                },
                queue.clone(),
            ],
            failure: vec![queue],
        };
        let op = ids.next();
        self.cmd(Command::Txn { op, txn });
        self.state = State::Joining {
            op,
            deadline: now + self.config.request_timeout,
            lease,
        };
    }

    fn retry_join(&mut self, now: Instant, lease: LeaseId, failure: AttemptFailure) {
        let next_at = now + self.backoff.next_delay(failure.class());
        self.event(ElectionEvent::Retrying(Retry {
            attempt: self.backoff.attempt(),
            next_at,
            failure: Some(failure),
        }));
        self.state = State::Rejoin { next_at, lease };
    }

    /// The deadline from `poll_timeout` may have passed.
    fn timeout(&mut self, now: Instant, ids: &mut OpIds) {
        let late: Vec<OpId> = self
            .requests
            .iter()
            .filter(|(_, r)| now >= r.deadline)
            .map(|(op, _)| *op)
            .collect();
        for op in late {
            self.cmd(Command::Abandon { op });
            self.answered(now, op, Outcome::Unknown);
        }
        match std::mem::replace(&mut self.state, State::Done) {
            State::Joining {
                op,
                deadline,
                lease,
            } if now >= deadline => {
                self.cmd(Command::Abandon { op });
                self.retry_join(now, lease, AttemptFailure::Timeout);
            }
            State::Rejoin { next_at, lease } if now >= next_at => self.join(now, lease, ids),
            queued @ (State::Queued { .. } | State::Leading { .. }) => {
                self.state = queued;
                self.feed_mirror(now, |m| m.timeout(now, ids));
            }
            State::Leaving {
                leave,
                step: LeaveStep::InFlight { op, deadline },
            } if now >= deadline => {
                self.cmd(Command::Abandon { op });
                self.leave_failed(now, leave, AttemptFailure::Timeout);
            }
            State::Leaving {
                leave,
                step: LeaveStep::AwaitJoin { op, deadline },
            } if now >= deadline => {
                // The join's outcome stays unknown: delete whatever is there.
                self.cmd(Command::Abandon { op });
                self.begin_leave(now, leave, ids);
            }
            State::Leaving {
                leave,
                step: LeaveStep::RetryAt(at),
            } if now >= at => self.begin_leave(now, leave, ids),
            other => self.state = other,
        }
    }

    /// A completion routed to this campaign.
    fn io(&mut self, now: Instant, c: Completion, ids: &mut OpIds) {
        if let Completion::Txn { op, outcome } = c {
            if self.requests.contains_key(&op) {
                return self.answered(now, op, outcome);
            }
            return self.on_txn(now, op, outcome, ids);
        }
        // Anything that is not the mirror's is stale.
        self.feed_mirror(now, |m| {
            let _ = m.io(now, c, ids);
        });
    }

    fn on_txn(&mut self, now: Instant, op: OpId, outcome: Outcome<TxnResponse>, ids: &mut OpIds) {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Joining {
                op: want, lease, ..
            } if want == op => match outcome {
                Outcome::Ok(resp) => self.joined(now, lease, resp, ids),
                // The lease is gone: the session will learn it and hand a
                // new one; the campaign waits for it.
                Outcome::Err(crate::Failure::LeaseNotFound) => self.state = State::Pending,
                failed => {
                    let why = AttemptFailure::of(&failed).unwrap_or(AttemptFailure::Timeout);
                    self.retry_join(now, lease, why);
                }
            },
            State::Leaving {
                leave,
                step: LeaveStep::AwaitJoin { op: want, .. },
            } if want == op => match outcome {
                Outcome::Ok(resp) => {
                    let index = usize::from(resp.succeeded);
                    let mine = resp
                        .kvs(index)
                        .and_then(|kvs| kvs.iter().find(|kv| kv.key == leave.key))
                        .map(|kv| kv.create_revision);
                    match mine {
                        Some(token) => {
                            let leave = Leave {
                                token: Some(token),
                                ..leave
                            };
                            self.begin_leave(now, leave, ids);
                        }
                        // Nothing was created (a try that lost).
                        None => self.left(leave.tell),
                    }
                }
                // Definitely not applied: nothing to delete.
                Outcome::Err(_) => self.left(leave.tell),
                Outcome::Unknown => self.begin_leave(now, leave, ids),
            },
            State::Leaving {
                leave,
                step: LeaveStep::InFlight { op: want, .. },
            } if want == op => match outcome {
                Outcome::Ok(_) => {
                    self.backoff.reset();
                    self.left(leave.tell);
                }
                failed => {
                    let why = AttemptFailure::of(&failed).unwrap_or(AttemptFailure::Timeout);
                    self.leave_failed(now, leave, why);
                }
            },
            other => self.state = other,
        }
    }

    /// The join transaction answered: place the campaign in the queue.
    fn joined(&mut self, now: Instant, lease: LeaseId, resp: TxnResponse, ids: &mut OpIds) {
        self.backoff.reset();
        let index = usize::from(resp.succeeded);
        let kvs = resp
            .kvs(index)
            .map(<[KeyValue]>::to_vec)
            .unwrap_or_default();
        let key = candidate_key(&self.name, lease);
        let lowest = kvs.iter().min_by_key(|kv| kv.create_revision).cloned();
        let mine = kvs.iter().find(|kv| kv.key == key).cloned();
        let mine = match (self.mode, mine) {
            (Mode::Try, Some(kv)) if lowest.as_ref() != Some(&kv) => {
                // Ours, from an earlier attempt, but not first: leave it,
                // without a second word to the user.
                self.event(ElectionEvent::NotElected { leader: lowest });
                let leave = Leave {
                    key,
                    token: Some(kv.create_revision),
                    tell: Tell::Nothing,
                };
                self.begin_leave(now, leave, ids);
                return;
            }
            (Mode::Try, None) => {
                self.event(ElectionEvent::NotElected { leader: lowest });
                self.state = State::Done;
                return;
            }
            (_, Some(kv)) => kv,
            (Mode::Wait, None) => {
                // The transaction created or found the key, yet the read in
                // it does not show it: never from etcd. Join again.
                let why = AttemptFailure::Etcd(crate::Failure::Other(
                    "the queue read did not show the candidate's key".into(),
                ));
                self.retry_join(now, lease, why);
                return;
            }
        };
        let token = mine.create_revision;
        let mut mirror = match Mirror::new(self.mirror_config()) {
            Ok(m) => Box::new(m),
            Err(e) => {
                // The session validated these parameters: never.
                let why = AttemptFailure::Etcd(crate::Failure::Other(e.to_string()));
                self.retry_join(now, lease, why);
                return;
            }
        };
        let listing = Listing {
            count: u64::try_from(kvs.len()).unwrap_or(u64::MAX),
            kvs,
            revision: resp.revision,
            more: false,
            cluster: resp.cluster,
        };
        let started = mirror.start_from(now, listing, ids);
        debug_assert_eq!(started, Ok(()), "a new mirror is idle");
        if mine.value != self.value {
            // An earlier campaign of this session left another value.
            let txn = self.guarded_put(lease, token, self.value.clone());
            self.send_request(now, 0, Asked::Refresh, txn, ids);
        }
        self.after_mirror(now, lease, token, mirror, false);
    }

    /// Lets a queued or leading campaign's mirror take an input, then
    /// looks at what it saw.
    fn feed_mirror(&mut self, now: Instant, feed: impl FnOnce(&mut Mirror)) {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Queued {
                lease,
                token,
                mut mirror,
            } => {
                feed(&mut mirror);
                self.after_mirror(now, lease, token, mirror, false);
            }
            State::Leading {
                lease,
                token,
                mut mirror,
            } => {
                feed(&mut mirror);
                self.after_mirror(now, lease, token, mirror, true);
            }
            other => self.state = other,
        }
    }

    fn mirror_config(&self) -> MirrorConfig {
        MirrorConfig {
            request_timeout: self.config.request_timeout,
            probe_interval: self.config.probe_interval,
            backoff: self.config.backoff.clone(),
            ..MirrorConfig::new(self.name.clone(), self.config.seed)
        }
    }

    /// Looks at what the mirror saw: a lost key ends the campaign; no
    /// predecessor left elects it.
    fn after_mirror(
        &mut self,
        _now: Instant,
        lease: LeaseId,
        token: Revision,
        mut mirror: Box<Mirror>,
        leading: bool,
    ) {
        let key = candidate_key(&self.name, lease);
        let mut lost = false;
        for change in self.forward(&mut mirror) {
            match change {
                Change::Deleted { key: k, .. } if k == key => lost = true,
                Change::Put { kv, .. } if kv.key == key && kv.create_revision != token => {
                    lost = true
                }
                Change::Retrying(retry) => self.event(ElectionEvent::Retrying(retry)),
                _ => {}
            }
        }
        if lost || mirror.is_closed() {
            self.close_mirror(mirror);
            self.event(ElectionEvent::Lost {
                reason: Loss::KeyDeleted,
            });
            self.state = State::Done;
            return;
        }
        // Leadership is sticky: once every older key was seen deleted, only
        // the loss of our own key ends it. A key older than ours cannot
        // appear later from etcd (create revisions only grow); if one shows
        // up anyway (a broken proxy, a hand-written event), demoting the
        // leader without telling it would leave the caller believing it
        // leads, so such a key is ignored while leading.
        let older = mirror.view().values().any(|kv| kv.create_revision < token);
        let first = leading || !older;
        if first && !leading {
            self.event(ElectionEvent::Elected {
                key,
                lease,
                token: FencingToken(token.0),
            });
        }
        self.state = if first {
            State::Leading {
                lease,
                token,
                mirror,
            }
        } else {
            State::Queued {
                lease,
                token,
                mirror,
            }
        };
    }
}
