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
    c.ttl = Duration::from_secs(9);
    c.refresh = Duration::from_secs(3);
    c.request_timeout = Duration::from_secs(2);
    c.start = start;
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
fn keep_alive_every_refresh_and_deadline_from_send_time() {
    let mut c = config(StartPolicy::FailFast);
    c.request_timeout = Duration::from_secs(20);
    let mut m = registered_with(c);
    // Stream opened at t=2: next send at 2 + 3000.
    assert_eq!(m.poll_timeout(), Some(t(3002)));
    m.handle(t(3002), Input::Timeout).unwrap();
    assert_eq!(
        drain(&mut m),
        vec![cmd(Command::SendKeepAlive {
            stream: OpId(3),
            lease: LEASE
        })]
    );
    assert_eq!(m.poll_timeout(), Some(t(6002)));
    // The reply arrives late (t=4000) but the deadline counts from the
    // send (3002): 3002 + 9000.
    reply(&mut m, 4000, 3, 9);
    assert!(drain(&mut m).is_empty());
    // An early timeout does nothing.
    m.handle(t(5000), Input::Timeout).unwrap();
    assert!(drain(&mut m).is_empty());
    // No more replies: sends continue until the deadline 12002, then lost.
    assert_eq!(fire(&mut m), 6002);
    assert_eq!(fire(&mut m), 9002);
    let _ = drain(&mut m);
    assert_eq!(m.poll_timeout(), Some(t(12002)));
    assert_eq!(fire(&mut m), 12002);
    let out = drain(&mut m);
    assert_eq!(out[0], cmd(Command::CloseKeepAlive { stream: OpId(3) }));
    assert_eq!(
        out[1],
        ev(Event::Lost {
            lease: LEASE,
            reason: LostReason::KeepAliveTimeout
        })
    );
    assert!(matches!(
        out[2],
        Output::Event(Event::Retrying(Retry {
            attempt: 1,
            failure: None,
            ..
        }))
    ));
    assert_eq!(out.len(), 3);
    assert_eq!(m.lease(), None);
    assert_eq!(m.state(), LivenessState::Healing { attempt: 1 });
    // etcd never said the lease is dead: try to resume it first.
    fire(&mut m);
    assert_eq!(
        drain(&mut m),
        vec![cmd(Command::OpenKeepAlive {
            op: OpId(4),
            lease: LEASE
        })]
    );
}

#[test]
fn ttl_zero_reply_is_a_lost_lease_and_heals_under_a_new_lease() {
    let mut m = registered(StartPolicy::FailFast);
    reply(&mut m, 100, 3, 0);
    let out = drain(&mut m);
    assert_eq!(
        &out[..2],
        &[
            cmd(Command::CloseKeepAlive { stream: OpId(3) }),
            ev(Event::Lost {
                lease: LEASE,
                reason: LostReason::LeaseExpired
            })
        ]
    );
    let Output::Event(Event::Retrying(Retry { next_at, .. })) = out[2] else {
        panic!("{out:?}")
    };
    // First retry within the initial ceiling (100 ms) and at least half.
    assert!(next_at >= t(150) && next_at <= t(200), "{next_at}");
    let at = fire(&mut m);
    assert_eq!(
        drain(&mut m),
        vec![cmd(Command::Grant {
            op: OpId(4),
            ttl_secs: 9
        })]
    );
    ok(&mut m, at + 1, 4, granted(LEASE2));
    assert_eq!(drain(&mut m), vec![put(5, LEASE2)]);
    ok(&mut m, at + 2, 5, Reply::Done);
    let _ = drain(&mut m);
    reply(&mut m, at + 3, 6, 9);
    assert_eq!(
        drain(&mut m),
        vec![ev(Event::Reregistered {
            lease: LEASE2,
            resumed: false
        })]
    );
    assert_eq!(m.lease(), Some(LEASE2));
    // Stale inputs from the old stream and ops are ignored.
    reply(&mut m, at + 4, 3, 0);
    closed(&mut m, at + 4, 3, Failure::StreamClosed("old".into()));
    ok(&mut m, at + 4, 1, granted(LEASE));
    assert!(drain(&mut m).is_empty());
    assert_eq!(m.lease(), Some(LEASE2));
}

#[test]
fn broken_stream_is_reopened_in_place_while_the_lease_lives() {
    let mut m = registered(StartPolicy::FailFast);
    closed(&mut m, 500, 3, Failure::StreamClosed("h2 error".into()));
    assert_eq!(
        drain(&mut m),
        vec![
            cmd(Command::CloseKeepAlive { stream: OpId(3) }),
            ev(Event::KeepAliveInterrupted {
                lease: LEASE,
                failure: Failure::StreamClosed("h2 error".into())
            }),
            cmd(Command::OpenKeepAlive {
                op: OpId(4),
                lease: LEASE
            }),
        ]
    );
    // Still registered: the lease provably lives until 2 + 9000.
    assert_eq!(m.state(), LivenessState::Registered { lease: LEASE });
    assert_eq!(m.lease(), Some(LEASE));
    reply(&mut m, 510, 4, 9);
    assert!(drain(&mut m).is_empty());
    // Keep-alives go on the new stream, refresh counted from the reopen.
    assert_eq!(m.poll_timeout(), Some(t(3500)));
    fire(&mut m);
    assert_eq!(
        drain(&mut m),
        vec![cmd(Command::SendKeepAlive {
            stream: OpId(4),
            lease: LEASE
        })]
    );
}

/// Streams that end right after their opening reply (a proxy that cuts
/// every stream): the first break reopens at once, but a reopened stream
/// works only once it has answered a keep-alive of its own, so the breaks
/// that follow are paced, each wait about twice the one before, until a
/// stream proves itself; its next break is again reopened at once.
#[test]
fn streams_that_end_after_their_opening_reply_are_reopened_with_backoff() {
    let mut m = registered(StartPolicy::FailFast);
    let cut = || Failure::StreamClosed("keep-alive stream ended".into());
    closed(&mut m, 500, 3, cut());
    let out = drain(&mut m);
    assert_eq!(
        out.last(),
        Some(&cmd(Command::OpenKeepAlive {
            op: OpId(4),
            lease: LEASE
        }))
    );
    let mut now = 500;
    let mut stream = 4;
    let mut waits = Vec::new();
    // The lease lives until 2 + 9000; stay well within it.
    while now < 4000 {
        reply(&mut m, now + 1, stream, 9);
        // A stream reopened after a paced wait is not proven by its
        // opening reply: etcd is still awaited (the first was reopened at
        // once, with no wait, after a stream that worked).
        assert_eq!(m.awaits_etcd(), !waits.is_empty(), "{waits:?}");
        closed(&mut m, now + 2, stream, cut());
        let out = drain(&mut m);
        assert_eq!(
            out,
            vec![
                cmd(Command::CloseKeepAlive {
                    stream: OpId(stream)
                }),
                ev(Event::KeepAliveInterrupted {
                    lease: LEASE,
                    failure: cut()
                }),
            ],
            "paced, not reopened at once"
        );
        let at = fire(&mut m);
        waits.push(at - (now + 2));
        now = at;
        stream += 1;
        assert_eq!(
            drain(&mut m),
            vec![cmd(Command::OpenKeepAlive {
                op: OpId(stream),
                lease: LEASE
            })]
        );
    }
    // Equal jitter: the n-th wait is in [c / 2, c] ms, c = 100 * 2^n up
    // to the fast cap (1 s): a closed stream is a fast failure.
    assert!(waits.len() >= 4, "{waits:?}");
    for (n, wait) in waits.iter().enumerate() {
        let ceiling = (100u64 << n).min(1000);
        assert!(
            *wait >= ceiling / 2 && *wait <= ceiling,
            "wait {n}: {wait} ms ({waits:?})"
        );
    }
    // This stream answers its opening keep-alive and one of its own: it
    // works, and its break is answered at once again.
    reply(&mut m, now + 1, stream, 9);
    let send_at = fire(&mut m);
    let _ = drain(&mut m);
    reply(&mut m, send_at + 1, stream, 9);
    assert!(!m.awaits_etcd(), "a proven stream");
    closed(&mut m, send_at + 2, stream, cut());
    assert_eq!(
        drain(&mut m).last(),
        Some(&cmd(Command::OpenKeepAlive {
            op: OpId(stream + 1),
            lease: LEASE
        })),
        "a stream that worked is reopened at once"
    );
    assert_eq!(m.state(), LivenessState::Registered { lease: LEASE });
    // Its proof reset the backoff: the next stream that ends right after
    // its opening reply waits as the first one did.
    let now = send_at + 2;
    reply(&mut m, now + 1, stream + 1, 9);
    closed(&mut m, now + 2, stream + 1, cut());
    let _ = drain(&mut m);
    let wait = fire(&mut m) - (now + 2);
    assert!(
        (50..=100).contains(&wait),
        "waits {wait} ms after a stream proved itself ({waits:?} before)"
    );
}

#[test]
fn stream_that_cannot_be_reopened_loses_the_lease_at_its_deadline_then_resumes() {
    let mut m = registered(StartPolicy::FailFast);
    closed(&mut m, 500, 3, Failure::Unavailable("member down".into()));
    let _ = drain(&mut m);
    // The reopened stream fails before any reply: paced retries, no event.
    let mut op = 4;
    let mut now = 501;
    let mut refused = 0;
    loop {
        closed(&mut m, now, op, Failure::Unavailable("member down".into()));
        refused += 1;
        assert_eq!(
            drain(&mut m),
            vec![cmd(Command::CloseKeepAlive { stream: OpId(op) })]
        );
        assert_eq!(m.state(), LivenessState::Registered { lease: LEASE });
        now = fire(&mut m);
        let out = drain(&mut m);
        if now >= 9002 {
            assert_eq!(
                out[0],
                ev(Event::Lost {
                    lease: LEASE,
                    reason: LostReason::StreamClosed(Failure::Unavailable("member down".into()))
                })
            );
            // The deadline is no new failure: the retry the last refusal
            // scheduled stands (no further delay drawn, none counted).
            let Output::Event(Event::Retrying(Retry {
                attempt, next_at, ..
            })) = out[1]
            else {
                panic!("{out:?}")
            };
            assert_eq!(attempt, refused, "{out:?}");
            assert!(next_at >= t(now) && next_at <= t(now + 1000), "{next_at}");
            break;
        }
        assert!(now - 501 < 9002, "retries are paced but keep coming");
        op += 1;
        assert_eq!(
            out,
            vec![cmd(Command::OpenKeepAlive {
                op: OpId(op),
                lease: LEASE
            })]
        );
    }
    // Healing resumes the same lease: reopen, then compare-and-put.
    let at = fire(&mut m);
    let out = drain(&mut m);
    let Output::Command(Command::OpenKeepAlive { op: open, lease }) = out[0].clone() else {
        panic!("{out:?}")
    };
    assert_eq!(lease, LEASE);
    reply(&mut m, at + 1, open.0, 8);
    assert_eq!(drain(&mut m), vec![put(open.0 + 1, LEASE)]);
    ok(&mut m, at + 2, open.0 + 1, Reply::Done);
    assert_eq!(
        drain(&mut m),
        vec![ev(Event::Reregistered {
            lease: LEASE,
            resumed: true
        })]
    );
    assert_eq!(m.lease(), Some(LEASE));
}

#[test]
fn a_deadline_loss_after_etcd_returned_heals_from_the_first_attempt() {
    // Found by the simulator (seed 7264317): etcd wiped, then a leader
    // change. The reopens refused in the outage ran the backoff up to the
    // fast cap; the prober found etcd back and the stream reopened just
    // before the lease's deadline, with no reply yet. The deadline loss
    // then waited a fast cap (attempt 9) although etcd had just answered.
    let mut m = registered(StartPolicy::FailFast);
    closed(&mut m, 500, 3, Failure::Unavailable("no leader".into()));
    let _ = drain(&mut m);
    let mut op = 4;
    let mut now = 501;
    let mut refused = 0;
    // Refused reopens until late in the lease's life (deadline 9002).
    while now < 7_000 {
        closed(&mut m, now, op, Failure::Unavailable("no leader".into()));
        refused += 1;
        let _ = drain(&mut m);
        now = fire(&mut m);
        op += 1;
        assert_eq!(
            drain(&mut m),
            vec![cmd(Command::OpenKeepAlive {
                op: OpId(op),
                lease: LEASE
            })]
        );
    }
    assert!(refused >= 5, "the backoff ran up: {refused} refusals");
    // The prober finds etcd back; this reopen is not refused, but the
    // lease's deadline passes before the stream's first reply.
    m.handle(
        t(now),
        Input::Returned {
            probe_sent: t(now.saturating_sub(50)),
        },
    )
    .unwrap();
    let _ = drain(&mut m);
    let lost = loop {
        now = fire(&mut m);
        let out = drain(&mut m);
        if out
            .iter()
            .any(|o| matches!(o, Output::Event(Event::Lost { .. })))
        {
            break out;
        }
        assert!(now <= 9_002, "lost at the deadline: {out:?}");
    };
    assert!(lost.contains(&ev(Event::Lost {
        lease: LEASE,
        reason: LostReason::KeepAliveTimeout
    })));
    let retry = lost.iter().find_map(|o| match o {
        Output::Event(Event::Retrying(r)) => Some(r.clone()),
        _ => None,
    });
    let Some(Retry {
        attempt, next_at, ..
    }) = retry
    else {
        panic!("{lost:?}")
    };
    assert_eq!(
        attempt, 1,
        "the heal starts from the first attempt: {lost:?}"
    );
    assert!(next_at <= t(now + 100), "within the first delay: {next_at}");
}

#[test]
fn unanswered_keep_alive_reopens_the_stream_then_loses_at_the_deadline() {
    let mut m = registered(StartPolicy::FailFast);
    assert_eq!(fire(&mut m), 3002);
    let _ = drain(&mut m);
    // Unanswered for the request timeout (2 s): the stream is broken.
    assert_eq!(fire(&mut m), 5002);
    assert_eq!(
        drain(&mut m),
        vec![
            cmd(Command::CloseKeepAlive { stream: OpId(3) }),
            ev(Event::KeepAliveInterrupted {
                lease: LEASE,
                failure: Failure::StreamClosed("keep-alive unanswered".into())
            }),
            cmd(Command::OpenKeepAlive {
                op: OpId(4),
                lease: LEASE
            }),
        ]
    );
    assert_eq!(m.state(), LivenessState::Registered { lease: LEASE });
    // The reopened stream is silent too; the lease deadline (2 + 9000)
    // ends it: lost, and healing will try to resume.
    let lost_at = lose_by_silence(&mut m);
    assert_eq!(lost_at, 9002);
    assert_eq!(m.state(), LivenessState::Healing { attempt: 2 });
}

#[test]
fn lease_not_found_on_the_stream_is_a_lost_lease() {
    let mut m = registered(StartPolicy::FailFast);
    closed(&mut m, 500, 3, Failure::LeaseNotFound);
    let out = drain(&mut m);
    assert_eq!(
        &out[..2],
        &[
            cmd(Command::CloseKeepAlive { stream: OpId(3) }),
            ev(Event::Lost {
                lease: LEASE,
                reason: LostReason::LeaseExpired
            })
        ]
    );
    fire(&mut m);
    assert_eq!(
        drain(&mut m),
        vec![cmd(Command::Grant {
            op: OpId(4),
            ttl_secs: 9
        })]
    );
}

/// etcd refusing while the host reopens its stream raises the attempt
/// count; when etcd then answers that the lease is gone, etcd works again,
/// so the heal starts from the first attempt (the initial 100 ms ceiling),
/// not from where the refusals left the backoff.
#[test]
fn a_lease_found_gone_after_refusals_heals_from_the_first_attempt() {
    let mut m = registered(StartPolicy::FailFast);
    closed(&mut m, 500, 3, Failure::StreamClosed("h2 error".into()));
    let mut stream = 4;
    let mut now = 500;
    assert!(drain(&mut m).contains(&cmd(Command::OpenKeepAlive {
        op: OpId(stream),
        lease: LEASE
    })));
    // Four reopens refused in a row: the ceiling grows to 800 ms.
    for _ in 0..4 {
        closed(
            &mut m,
            now + 1,
            stream,
            Failure::Unavailable("no leader".into()),
        );
        let _ = drain(&mut m);
        now = fire(&mut m);
        let out = drain(&mut m);
        let Some(Output::Command(Command::OpenKeepAlive { op, .. })) = out.first() else {
            panic!("{out:?}")
        };
        stream = op.0;
    }
    assert_eq!(m.state(), LivenessState::Registered { lease: LEASE });
    reply(&mut m, now + 1, stream, 0);
    let out = drain(&mut m);
    assert!(
        out.contains(&ev(Event::Lost {
            lease: LEASE,
            reason: LostReason::LeaseExpired
        })),
        "{out:?}"
    );
    let Some(Output::Event(Event::Retrying(Retry {
        attempt, next_at, ..
    }))) = out.last()
    else {
        panic!("{out:?}")
    };
    assert_eq!(*attempt, 1);
    let wait = next_at.as_millis() - (now + 1);
    assert!((50..=100).contains(&wait), "waits {wait} ms");
}

/// Seed 7146099: refused resumes grow the delay; the resume then finds the
/// lease gone and grants at once; the new lease expires before it is
/// attached (a GC pause); the attach answered "lease not found" is an
/// answer from etcd, so the retry waits a first attempt's delay, not the
/// fast cap.
#[test]
fn a_lease_gone_before_its_attach_retries_from_the_first_attempt() {
    let mut m = registered(StartPolicy::FailFast);
    lose_by_silence(&mut m);
    let _ = drain(&mut m);
    // Four resumes refused in a row: the ceiling grows.
    for _ in 0..4 {
        let now = fire(&mut m);
        let out = drain(&mut m);
        let Some(Output::Command(Command::OpenKeepAlive { op, .. })) = out.first() else {
            panic!("{out:?}")
        };
        closed(
            &mut m,
            now + 1,
            op.0,
            Failure::Unavailable("no leader".into()),
        );
        let _ = drain(&mut m);
    }
    // The next resume is told the lease is gone, and grants at once.
    let now = fire(&mut m);
    let out = drain(&mut m);
    let Some(Output::Command(Command::OpenKeepAlive { op, .. })) = out.first() else {
        panic!("{out:?}")
    };
    closed(&mut m, now + 1, op.0, Failure::LeaseNotFound);
    let out = drain(&mut m);
    let Some(Output::Command(Command::Grant { op, .. })) = out.last() else {
        panic!("{out:?}")
    };
    ok(&mut m, now + 2, op.0, granted(LeaseId(77)));
    let out = drain(&mut m);
    let Some(Output::Command(Command::Txn { op, .. })) = out.first() else {
        panic!("{out:?}")
    };
    // The new lease expired before its put (the process was paused).
    let at = now + 9_000;
    m.handle(t(at), completed(*op, Outcome::Err(Failure::LeaseNotFound)))
        .unwrap();
    let out = drain(&mut m);
    let Some(Output::Event(Event::Retrying(Retry {
        attempt, next_at, ..
    }))) = out
        .iter()
        .find(|o| matches!(o, Output::Event(Event::Retrying(_))))
    else {
        panic!("{out:?}")
    };
    assert_eq!(*attempt, 1, "{out:?}");
    let wait = next_at.as_millis() - at;
    assert!((50..=100).contains(&wait), "waits {wait} ms");
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
    assert_eq!(m.handle(t(4), Input::Start), Err(UsageError::Closed));
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

#[path = "liveness_close_tests.rs"]
mod close;

#[path = "liveness_stray_tests.rs"]
mod stray;

#[test]
fn etcd_returning_breaks_a_stream_whose_keep_alive_went_out_in_the_silence() {
    let mut m = registered(StartPolicy::FailFast);
    assert!(!m.awaits_etcd(), "a healthy lease waits on nothing");
    // The keep-alive of 3002 goes unanswered; a probe sent at 3500 finds
    // etcd back at 3600: the stream is taken as broken now (not at 5002)
    // and reopened at once, still registered.
    assert_eq!(fire(&mut m), 3002);
    let _ = drain(&mut m);
    m.handle(
        t(3600),
        Input::Returned {
            probe_sent: t(3500),
        },
    )
    .unwrap();
    let out = drain(&mut m);
    assert_eq!(
        out.first(),
        Some(&cmd(Command::CloseKeepAlive { stream: OpId(3) })),
        "{out:?}"
    );
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Event(Event::KeepAliveInterrupted { .. }))),
        "{out:?}"
    );
    assert_eq!(m.state(), LivenessState::Registered { lease: LEASE });
    assert!(
        matches!(
            out.last(),
            Some(Output::Command(Command::OpenKeepAlive { lease: LEASE, .. }))
        ),
        "reopened at once: {out:?}"
    );
    assert!(m.awaits_etcd(), "a reopen waits on etcd");
    // A keep-alive sent after the probe, or with it (the same
    // millisecond), is not touched.
    for probe_sent in [3000, 3002] {
        let mut m = registered(StartPolicy::FailFast);
        assert_eq!(fire(&mut m), 3002);
        let _ = drain(&mut m);
        m.handle(
            t(3600),
            Input::Returned {
                probe_sent: t(probe_sent),
            },
        )
        .unwrap();
        assert_eq!(drain(&mut m), vec![], "probe sent at {probe_sent}");
    }
}

#[test]
fn etcd_found_back_leaves_a_registration_sent_with_the_probe_alone() {
    let mut m = Liveness::new(config(StartPolicy::Retry)).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut m);
    assert_eq!(m.poll_timeout(), Some(t(2000)));
    m.handle(t(100), Input::Returned { probe_sent: t(0) })
        .unwrap();
    assert_eq!(drain(&mut m), vec![]);
    assert_eq!(m.poll_timeout(), Some(t(2000)), "its deadline is kept");
}

/// A registered host lost by silence whose resume attempts (reopening
/// its lease's stream: etcd never said the lease is gone) time out, etcd
/// found back by a probe sent after the one then in flight. Returns the
/// machine, that attempt's stream op and when etcd was found back.
fn resume_in_flight_when_etcd_returns() -> (Liveness, u64, u64) {
    let mut m = registered(StartPolicy::FailFast);
    let _ = lose_by_silence(&mut m);
    let mut in_flight = None;
    for _ in 0..12 {
        let at = fire(&mut m);
        let open = drain(&mut m).iter().find_map(|o| match o {
            Output::Command(Command::OpenKeepAlive { op, .. }) => Some(op.0),
            _ => None,
        });
        in_flight = open.map(|op| (op, at));
        if in_flight.is_some_and(|(_, at)| at > 20_000) {
            break;
        }
    }
    let (op, sent) = in_flight.expect("a resume in flight after 20 s");
    assert!(m.awaits_etcd());
    m.handle(
        t(sent + 700),
        Input::Returned {
            probe_sent: t(sent + 600),
        },
    )
    .unwrap();
    assert_eq!(drain(&mut m), vec![], "nothing sent or given up at once");
    (m, op, sent + 700)
}

/// etcd found back after a silence: an attempt sent in the silence has
/// until a jittered cut (at most half the fast cap) to be answered. A
/// stalled etcd answers what it had queued at once, and the heal
/// completes with that attempt, no other sent.
#[test]
fn etcd_returning_lets_an_attempt_sent_in_the_silence_be_answered() {
    let (mut m, stream, back) = resume_in_flight_when_etcd_returns();
    let cut = m.poll_timeout().unwrap();
    assert!(cut >= t(back) && cut <= t(back + 500), "cut at {cut}");
    reply(&mut m, back + 20, stream, 9);
    let attach = drain(&mut m);
    assert_eq!(attach.len(), 1, "{attach:?}");
    let Output::Command(Command::Txn { op, .. }) = &attach[0] else {
        panic!("the attach check: {attach:?}");
    };
    ok(&mut m, back + 30, op.0, Reply::Done);
    assert_eq!(
        drain(&mut m),
        vec![ev(Event::Reregistered {
            lease: LEASE,
            resumed: true
        })]
    );
}

/// The same attempt still unanswered at the cut is taken as lost (a
/// partition lost it) and retried at the first attempt's pace.
#[test]
fn etcd_returning_retries_an_attempt_still_unanswered_at_the_cut() {
    let (mut m, _, back) = resume_in_flight_when_etcd_returns();
    let cut = fire(&mut m);
    assert!(cut <= back + 500, "cut at {cut}");
    let _ = drain(&mut m);
    let retry = fire(&mut m);
    assert!(retry <= cut + 100, "retried at {retry}, cut at {cut}");
    assert!(drain(&mut m)
        .iter()
        .any(|o| matches!(o, Output::Command(Command::OpenKeepAlive { .. }))));
}

/// Found by the simulator (generator 6, seed 100842 of a 3,000-seed run,
/// heal 19 s after etcd was wiped): while etcd refused, the keep-alive
/// stream was reopened again and again; the one reopened just before the
/// lease's deadline had no time to be answered, and the loss was paced as
/// if etcd were silent (slow class: attempt 10 waited 18 s). A stream that
/// did not prove silence (a keep-alive unanswered for a request timeout)
/// paces the heal as a fast failure.
/// A held lease whose stream etcd refused to reopen (no leader) from 500
/// ms on, until the last reopen before its deadline (9002) that is less
/// than a request timeout (2 s) before it: that stream is open and
/// unanswered when the deadline passes, and the refusals raised the
/// backoff to attempt 5 or more.
fn reopened_until_the_deadline() -> Liveness {
    let m = reopened_until(2000);
    assert_eq!(m.poll_timeout(), Some(t(9002)));
    m
}

/// [`reopened_until_the_deadline`], the refusals ending at the first
/// reopen less than `margin` ms before the deadline.
fn reopened_until(margin: u64) -> Liveness {
    let mut m = registered(StartPolicy::FailFast);
    closed(&mut m, 500, 3, Failure::Unavailable("no leader".into()));
    let _ = drain(&mut m);
    let mut op = 4;
    let mut now = 501;
    // Refused until the last reopen before the deadline (9002) that is
    // less than a request timeout (2 s) before it.
    loop {
        closed(&mut m, now, op, Failure::Unavailable("no leader".into()));
        let _ = drain(&mut m);
        now = fire(&mut m);
        let out = drain(&mut m);
        op += 1;
        assert_eq!(
            out,
            vec![cmd(Command::OpenKeepAlive {
                op: OpId(op),
                lease: LEASE
            })]
        );
        if now + margin > 9002 {
            break;
        }
    }
    m
}

/// Runs the deadline's timeout at `at` and returns the heal's `Retrying`
/// (attempt, wait in ms), after checking the loss's reason.
fn lost_at(m: &mut Liveness, at: u64) -> (u32, u64) {
    m.handle(t(at), Input::Timeout).unwrap();
    let out = drain(m);
    assert_eq!(
        out[1],
        ev(Event::Lost {
            lease: LEASE,
            reason: LostReason::KeepAliveTimeout
        })
    );
    let Output::Event(Event::Retrying(Retry {
        attempt, next_at, ..
    })) = out[2].clone()
    else {
        panic!("{out:?}")
    };
    (attempt, next_at.as_millis() - at)
}

#[test]
fn a_deadline_passing_on_a_stream_reopened_just_before_it_heals_at_the_fast_pace() {
    let mut m = reopened_until_the_deadline();
    // This stream is open and unanswered when the deadline passes.
    let (attempt, wait) = lost_at(&mut m, 9002);
    assert!(attempt >= 5, "attempt {attempt}: the refusals counted");
    assert!(wait <= 1000, "waits {wait} ms, past the fast cap");
}

/// Seed 9443862 (the 50,000-seed campaign of 2026-12-01): a process paused
/// 400 ms after a leader change, while its backoff was raised by the
/// refused reopens, and its lease's deadline passed in the pause. Judged
/// after the pause, the loss healed at attempt 5's pace (1,061 ms after
/// it, over the pause's 800 ms bound). A deadline judged a second or more
/// late was not judged by a running process: the heal starts from the
/// first attempt. One judged less late still counts the refusals.
#[test]
fn a_deadline_judged_long_after_it_passed_heals_from_the_first_attempt() {
    let mut paused = reopened_until_the_deadline();
    let (attempt, wait) = lost_at(&mut paused, 9002 + 3000);
    assert_eq!(attempt, 1, "the refusals before the pause still counted");
    assert!(wait <= 100, "waits {wait} ms, past the first ceiling");
    let mut late = reopened_until_the_deadline();
    let (attempt, wait) = lost_at(&mut late, 9002 + 1000);
    assert_eq!((attempt, wait <= 100), (1, true), "a second late");
    let mut busy = reopened_until_the_deadline();
    let (attempt, wait) = lost_at(&mut busy, 9002 + 999);
    assert!(attempt >= 5, "attempt {attempt}: the refusals counted");
    assert!(wait > 100, "waits {wait} ms, a first attempt's pace");
}

/// Seed 9542729 (the 50,000-seed campaign on d816398): the same, but the
/// pause ended 20 ms after the lease's deadline. What showed the process
/// was not running is its earlier timers: its reopened stream's
/// keep-alive went unanswered in the pause (due 2 s after the reopen) and
/// nothing judged it. The first timer judged a second or more late
/// restarts the backoff, whichever timer it is.
#[test]
fn a_deadline_passed_just_before_a_pause_ended_heals_from_the_first_attempt() {
    let mut m = reopened_until(5000);
    let soonest = m.poll_timeout().expect("a timer").as_millis();
    assert!(
        soonest + 1000 <= 9002,
        "the stream's timer ({soonest}) comes first"
    );
    let (attempt, wait) = lost_at(&mut m, 9002 + 20);
    assert_eq!(attempt, 1, "the refusals before the pause still counted");
    assert!(wait <= 100, "waits {wait} ms, past the first ceiling");
}

/// The go-coord-style baseline (plain pacing, a lost lease replaced): a
/// loss is followed by a revoke of the old lease and a fresh grant after
/// exactly the first ceiling, refusals double the wait past the 1 s fast
/// cap, and etcd found back cuts nothing short.
#[test]
fn the_plain_baseline_replaces_a_lost_lease_and_serves_every_wait_in_full() {
    let mut c = config(StartPolicy::FailFast);
    c.backoff = BackoffConfig::plain();
    c.on_loss = OnLoss::Replace;
    let mut m = registered_with(c);
    closed(&mut m, 500, 3, Failure::Unavailable("no leader".into()));
    let out = drain(&mut m);
    // The stream had replies: reopened at once, whatever the pacing.
    assert_eq!(
        out,
        vec![
            cmd(Command::CloseKeepAlive { stream: OpId(3) }),
            ev(Event::KeepAliveInterrupted {
                lease: LEASE,
                failure: Failure::Unavailable("no leader".into())
            }),
            cmd(Command::OpenKeepAlive {
                op: OpId(4),
                lease: LEASE
            })
        ]
    );
    // Refused reopens: 100, 200, 400, 800, 1600 ms, exactly.
    let mut now = 500;
    for (op, want) in (4..).zip([100, 200, 400, 800, 1600]) {
        closed(&mut m, now, op, Failure::Unavailable("no leader".into()));
        let _ = drain(&mut m);
        let at = m.poll_timeout().expect("a retry").as_millis();
        assert_eq!(at - now, want, "after refusal {}", op - 3);
        // etcd found back changes nothing.
        m.handle(t(now + 1), Input::Returned { probe_sent: t(now) })
            .unwrap();
        assert_eq!(drain(&mut m), vec![]);
        assert_eq!(m.poll_timeout(), Some(t(at)));
        now = fire(&mut m);
        let _ = drain(&mut m);
    }
    // The lease is then lost (its deadline passes): its revoke goes out
    // with the loss, and a new lease is granted, with no resume between.
    let (lost_at, lost) = loop {
        let at = fire(&mut m);
        let out = drain(&mut m);
        if out
            .iter()
            .any(|o| matches!(o, Output::Event(Event::Lost { .. })))
        {
            break (at, out);
        }
    };
    assert!(lost_at <= 9_002, "lost by the deadline, at {lost_at}");
    assert!(
        lost.iter().any(|o| matches!(
            o,
            Output::Command(Command::Revoke { lease, .. }) if *lease == LEASE
        )),
        "the old lease revoked: {lost:?}"
    );
    let grant_at = loop {
        let at = fire(&mut m);
        let out = drain(&mut m);
        assert!(
            !out.iter()
                .any(|o| matches!(o, Output::Command(Command::OpenKeepAlive { .. }))),
            "no resume: {out:?}"
        );
        if out
            .iter()
            .any(|o| matches!(o, Output::Command(Command::Grant { .. })))
        {
            break at;
        }
    };
    // Attempts 1-5 were the refusals, 6 the reopen found silent (3.2 s);
    // the loss is the seventh: 6.4 s, where coord's pacing would wait at
    // most its 1 s fast cap.
    assert_eq!(grant_at - lost_at, 6_400);
}

/// Steps `m` through its deadlines up to `by` (ms); true once it opens a
/// keep-alive stream.
fn reopens_by(m: &mut Liveness, by: u64) -> bool {
    for _ in 0..100 {
        let Some(at) = m.poll_timeout().filter(|at| *at <= t(by)) else {
            return false;
        };
        m.handle(at, Input::Timeout).unwrap();
        if drain(m)
            .iter()
            .any(|o| matches!(o, Output::Command(Command::OpenKeepAlive { .. })))
        {
            return true;
        }
    }
    false
}

/// etcd found back (a probe sent 50 ms before `at`, answered at `at`).
fn etcd_returns_at(m: &mut Liveness, at: u64) {
    m.handle(
        t(at),
        Input::Returned {
            probe_sent: t(at - 50),
        },
    )
    .unwrap();
    let _ = drain(m);
}

#[test]
fn etcd_found_back_cuts_a_wait_to_reopen_the_stream_or_to_heal() {
    // Slow failures wait 10-20 s (a 20 s ceiling, equal jitter); etcd's
    // return cuts a wait to at most half the 1 s fast cap.
    let mut c = config(StartPolicy::FailFast);
    c.backoff = crate::backoff::BackoffConfig {
        initial: Duration::from_secs(20),
        cap: Duration::from_secs(20),
        ..crate::backoff::BackoffConfig::default()
    };
    let overloaded = || Failure::Overloaded("too many requests".into());
    // The held lease's stream breaks, is reopened at once, and the new
    // stream breaks too before proving itself (overloaded, a slow
    // failure): the next reopen waits.
    let mut m = registered_with(c.clone());
    closed(&mut m, 100, 3, overloaded());
    assert!(matches!(
        drain(&mut m).last(),
        Some(Output::Command(Command::OpenKeepAlive { op: OpId(4), .. }))
    ));
    closed(&mut m, 200, 4, overloaded());
    let _ = drain(&mut m);
    assert_eq!(m.state(), LivenessState::Registered { lease: LEASE });
    assert!(!reopens_by(&mut m, 299), "reopened at once");
    etcd_returns_at(&mut m, 300);
    assert!(reopens_by(&mut m, 800), "no reopen by t=800");

    // Lost by silence, and a resume unanswered (a timeout, slow): the
    // heal waits.
    let mut m = registered_with(c);
    let lost = lose_by_silence(&mut m);
    let mut waiting = None;
    for _ in 0..10 {
        let at = fire(&mut m);
        let out = drain(&mut m);
        if out.iter().any(|o| {
            matches!(
                o,
                Output::Event(Event::Retrying(Retry {
                    failure: Some(AttemptFailure::Timeout),
                    ..
                }))
            )
        }) {
            waiting = Some(at);
            break;
        }
    }
    let Some(since) = waiting else {
        panic!("no heal attempt timed out after the loss at {lost}")
    };
    assert!(
        m.poll_timeout().is_some_and(|at| at >= t(since + 10_000)),
        "a slow failure's wait"
    );
    etcd_returns_at(&mut m, since + 100);
    assert!(
        reopens_by(&mut m, since + 600),
        "no heal attempt by {}",
        since + 600
    );
}

#[test]
fn a_registered_lease_says_until_when_it_lives_and_counts_its_silences() {
    let mut m = registered(StartPolicy::FailFast);
    assert!(!m.is_closed());
    // The first keep-alive went out with the stream's opening at t=2 and
    // was answered with a TTL of 9 s.
    assert_eq!(m.expires_at(), Some(t(9_002)));
    assert_eq!(m.silences(), 0);
    assert_eq!(fire(&mut m), 3002);
    let _ = drain(&mut m);
    assert_eq!(m.silences(), 0, "sent, not yet due");
    assert_eq!(fire(&mut m), 5002);
    let _ = drain(&mut m);
    assert_eq!(m.silences(), 1, "a keep-alive unanswered");
}

#[test]
fn a_lease_granted_with_no_ttl_is_given_back_and_asked_again() {
    // What a first grant answered with a TTL of `ttl_secs` leads to.
    let granted_with = |ttl_secs| {
        let mut m = Liveness::new(config(StartPolicy::Retry)).unwrap();
        m.handle(t(0), Input::Start).unwrap();
        let _ = drain(&mut m);
        ok(
            &mut m,
            1,
            1,
            Reply::Granted {
                lease: LEASE,
                ttl_secs,
            },
        );
        let out = drain(&mut m);
        (m, out)
    };
    // etcd never grants a TTL of 0 or less; if it did, the lease would be
    // useless: it is revoked and the grant retried, nothing registered.
    let (m, out) = granted_with(0);
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Command(Command::Revoke { lease: LEASE, .. }))),
        "{out:?}"
    );
    assert!(
        !out.iter()
            .any(|o| matches!(o, Output::Command(Command::Txn { .. }))),
        "attached to a useless lease: {out:?}"
    );
    assert_eq!(m.lease(), None);
    // A TTL of one second is a lease like any other.
    assert_eq!(granted_with(1).1, vec![put(2, LEASE)]);
}
