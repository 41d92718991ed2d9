use std::cell::RefCell;
use std::collections::BTreeMap;

use super::*;
use crate::io::{Command, Completion, Granted, TxnResponse};
use crate::outcome::Failure;
use crate::{OpId, Outcome};

/// What a test replies to a unary request; the request's kind (recorded
/// when the test drained the command) decides which completion it becomes.
#[derive(Debug, Clone)]
enum Reply {
    Granted { lease: LeaseId, ttl_secs: i64 },
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Grant,
    Txn,
    Revoke,
}

thread_local! {
    static KINDS: RefCell<BTreeMap<OpId, Kind>> = const { RefCell::new(BTreeMap::new()) };
}

/// The completion of `op` with `outcome`, typed by the kind of request `op`
/// was.
fn completed(op: OpId, outcome: Outcome<Reply>) -> Input {
    let kind = KINDS.with(|k| k.borrow().get(&op).copied());
    let c = match kind {
        Some(Kind::Grant) => Completion::Granted {
            op,
            outcome: outcome.map(|r| match r {
                Reply::Granted { lease, ttl_secs } => Granted { lease, ttl_secs },
                Reply::Done => panic!("a grant answered with Done"),
            }),
        },
        Some(Kind::Txn) => Completion::Txn {
            op,
            outcome: outcome.map(|_| TxnResponse {
                cluster: crate::ClusterId::default(),
                succeeded: false,
                revision: crate::Revision(10),
                responses: Vec::new(),
            }),
        },
        Some(Kind::Revoke) => Completion::Revoked {
            op,
            outcome: outcome.map(|_| ()),
        },
        // An op the machine never issued: any kind is stale.
        None => Completion::Revoked {
            op,
            outcome: outcome.map(|_| ()),
        },
    };
    Input::Io(c)
}

const LEASE: LeaseId = LeaseId(0x70);
const LEASE2: LeaseId = LeaseId(0x71);

fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn config(start: StartPolicy) -> LivenessConfig {
    let mut c = LivenessConfig::new(Key(b"/coord/hosts/h1".to_vec()), b"{}".to_vec(), 9);
    c.lease.ttl = Duration::from_secs(9);
    c.lease.refresh = Duration::from_secs(3);
    c.lease.request_timeout = Duration::from_secs(2);
    c.lease.start = start;
    c
}

fn drain(m: &mut Liveness) -> Vec<Output> {
    let out: Vec<Output> = std::iter::from_fn(|| m.poll()).collect();
    KINDS.with(|k| {
        let mut k = k.borrow_mut();
        for o in &out {
            match o {
                Output::Command(Command::Grant { op, .. }) => k.insert(*op, Kind::Grant),
                Output::Command(Command::Txn { op, .. }) => k.insert(*op, Kind::Txn),
                Output::Command(Command::Revoke { op, .. }) => k.insert(*op, Kind::Revoke),
                _ => None,
            };
        }
    });
    out
}

fn cmd(c: Command) -> Output {
    Output::Command(c)
}

fn ev(e: Event) -> Output {
    Output::Event(e)
}

fn ok(m: &mut Liveness, now: u64, op: u64, reply: Reply) {
    m.handle(t(now), completed(OpId(op), Outcome::Ok(reply)))
        .unwrap();
}

fn granted(lease: LeaseId) -> Reply {
    Reply::Granted { lease, ttl_secs: 9 }
}

fn put(op: u64, lease: LeaseId) -> Output {
    cmd(Command::Txn {
        op: OpId(op),
        txn: crate::lease::put_if_changed(Key(b"/coord/hosts/h1".to_vec()), b"{}".to_vec(), lease),
    })
}

#[test]
fn the_key_is_put_only_unless_it_holds_the_value_on_the_lease() {
    use crate::io::{Compare, CompareOp, CompareTarget, Txn, TxnOp};
    let key = Key(b"/coord/hosts/h1".to_vec());
    let txn = crate::lease::put_if_changed(key.clone(), b"{}".to_vec(), LEASE);
    let equal = |target| Compare {
        key: key.clone(),
        prefix: false,
        op: CompareOp::Equal,
        target,
    };
    assert_eq!(
        txn,
        Txn {
            // An intact key is left alone, so that watchers see no event.
            compares: vec![
                equal(CompareTarget::Lease(LEASE)),
                equal(CompareTarget::Value(b"{}".to_vec())),
            ],
            success: vec![],
            failure: vec![TxnOp::Put {
                key: key.clone(),
                value: b"{}".to_vec(),
                lease: LEASE
            }],
        }
    );
}

/// Start and complete a registration at t=0..3 ms: ops 1 (grant), 2 (put),
/// 3 (keep-alive stream).
fn registered(start: StartPolicy) -> Liveness {
    registered_with(config(start))
}

fn registered_with(config: LivenessConfig) -> Liveness {
    let mut m = Liveness::new(config).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    assert_eq!(
        drain(&mut m),
        vec![cmd(Command::Grant {
            op: OpId(1),
            ttl_secs: 9
        })]
    );
    assert_eq!(m.state(), LivenessState::Registering);
    ok(&mut m, 1, 1, granted(LEASE));
    assert_eq!(drain(&mut m), vec![put(2, LEASE)]);
    ok(&mut m, 2, 2, Reply::Done);
    assert_eq!(
        drain(&mut m),
        vec![cmd(Command::OpenKeepAlive {
            op: OpId(3),
            lease: LEASE
        })]
    );
    assert_eq!(m.lease(), None, "not registered before the first reply");
    reply(&mut m, 3, 3, 9);
    assert_eq!(
        drain(&mut m),
        vec![ev(Event::Registered {
            lease: LEASE,
            ttl: Duration::from_secs(9)
        })]
    );
    assert_eq!(m.lease(), Some(LEASE));
    assert_eq!(m.state(), LivenessState::Registered { lease: LEASE });
    m
}

fn reply(m: &mut Liveness, now: u64, stream: u64, ttl: i64) {
    m.handle(
        t(now),
        Input::Io(Completion::KeepAliveReply {
            stream: OpId(stream),
            ttl_secs: ttl,
        }),
    )
    .unwrap();
}

fn closed(m: &mut Liveness, now: u64, stream: u64, failure: Failure) {
    m.handle(
        t(now),
        Input::Io(Completion::KeepAliveClosed {
            stream: OpId(stream),
            failure,
        }),
    )
    .unwrap();
}

/// Lets the held lease's deadline pass with no reply: `Lost` then a heal is
/// scheduled. Returns the instant of the loss.
fn lose_by_silence(m: &mut Liveness) -> u64 {
    loop {
        let at = fire(m);
        let out = drain(m);
        if out
            .iter()
            .any(|o| matches!(o, Output::Event(Event::Lost { .. })))
        {
            return at;
        }
    }
}

/// Fires the pending timeout, returning the instant used.
fn fire(m: &mut Liveness) -> u64 {
    let at = m.poll_timeout().expect("a deadline").as_millis();
    m.handle(t(at), Input::Timeout).unwrap();
    at
}

#[test]
fn resume_of_a_dead_lease_grants_at_once() {
    let mut m = registered(StartPolicy::FailFast);
    lose_by_silence(&mut m);
    let b = m.last_op();
    let at = fire(&mut m);
    let _ = drain(&mut m);
    closed(&mut m, at + 5, b + 1, Failure::LeaseNotFound);
    assert_eq!(
        drain(&mut m),
        vec![
            cmd(Command::CloseKeepAlive {
                stream: OpId(b + 1)
            }),
            cmd(Command::Grant {
                op: OpId(b + 2),
                ttl_secs: 9
            })
        ]
    );
    // Same for a TTL-0 reply on the reopened stream.
    let mut m = registered(StartPolicy::FailFast);
    lose_by_silence(&mut m);
    let b = m.last_op();
    let at = fire(&mut m);
    let _ = drain(&mut m);
    reply(&mut m, at + 5, b + 1, 0);
    assert_eq!(
        drain(&mut m),
        vec![
            cmd(Command::CloseKeepAlive {
                stream: OpId(b + 1)
            }),
            cmd(Command::Grant {
                op: OpId(b + 2),
                ttl_secs: 9
            })
        ]
    );
}

#[test]
fn partial_registration_revokes_its_lease_fail_fast() {
    let mut m = Liveness::new(config(StartPolicy::FailFast)).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut m);
    ok(&mut m, 1, 1, granted(LEASE));
    let _ = drain(&mut m);
    m.handle(
        t(2),
        completed(OpId(2), Outcome::Err(Failure::Other("too large".into()))),
    )
    .unwrap();
    assert_eq!(
        drain(&mut m),
        vec![
            ev(Event::StartFailed {
                reason: AttemptFailure::Etcd(Failure::Other("too large".into()))
            }),
            cmd(Command::Revoke {
                op: OpId(3),
                lease: LEASE
            })
        ]
    );
    assert_eq!(m.state(), LivenessState::Closing);
    ok(&mut m, 3, 3, Reply::Done);
    assert_eq!(
        drain(&mut m),
        vec![ev(Event::Closed {
            revoke: RevokeOutcome::Revoked(LEASE)
        })]
    );
    assert!(m.is_closed());
    assert_eq!(m.poll_timeout(), None);
    assert_eq!(m.handle(t(4), Input::Start), Err(StartError::Closed));
}

#[test]
fn first_grant_failure_fails_fast_with_nothing_to_revoke() {
    let mut m = Liveness::new(config(StartPolicy::FailFast)).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut m);
    m.handle(
        t(1),
        completed(
            OpId(1),
            Outcome::Err(Failure::Unavailable("tcp connect error".into())),
        ),
    )
    .unwrap();
    assert_eq!(
        drain(&mut m),
        vec![
            ev(Event::StartFailed {
                reason: AttemptFailure::Etcd(Failure::Unavailable("tcp connect error".into()))
            }),
            ev(Event::Closed {
                revoke: RevokeOutcome::NothingToRevoke
            })
        ]
    );
}

#[test]
fn retry_policy_revokes_partial_lease_and_backs_off() {
    let mut m = Liveness::new(config(StartPolicy::Retry)).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut m);
    ok(&mut m, 1, 1, granted(LEASE));
    let _ = drain(&mut m);
    m.handle(t(2), completed(OpId(2), Outcome::Unknown))
        .unwrap();
    let out = drain(&mut m);
    assert_eq!(
        out[0],
        cmd(Command::Revoke {
            op: OpId(3),
            lease: LEASE
        })
    );
    assert!(matches!(
        out[1],
        Output::Event(Event::Retrying(Retry {
            attempt: 1,
            failure: Some(AttemptFailure::Timeout),
            ..
        }))
    ));
    // The fire-and-forget revoke's completion is ignored.
    ok(&mut m, 3, 3, Reply::Done);
    assert!(drain(&mut m).is_empty());
    // Still the first registration: success reports Registered.
    fire(&mut m);
    let _ = drain(&mut m);
    ok(&mut m, 300, 4, granted(LEASE2));
    let _ = drain(&mut m);
    ok(&mut m, 301, 5, Reply::Done);
    let _ = drain(&mut m);
    reply(&mut m, 302, 6, 9);
    assert_eq!(
        drain(&mut m),
        vec![ev(Event::Registered {
            lease: LEASE2,
            ttl: Duration::from_secs(9)
        })]
    );
}

#[test]
fn request_deadline_counts_as_unknown_and_a_late_grant_is_revoked() {
    // Found by the simulator (seed 1033439, generator V4): a process paused
    // across its grant's deadline; the lease was granted, its answer was
    // read only after the timeout, and the engine ignored it, so the lease
    // lived on for its TTL (longer across an etcd leader change) next to
    // the one the heal granted. A late grant's lease is now revoked.
    let mut m = Liveness::new(config(StartPolicy::Retry)).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut m);
    assert_eq!(m.poll_timeout(), Some(t(2000)));
    assert_eq!(m.silences(), 0);
    m.handle(t(2000), Input::Timeout).unwrap();
    assert_eq!(m.silences(), 1, "an unanswered request is a silence");
    let out = drain(&mut m);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(matches!(
        out[0],
        Output::Event(Event::Retrying(Retry {
            failure: Some(AttemptFailure::Timeout),
            ..
        }))
    ));
    // The late grant is nobody's lease: revoked until etcd confirms.
    ok(&mut m, 2001, 1, granted(LEASE));
    let out = drain(&mut m);
    assert_eq!(
        out,
        vec![cmd(Command::Revoke {
            op: OpId(2),
            lease: LEASE
        })]
    );
    m.handle(
        t(2002),
        completed(OpId(2), Outcome::Err(Failure::Unavailable("x".into()))),
    )
    .unwrap();
    assert!(drain(&mut m).is_empty());
    // Retried after the pause, still under the same lease.
    let retry_at = 2002 + u64::try_from(crate::lease::RETRY.as_millis()).unwrap();
    m.handle(t(retry_at), Input::Timeout).unwrap();
    let out = drain(&mut m);
    assert!(
        out.contains(&cmd(Command::Revoke {
            op: OpId(3),
            lease: LEASE
        })),
        "{out:?}"
    );
}

#[test]
fn a_timed_out_grant_never_answered_is_abandoned_after_a_ttl() {
    let mut m = Liveness::new(config(StartPolicy::Retry)).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut m);
    m.handle(t(2000), Input::Timeout).unwrap();
    let _ = drain(&mut m);
    // Every later deadline up to a TTL past the timeout leaves it alone.
    let mut now = 2000;
    let give_up = 2000 + 9000;
    let mut abandoned = None;
    for _ in 0..1000 {
        let Some(next) = m.poll_timeout() else { break };
        now = next.as_millis().max(now);
        m.handle(t(now), Input::Timeout).unwrap();
        let out = drain(&mut m);
        if out.contains(&cmd(Command::Abandon { op: OpId(1) })) {
            abandoned = Some(now);
            break;
        }
        // Keep later grants unanswered too.
        if now > give_up {
            break;
        }
    }
    assert_eq!(abandoned, Some(give_up));
    // An answer after that is stale.
    ok(&mut m, give_up + 1, 1, granted(LEASE));
    assert!(drain(&mut m)
        .iter()
        .all(|o| !matches!(o, Output::Command(Command::Revoke { .. }))));
}

#[test]
fn fast_failures_keep_retries_within_the_fast_cap() {
    let mut m = Liveness::new(config(StartPolicy::Retry)).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let mut now = 0;
    for op in 1..=40 {
        let _ = drain(&mut m);
        m.handle(
            t(now),
            completed(
                OpId(op),
                Outcome::Err(Failure::Unavailable("refused".into())),
            ),
        )
        .unwrap();
        let next = m.poll_timeout().unwrap().as_millis();
        assert!(next - now <= 1000, "retry after {} ms", next - now);
        now = next;
        m.handle(t(now), Input::Timeout).unwrap();
    }
}

mod close;
mod keep_alive;
mod returning;
mod stray;
