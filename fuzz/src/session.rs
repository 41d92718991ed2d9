//! Fuzzing `Session` with its elections: campaigns, tries, leaves,
//! proclaims and guarded transactions, against arbitrary but well-typed
//! answers to the ops the session really issued.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use arbitrary::Arbitrary;
use coord_core::election::{candidate_key, ElectionEvent, ElectionId, Mode, Standing};
use coord_core::io::{
    Command, Completion, Granted, Listing, MessageKind, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use coord_core::kv::{KeyValue, WatchEvent};
use coord_core::lease::Event as LeaseEvent;
use coord_core::session::{Event, Input, Output, Session, SessionConfig};
use coord_core::{Instant, Key, LeaseId, OpId, Outcome, Revision, StartPolicy};

use crate::liveness::FuzzFailure;

/// Names campaigned for: a few, so campaigns collide.
fn name(n: u8) -> Key {
    Key(format!("/e{}/", n % 3).into_bytes())
}

/// A queue entry: another candidate, or the campaign's own key.
#[derive(Debug, Arbitrary)]
enum FuzzEntry {
    Other { lease: u8, create: u8 },
    Own { create: u8 },
}

#[derive(Debug, Arbitrary)]
enum FuzzAnswer {
    Ok {
        succeeded: bool,
        queue: [Option<FuzzEntry>; 3],
    },
    Err(FuzzFailure),
    Unknown,
}

#[derive(Debug, Arbitrary)]
enum FuzzEvent {
    Put { entry: FuzzEntry },
    Delete { entry: FuzzEntry },
}

#[derive(Debug, Arbitrary)]
enum Step {
    Start,
    Close,
    Advance(u16),
    Campaign {
        name: u8,
        try_once: bool,
    },
    Leave {
        which: u8,
    },
    Proclaim {
        which: u8,
    },
    GuardedTxn {
        which: u8,
    },
    /// Answers the `which`-th op issued, as the kind of request it was.
    Answer {
        which: u8,
        answer: FuzzAnswer,
    },
    /// Grants the `which`-th op (if it is a grant).
    Grant {
        which: u8,
        lease: u8,
        ttl: u8,
    },
    KeepAlive {
        which: u8,
        ttl: i8,
    },
    StreamClosed {
        which: u8,
        failure: FuzzFailure,
    },
    /// Events on the `which`-th op's watch.
    Watch {
        which: u8,
        events: [Option<FuzzEvent>; 2],
        kind: MessageKind,
    },
}

#[derive(Debug, Arbitrary)]
struct Plan {
    ttl_secs: u8,
    start: StartPolicy,
    seed: u64,
}

/// What an op was issued for.
#[derive(Debug, Clone)]
enum Op {
    Grant,
    Revoke,
    KeepAlive,
    Range(Key),
    /// A transaction; for a join, the key it writes and its queue.
    Txn {
        join: Option<(Key, Key, LeaseId)>,
    },
    Watch(Key),
}

/// Runs one fuzz case; panics on a broken invariant.
pub fn run(data: &[u8]) -> crate::Reach {
    let Some((plan, steps)) = crate::decode::<Plan, Step>(data) else {
        return crate::Reach::default();
    };
    let mut config = SessionConfig::new(plan.seed);
    config.lease.ttl = Duration::from_secs(u64::from(plan.ttl_secs.clamp(1, 20)));
    config.lease.refresh = config.lease.ttl / 3;
    config.lease.request_timeout = Duration::from_millis(500);
    config.probe_interval = Duration::from_secs(2);
    config.lease.start = plan.start;
    config.lease.backoff.pacing = crate::pacing(plan.seed);
    let Ok(mut m) = Session::new(config) else {
        return crate::Reach::default();
    };
    let mut h = Harness::default();
    let n = steps.len();
    for step in steps {
        h.step(&mut m, step);
    }
    crate::Reach {
        steps: n,
        milestones: h.milestones,
    }
}

#[derive(Default)]
struct Harness {
    now: u64,
    ops: Vec<(OpId, Op)>,
    seen_ops: BTreeSet<OpId>,
    granted: BTreeSet<LeaseId>,
    next_id: u64,
    next_request: u64,
    /// Each campaign's name, and what it has been told.
    campaigns: BTreeMap<ElectionId, Key>,
    elected: BTreeSet<ElectionId>,
    ended: BTreeSet<ElectionId>,
    /// Asked to leave (its standing may leave `Leading` before `Left`).
    leaving: BTreeSet<ElectionId>,
    asked: BTreeMap<u64, ElectionId>,
    revision: i64,
    started: bool,
    /// The lease engine said `Closed`.
    lease_closed: bool,
    /// The session is closed (lease closed and every campaign forgotten).
    closed: bool,
    milestones: usize,
}

impl Harness {
    fn op(&self, which: u8) -> Option<(OpId, Op)> {
        if self.ops.is_empty() {
            return None;
        }
        Some(self.ops[usize::from(which) % self.ops.len()].clone())
    }

    fn election(&self, which: u8) -> ElectionId {
        let ids: Vec<ElectionId> = self.campaigns.keys().copied().collect();
        if ids.is_empty() {
            return ElectionId(u64::from(which) + 1000);
        }
        ids[usize::from(which) % ids.len()]
    }

    fn revision(&mut self) -> Revision {
        self.revision += 1;
        Revision(self.revision)
    }

    fn kv(&mut self, queue: &Key, own: Option<(&Key, LeaseId)>, e: &FuzzEntry) -> KeyValue {
        let (key, lease, create) = match (e, own) {
            (FuzzEntry::Own { create }, Some((key, lease))) => (key.clone(), lease, *create),
            (FuzzEntry::Own { create }, None) | (FuzzEntry::Other { create, .. }, _) => {
                let lease = match e {
                    FuzzEntry::Other { lease, .. } => LeaseId(i64::from(*lease) + 1),
                    FuzzEntry::Own { .. } => LeaseId(1),
                };
                (candidate_key(queue, lease), lease, *create)
            }
        };
        let create = Revision(i64::from(create) + 1);
        KeyValue {
            key,
            value: b"v".to_vec(),
            create_revision: create,
            mod_revision: create,
            lease,
        }
    }

    fn step(&mut self, m: &mut Session, step: Step) {
        let now = Instant::from_millis(self.now);
        let input = match step {
            Step::Start => Input::Start,
            Step::Close => Input::Close,
            Step::Advance(ms) => {
                self.now += u64::from(ms);
                let now = Instant::from_millis(self.now);
                if m.poll_timeout().is_some_and(|d| d <= now) {
                    assert_eq!(m.handle(now, Input::Timeout), Ok(()));
                    self.drain(m);
                } else {
                    crate::early_timeout_changes_nothing(m, now);
                }
                // Some advances end with the prober finding etcd back or
                // silent.
                if let Some(news) = crate::probe_news::<Session>(ms, now) {
                    assert_eq!(m.handle(now, news), Ok(()));
                    self.drain(m);
                }
                return;
            }
            Step::Campaign { name: n, try_once } => {
                self.next_id += 1;
                let id = ElectionId(self.next_id);
                let input = Input::Campaign {
                    id,
                    name: name(n),
                    value: b"me".to_vec(),
                    mode: if try_once { Mode::Try } else { Mode::Wait },
                };
                // Only a live campaign on the name refuses a new one; one
                // still leaving makes it wait.
                let busy = self.campaigns.iter().any(|(id, k)| {
                    *k == name(n) && !self.ended.contains(id) && !self.leaving.contains(id)
                });
                let r = m.handle(now, input);
                // Refused exactly when closed or the name is busy.
                if r.is_ok() {
                    assert!(!busy && !self.closed, "{r:?}");
                    self.campaigns.insert(id, name(n));
                }
                self.drain(m);
                return;
            }
            Step::Leave { which } => {
                let id = self.election(which);
                self.leaving.insert(id);
                Input::Leave { id }
            }
            Step::Proclaim { which } | Step::GuardedTxn { which } => {
                self.next_request += 1;
                let (id, request) = (self.election(which), self.next_request);
                let input = match step {
                    Step::Proclaim { .. } => Input::Proclaim {
                        id,
                        request,
                        value: b"v2".to_vec(),
                    },
                    _ => Input::Txn {
                        id,
                        request,
                        txn: Txn::default(),
                    },
                };
                // Asked of a campaign the session knows: answered later.
                if m.handle(now, input).is_ok() {
                    self.asked.insert(request, id);
                }
                self.drain(m);
                return;
            }
            Step::Answer { which, answer } => {
                let Some((op, kind)) = self.op(which) else {
                    return;
                };
                Input::Io(self.answer(op, &kind, answer))
            }
            Step::Grant { which, lease, ttl } => {
                let Some((op, Op::Grant)) = self.op(which) else {
                    return;
                };
                let lease = LeaseId(i64::from(lease) + 1);
                self.granted.insert(lease);
                Input::Io(Completion::Granted {
                    op,
                    outcome: Outcome::Ok(Granted {
                        lease,
                        ttl_secs: i64::from(ttl),
                    }),
                })
            }
            Step::KeepAlive { which, ttl } => {
                let Some((op, _)) = self.op(which) else {
                    return;
                };
                Input::Io(Completion::KeepAliveReply {
                    stream: op,
                    ttl_secs: i64::from(ttl),
                })
            }
            Step::StreamClosed { which, failure } => {
                let Some((op, kind)) = self.op(which) else {
                    return;
                };
                let failure = failure.failure();
                Input::Io(match kind {
                    Op::KeepAlive => Completion::KeepAliveClosed {
                        stream: op,
                        failure,
                    },
                    _ => Completion::WatchClosed {
                        stream: op,
                        failure,
                    },
                })
            }
            Step::Watch {
                which,
                events,
                kind,
            } => {
                let Some((op, Op::Watch(queue))) = self.op(which) else {
                    return;
                };
                let mut evs = Vec::new();
                for e in events.iter().flatten() {
                    let revision = self.revision();
                    evs.push(match e {
                        FuzzEvent::Put { entry } => {
                            let mut kv = self.kv(&queue, None, entry);
                            kv.mod_revision = revision;
                            WatchEvent::Put { kv, prev: None }
                        }
                        FuzzEvent::Delete { entry } => {
                            let kv = self.kv(&queue, None, entry);
                            WatchEvent::Delete {
                                key: kv.key.clone(),
                                revision,
                                prev: Some(kv),
                            }
                        }
                    });
                }
                let revision = Revision(self.revision);
                Input::Io(Completion::WatchMessage {
                    cluster: coord_core::ClusterId::default(),
                    stream: op,
                    kind,
                    events: evs,
                    revision,
                })
            }
        };
        let is_start = input == Input::Start;
        let result = m.handle(now, input);
        if is_start {
            assert_eq!(result.is_ok(), !self.started && !self.closed, "{result:?}");
            self.started = true;
        }
        self.drain(m);
    }

    fn answer(&mut self, op: OpId, kind: &Op, answer: FuzzAnswer) -> Completion {
        let (succeeded, queue) = match answer {
            FuzzAnswer::Ok { succeeded, queue } => (succeeded, queue),
            FuzzAnswer::Err(f) => return failed(op, kind, Outcome::Err(f.failure())),
            FuzzAnswer::Unknown => return failed(op, kind, Outcome::Unknown),
        };
        let revision = self.revision();
        match kind {
            Op::Txn {
                join: Some((key, prefix, lease)),
            } => {
                let kvs: Vec<KeyValue> = queue
                    .iter()
                    .flatten()
                    .map(|e| self.kv(prefix, Some((key, *lease)), e))
                    .collect();
                let mut responses = Vec::new();
                if succeeded {
                    responses.push(TxnOpResponse::Put);
                }
                responses.push(TxnOpResponse::Get(kvs));
                Completion::Txn {
                    op,
                    outcome: Outcome::Ok(TxnResponse {
                        cluster: coord_core::ClusterId::default(),
                        succeeded,
                        revision,
                        responses,
                    }),
                }
            }
            Op::Txn { join: None } => Completion::Txn {
                op,
                outcome: Outcome::Ok(TxnResponse {
                    cluster: coord_core::ClusterId::default(),
                    succeeded,
                    revision,
                    responses: if succeeded {
                        vec![TxnOpResponse::Txn(TxnResponse {
                            cluster: coord_core::ClusterId::default(),
                            succeeded: true,
                            revision,
                            responses: vec![],
                        })]
                    } else {
                        vec![]
                    },
                }),
            },
            Op::Range(prefix) => {
                let prefix = prefix.clone();
                let kvs: Vec<_> = queue
                    .iter()
                    .flatten()
                    .map(|e| self.kv(&prefix, None, e))
                    .collect();
                Completion::Listed {
                    op,
                    outcome: Outcome::Ok(Listing {
                        cluster: coord_core::ClusterId::default(),
                        more: false,
                        count: u64::try_from(kvs.len()).unwrap_or(0),
                        kvs,
                        revision,
                    }),
                }
            }
            Op::Revoke => Completion::Revoked {
                op,
                outcome: Outcome::Ok(()),
            },
            Op::Grant | Op::KeepAlive | Op::Watch(_) => Completion::Revoked {
                op,
                outcome: Outcome::Ok(()),
            },
        }
    }

    fn drain(&mut self, m: &mut Session) {
        while let Some(out) = m.poll() {
            match out {
                Output::Command(c) => self.command(c),
                Output::Event(e) => self.event(e),
            }
        }
        // A campaign over is forgotten once it owes nothing, judged after
        // the whole drain: one input can end a campaign (through its
        // session) after the campaign queued events of its own, which come
        // out behind the session's.
        let over: Vec<ElectionId> = self
            .campaigns
            .keys()
            .copied()
            .filter(|id| self.ended.contains(id) && m.standing(*id) == Standing::Done)
            .collect();
        for id in over {
            if !self.asked.values().any(|a| *a == id) {
                self.campaigns.remove(&id);
            }
        }
        if self.lease_closed && m.elections() == 0 {
            self.closed = true;
        }
        // The machine's own invariants.
        assert_eq!(m.is_closed(), self.closed, "closed iff told so");
        if self.started && !self.closed {
            assert!(
                m.poll_timeout().is_some(),
                "a live session always has a deadline"
            );
        }
        if self.closed {
            assert_eq!(m.poll_timeout(), None);
        }
        for id in self.campaigns.keys() {
            let leading = matches!(m.standing(*id), Standing::Leading { .. });
            let believed = self.elected.contains(id) && !self.ended.contains(id);
            if leading || !self.leaving.contains(id) {
                assert_eq!(leading, believed, "standing of {id:?} vs its events");
            }
        }
        match (m.lease(), m.expires_at()) {
            (Some(l), Some(_)) => assert!(self.granted.contains(&l), "{l} never granted"),
            (None, None) => {}
            other => panic!("lease and deadline disagree: {other:?}"),
        }
    }

    fn command(&mut self, c: Command) {
        if c.starts_op() {
            assert!(
                self.seen_ops.insert(c.op()),
                "op ids must be fresh: {:?}",
                c.op()
            );
        }
        let kind = match &c {
            Command::Grant { .. } => Op::Grant,
            Command::Revoke { .. } => Op::Revoke,
            Command::OpenKeepAlive { .. } => Op::KeepAlive,
            Command::Range { request, .. } => Op::Range(request.get.key.clone()),
            Command::Watch { key, .. } => Op::Watch(key.clone()),
            Command::Txn { txn, .. } => Op::Txn { join: join_of(txn) },
            _ => return,
        };
        self.ops.push((c.op(), kind));
    }

    fn event(&mut self, e: Event) {
        assert!(!self.closed, "nothing after Closed: {e:?}");
        match e {
            Event::Lease(LeaseEvent::Closed { .. }) => {
                self.lease_closed = true;
                self.milestones += 1;
            }
            Event::Lease(
                LeaseEvent::Registered { lease, .. } | LeaseEvent::Reregistered { lease, .. },
            ) => {
                assert!(self.granted.contains(&lease), "{lease} never granted");
                self.milestones += 1;
            }
            Event::Lease(_) => {}
            Event::Election { id, event } => {
                assert!(self.campaigns.contains_key(&id), "event for unknown {id:?}");
                match event {
                    ElectionEvent::Elected { key, lease, token } => {
                        assert!(self.elected.insert(id), "elected twice");
                        assert!(!self.ended.contains(&id), "elected after the end");
                        assert!(self.granted.contains(&lease), "{lease} never granted");
                        assert_eq!(key, candidate_key(&self.campaigns[&id], lease));
                        assert!(token.0 > 0);
                        self.milestones += 1;
                    }
                    ElectionEvent::NotElected { .. }
                    | ElectionEvent::Lost { .. }
                    | ElectionEvent::Left => {
                        assert!(self.ended.insert(id), "ended twice: {id:?}");
                        self.milestones += 1;
                    }
                    ElectionEvent::Answered { request, .. } => {
                        assert_eq!(self.asked.remove(&request), Some(id), "unasked answer");
                    }
                    ElectionEvent::Retrying(r) => assert!(r.attempt > 0),
                }
            }
        }
    }
}

/// For a join transaction: the key it writes, the queue, and the lease.
fn join_of(txn: &Txn) -> Option<(Key, Key, LeaseId)> {
    let (TxnOp::Put { key, lease, .. }, Some(TxnOp::Get(get))) =
        (txn.success.first()?, txn.success.get(1))
    else {
        return None;
    };
    Some((key.clone(), get.key.clone(), *lease))
}

fn failed(op: OpId, kind: &Op, outcome: Outcome<()>) -> Completion {
    match kind {
        Op::Grant => Completion::Granted {
            op,
            outcome: outcome.map(|()| Granted {
                lease: LeaseId(1),
                ttl_secs: 1,
            }),
        },
        Op::Range(_) => Completion::Listed {
            op,
            outcome: outcome.map(|()| Listing {
                cluster: coord_core::ClusterId::default(),
                more: false,
                count: 0,
                kvs: Vec::new(),
                revision: Revision(1),
            }),
        },
        Op::Txn { .. } => Completion::Txn {
            op,
            outcome: outcome.map(|()| TxnResponse {
                cluster: coord_core::ClusterId::default(),
                succeeded: false,
                revision: Revision(1),
                responses: Vec::new(),
            }),
        },
        Op::Revoke | Op::KeepAlive | Op::Watch(_) => Completion::Revoked { op, outcome },
    }
}
