//! Fuzzing `Liveness`.

use std::collections::BTreeSet;
use std::time::Duration;

use arbitrary::Arbitrary;
use coord_core::io::{Command, Completion, Granted, TxnResponse};
use coord_core::liveness::{
    Event, Input, Liveness, LivenessConfig, LivenessState, OnLoss, Output, StartPolicy,
};
use coord_core::{Failure, Instant, Key, LeaseId, OpId, Outcome, Revision};

/// A failure, without free text (so every step decodes from a few bytes).
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum FuzzFailure {
    /// `Unavailable`.
    Unavailable,
    /// `LeaseNotFound`.
    LeaseNotFound,
    /// `Compacted`.
    Compacted(u8),
    /// `StreamClosed`.
    StreamClosed,
    /// `Overloaded`.
    Overloaded,
    /// `Other`.
    Other,
}

impl FuzzFailure {
    /// The core failure.
    pub fn failure(self) -> Failure {
        match self {
            FuzzFailure::Unavailable => Failure::Unavailable("fuzz".into()),
            FuzzFailure::LeaseNotFound => Failure::LeaseNotFound,
            FuzzFailure::Compacted(r) => Failure::Compacted(i64::from(r)),
            FuzzFailure::StreamClosed => Failure::StreamClosed("fuzz".into()),
            FuzzFailure::Overloaded => Failure::Overloaded("fuzz".into()),
            FuzzFailure::Other => Failure::Other("fuzz".into()),
        }
    }
}

#[derive(Debug, Arbitrary)]
enum FuzzOutcome {
    Granted { lease: u8, ttl_secs: i8 },
    Done,
    Err(FuzzFailure),
    Unknown,
}

/// One step of the fuzzed run.
#[derive(Debug, Arbitrary)]
enum Step {
    Start,
    Stop,
    /// Time passes, then the timeout fires if due.
    Advance(u16),
    /// Completes the `which`-th op the machine issued.
    Complete {
        which: u8,
        outcome: FuzzOutcome,
    },
    /// A reply on the `which`-th op's stream.
    Reply {
        which: u8,
        ttl_secs: i8,
    },
    /// The `which`-th op's stream closes.
    Closed {
        which: u8,
        failure: FuzzFailure,
    },
    /// A completion for an op the machine never issued.
    Ghost {
        op: u16,
        outcome: FuzzOutcome,
    },
    /// A completion of the wrong kind for the `which`-th op (a driver
    /// bug): it must be ignored.
    WrongKind {
        which: u8,
        outcome: FuzzOutcome,
    },
}

/// What kind of request an op was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Grant,
    Txn,
    Revoke,
    Stream,
    /// A census read.
    Count,
}

impl FuzzOutcome {
    /// The outcome as a grant's (a `Done` grants lease 0 with TTL 1).
    fn granted(&self) -> Outcome<Granted> {
        match *self {
            FuzzOutcome::Granted { lease, ttl_secs } => Outcome::Ok(Granted {
                lease: LeaseId(i64::from(lease)),
                ttl_secs: i64::from(ttl_secs),
            }),
            FuzzOutcome::Done => Outcome::Ok(Granted {
                lease: LeaseId(0),
                ttl_secs: 1,
            }),
            FuzzOutcome::Err(f) => Outcome::Err(f.failure()),
            FuzzOutcome::Unknown => Outcome::Unknown,
        }
    }

    /// The outcome of a request with no value.
    fn done(&self) -> Outcome<()> {
        match *self {
            FuzzOutcome::Granted { .. } | FuzzOutcome::Done => Outcome::Ok(()),
            FuzzOutcome::Err(f) => Outcome::Err(f.failure()),
            FuzzOutcome::Unknown => Outcome::Unknown,
        }
    }

    /// The completion of `op`, a request of `kind`.
    fn completion(&self, op: OpId, kind: Kind) -> Completion {
        match kind {
            Kind::Grant => Completion::Granted {
                op,
                outcome: self.granted(),
            },
            Kind::Txn => Completion::Txn {
                op,
                outcome: self.done().map(|()| TxnResponse {
                    cluster: coord_core::ClusterId::default(),
                    succeeded: false,
                    revision: Revision(1),
                    responses: Vec::new(),
                }),
            },
            Kind::Count => Completion::Listed {
                op,
                outcome: self.done().map(|()| coord_core::io::Listing {
                    count: (op.0 & 0xffff) % 2_000,
                    ..coord_core::io::Listing::default()
                }),
            },
            Kind::Revoke | Kind::Stream => Completion::Revoked {
                op,
                outcome: self.done(),
            },
        }
    }
}

#[derive(Debug, Arbitrary)]
struct Plan {
    ttl_secs: u8,
    refresh_pct: u8,
    timeout_ms: u16,
    start: StartPolicy,
    seed: u64,
}

/// How many steps `data` decodes to (for checking a smoke run is not
/// vacuous).
pub fn steps(data: &[u8]) -> usize {
    crate::decode::<Plan, Step>(data).map_or(0, |(_, steps)| steps.len())
}

/// Runs one fuzz case; panics on a broken invariant.
pub fn run(data: &[u8]) -> crate::Reach {
    let Some((plan, steps)) = crate::decode::<Plan, Step>(data) else {
        return crate::Reach::default();
    };
    let ttl = Duration::from_secs(u64::from(plan.ttl_secs.clamp(1, 30)));
    let mut config =
        LivenessConfig::new(Key(b"/coord/hosts/f".to_vec()), b"{}".to_vec(), plan.seed);
    config.lease.ttl = ttl;
    config.lease.refresh =
        (ttl * u32::from(plan.refresh_pct.clamp(1, 99)) / 100).max(Duration::from_millis(10));
    config.lease.request_timeout = Duration::from_millis(u64::from(plan.timeout_ms.max(10)));
    config.lease.start = plan.start;
    // One plan in eight runs the go-coord-style baseline's pacing, and one
    // in eight replaces a lost lease (taken from the seed's bits, so that
    // the committed corpus decodes as before).
    config.lease.backoff.pacing = crate::pacing(plan.seed);
    if (plan.seed >> 3) % 8 == 7 {
        config.on_loss = OnLoss::Replace;
    }
    // One plan in two counts its fleet, every second.
    if (plan.seed >> 6) % 2 == 1 {
        config.fleet = Some(coord_core::liveness::FleetConfig {
            every: Duration::from_secs(1),
            ..coord_core::liveness::FleetConfig::new(
                Key(b"/coord/hosts/".to_vec()),
                plan.seed >> 20,
            )
        });
    }
    let Ok(mut m) = Liveness::new(config) else {
        return crate::Reach::default();
    };
    let mut h = Harness {
        now: 0,
        ops: Vec::new(),
        kinds: Vec::new(),
        granted: BTreeSet::new(),
        stopped: false,
        started: false,
        milestones: 0,
    };
    let n = steps.len();
    for step in steps {
        h.step(&mut m, step);
    }
    crate::Reach {
        steps: n,
        milestones: h.milestones,
    }
}

struct Harness {
    now: u64,
    ops: Vec<OpId>,
    /// The kind of each op in `ops`.
    kinds: Vec<Kind>,
    granted: BTreeSet<LeaseId>,
    stopped: bool,
    started: bool,
    milestones: usize,
}

impl Harness {
    fn op(&self, which: u8) -> OpId {
        crate::pick(&self.ops, which)
    }

    fn kind(&self, which: u8) -> Kind {
        if self.kinds.is_empty() {
            return Kind::Revoke;
        }
        self.kinds[usize::from(which) % self.kinds.len()]
    }

    /// A completion of `op` as a request of `kind`, remembering any lease
    /// it grants.
    fn completion(&mut self, op: OpId, kind: Kind, outcome: FuzzOutcome) -> Input {
        let c = outcome.completion(op, kind);
        if let Completion::Granted {
            outcome: Outcome::Ok(g),
            ..
        } = &c
        {
            self.granted.insert(g.lease);
        }
        Input::Io(c)
    }

    fn step(&mut self, m: &mut Liveness, step: Step) {
        let now = Instant::from_millis(self.now);
        let input = match step {
            Step::Start => Input::Start,
            Step::Stop => Input::Close,
            Step::Advance(ms) => {
                self.now += u64::from(ms);
                let now = Instant::from_millis(self.now);
                if m.poll_timeout().is_some_and(|d| d <= now) {
                    let _ = m.handle(now, Input::Timeout);
                    self.drain(m);
                } else {
                    crate::early_timeout_changes_nothing(m, now);
                }
                // Some advances end with the prober finding etcd back or
                // silent.
                if let Some(news) = crate::probe_news::<Liveness>(ms, now) {
                    assert_eq!(m.handle(now, news), Ok(()));
                    self.drain(m);
                }
                return;
            }
            Step::Complete { which, outcome } => {
                self.completion(self.op(which), self.kind(which), outcome)
            }
            Step::WrongKind { which, outcome } => {
                let wrong = match self.kind(which) {
                    Kind::Grant => Kind::Txn,
                    Kind::Txn | Kind::Stream => Kind::Revoke,
                    Kind::Revoke | Kind::Count => Kind::Txn,
                };
                // Built directly: a wrong-kind grant must not count as granted.
                Input::Io(outcome.completion(self.op(which), wrong))
            }
            Step::Reply { which, ttl_secs } => Input::Io(Completion::KeepAliveReply {
                stream: self.op(which),
                ttl_secs: i64::from(ttl_secs),
            }),
            Step::Closed { which, failure } => Input::Io(Completion::KeepAliveClosed {
                stream: self.op(which),
                failure: failure.failure(),
            }),
            Step::Ghost { op, outcome } => {
                self.completion(OpId(u64::from(op) + 1_000_000), Kind::Grant, outcome)
            }
        };
        let is_start = input == Input::Start;
        let result = m.handle(now, input);
        if is_start {
            // Start is refused exactly when it is not the first.
            assert_eq!(result.is_ok(), !self.started && !self.stopped, "{result:?}");
            self.started = true;
        } else {
            assert_eq!(result, Ok(()), "only Start can be refused");
        }
        self.drain(m);
    }

    fn drain(&mut self, m: &mut Liveness) {
        while let Some(out) = m.poll() {
            assert!(!self.stopped, "output after Stopped: {out:?}");
            match out {
                Output::Command(c) => {
                    let kind = match c {
                        Command::Grant { .. } => Some(Kind::Grant),
                        Command::Txn { .. } => Some(Kind::Txn),
                        Command::OpenKeepAlive { .. } => Some(Kind::Stream),
                        Command::Revoke { .. } => Some(Kind::Revoke),
                        Command::Range { .. } => Some(Kind::Count),
                        _ => None,
                    };
                    if let Some(kind) = kind {
                        let op = c.op();
                        // Fresh within the machine's part (the engine's,
                        // the census's) that issued it.
                        let slot = coord_core::outbox::slot_of(op);
                        if let Some(last) = self
                            .ops
                            .iter()
                            .rev()
                            .find(|o| coord_core::outbox::slot_of(**o) == slot)
                        {
                            assert!(op > *last, "op ids must be fresh: {op} after {last}");
                        }
                        self.ops.push(op);
                        self.kinds.push(kind);
                    }
                }
                Output::Event(e) => match e {
                    Event::Registered { lease, .. } | Event::Reregistered { lease, .. } => {
                        assert!(self.granted.contains(&lease), "{lease} was never granted");
                        self.milestones += 1;
                    }
                    Event::Lost { .. } => self.milestones += 1,
                    Event::Closed { .. } => {
                        self.stopped = true;
                        self.milestones += 1;
                    }
                    _ => {}
                },
            }
        }
        // The machine's own invariants.
        match m.state() {
            LivenessState::Registered { lease } => assert_eq!(m.lease(), Some(lease)),
            _ => assert_eq!(m.lease(), None),
        }
        assert_eq!(m.is_closed(), self.stopped);
        let live = self.started && !self.stopped;
        if live {
            assert!(
                m.poll_timeout().is_some(),
                "a live machine always has a deadline"
            );
        }
        if self.stopped {
            assert_eq!(m.poll_timeout(), None);
        }
    }
}
