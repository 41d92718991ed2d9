//! Liveness tests of answers nobody awaits: to ops and streams the engine
//! never issued or no longer waits on. Each must leave the engine as it
//! was, whatever step it is in; and a resume's failed put.

use super::*;

/// An op and a stream the engine never issued.
const STRAY: OpId = OpId(99);

/// Feeds `input` at `now` and checks that the engine says and sends
/// nothing, and keeps its state and its next deadline.
fn unmoved(m: &mut Liveness, now: u64, input: Input) {
    let (state, deadline) = (m.state(), m.poll_timeout());
    let shown = format!("{input:?}");
    m.handle(t(now), input).unwrap();
    assert_eq!(drain(m), vec![], "{shown} moved the engine");
    assert_eq!(m.state(), state, "{shown}");
    assert_eq!(m.poll_timeout(), deadline, "{shown}");
}

/// Every kind of answer, for an op or stream not awaited.
fn strays(lease: LeaseId) -> Vec<Input> {
    vec![
        Input::Io(Completion::Granted {
            op: STRAY,
            outcome: Outcome::Ok(Granted { lease, ttl_secs: 9 }),
        }),
        Input::Io(Completion::Txn {
            op: STRAY,
            outcome: Outcome::Err(Failure::LeaseNotFound),
        }),
        Input::Io(Completion::Txn {
            op: STRAY,
            outcome: Outcome::Ok(TxnResponse {
                cluster: crate::ClusterId::default(),
                succeeded: true,
                revision: crate::Revision(10),
                responses: Vec::new(),
            }),
        }),
        Input::Io(Completion::KeepAliveReply {
            stream: STRAY,
            ttl_secs: 9,
        }),
        Input::Io(Completion::KeepAliveReply {
            stream: STRAY,
            ttl_secs: 0,
        }),
        Input::Io(Completion::KeepAliveClosed {
            stream: STRAY,
            failure: Failure::LeaseNotFound,
        }),
        Input::Io(Completion::KeepAliveClosed {
            stream: STRAY,
            failure: Failure::Unavailable("gone".into()),
        }),
        // Not an answer, but as empty: a timeout before any deadline (the
        // tests feed these long before theirs).
        Input::Timeout,
    ]
}

#[test]
fn answers_not_awaited_leave_every_registration_step_alone() {
    let mut m = Liveness::new(config(StartPolicy::Retry)).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut m);
    // Granting (op 1).
    for stray in strays(LEASE2) {
        unmoved(&mut m, 1, stray);
    }
    ok(&mut m, 1, 1, granted(LEASE));
    assert_eq!(drain(&mut m), vec![put(2, LEASE)]);
    // Putting the key (op 2).
    for stray in strays(LEASE2) {
        unmoved(&mut m, 2, stray);
    }
    ok(&mut m, 2, 2, Reply::Done);
    let _ = drain(&mut m);
    // Opening the stream (op 3).
    for stray in strays(LEASE2) {
        unmoved(&mut m, 3, stray);
    }
    reply(&mut m, 3, 3, 9);
    assert!(matches!(
        drain(&mut m).as_slice(),
        [Output::Event(Event::Registered { lease: LEASE, .. })]
    ));
    // Held.
    for stray in strays(LEASE2) {
        unmoved(&mut m, 4, stray);
    }
    // Held, the stream broken and reopened at once, the reopened one
    // broken before it answered: waiting to reopen again.
    closed(&mut m, 5, 3, Failure::Unavailable("cut".into()));
    let _ = drain(&mut m);
    closed(&mut m, 6, 4, Failure::Unavailable("cut".into()));
    assert_eq!(
        drain(&mut m),
        vec![cmd(Command::CloseKeepAlive { stream: OpId(4) })]
    );
    assert!(m.poll_timeout() > Some(t(7)));
    for stray in strays(LEASE2) {
        unmoved(&mut m, 7, stray);
    }
    // Lost, waiting to heal.
    let lost = lose_by_silence(&mut m);
    assert!(m.poll_timeout() > Some(t(lost + 1)), "heals at once");
    for stray in strays(LEASE2) {
        unmoved(&mut m, lost + 1, stray);
    }
}

/// A lost lease resumed: its stream reopened and answered, the key's put
/// in flight. Returns the engine, the resume's stream and put, and when
/// the put went out.
fn resume_putting() -> (Liveness, OpId, OpId, u64) {
    let mut m = registered(StartPolicy::Retry);
    lose_by_silence(&mut m);
    let at = fire(&mut m);
    let out = drain(&mut m);
    let Some(&Output::Command(Command::OpenKeepAlive {
        op: stream,
        lease: LEASE,
    })) = out.first()
    else {
        panic!("no resume of the lost lease: {out:?}")
    };
    // The resume's stream opening (the stream of the registration, op 3,
    // is stale by now).
    for stray in strays(LEASE2) {
        unmoved(&mut m, at + 1, stray);
    }
    unmoved(&mut m, at + 1, {
        Input::Io(Completion::KeepAliveReply {
            stream: OpId(3),
            ttl_secs: 9,
        })
    });
    reply(&mut m, at + 2, stream.0, 9);
    let out = drain(&mut m);
    let Some(&Output::Command(Command::Txn { op: put, .. })) = out.first() else {
        panic!("no put of the resumed lease's key: {out:?}")
    };
    (m, stream, put, at + 2)
}

#[test]
fn answers_not_awaited_leave_a_resume_alone() {
    let (mut m, _stream, _put, at) = resume_putting();
    for stray in strays(LEASE2) {
        unmoved(&mut m, at + 1, stray);
    }
    // The registration's own stream, closed long ago, is stale too.
    unmoved(
        &mut m,
        at + 1,
        Input::Io(Completion::KeepAliveClosed {
            stream: OpId(3),
            failure: Failure::LeaseNotFound,
        }),
    );
}

/// What a resume does next when its put fails with `failure`: the first
/// command of the attempt after the wait.
fn after_failed_put(failure: Failure) -> Vec<Output> {
    let (mut m, stream, put, at) = resume_putting();
    m.handle(t(at + 1), completed(put, Outcome::Err(failure)))
        .unwrap();
    let out = drain(&mut m);
    assert_eq!(
        out.first(),
        Some(&cmd(Command::CloseKeepAlive { stream })),
        "{out:?}"
    );
    assert!(
        !out.iter()
            .any(|o| matches!(o, Output::Command(Command::Revoke { .. }))),
        "the resumed lease is not for revoking: {out:?}"
    );
    fire(&mut m);
    drain(&mut m)
}

#[test]
fn a_resume_whose_put_failed_resumes_again_unless_the_lease_is_gone() {
    // etcd did not answer the put: the lease may well live, resume it.
    let out = after_failed_put(Failure::Unavailable("no leader".into()));
    assert!(
        matches!(
            out.first(),
            Some(Output::Command(Command::OpenKeepAlive { lease: LEASE, .. }))
        ),
        "{out:?}"
    );
    // etcd said the lease is gone: a new one.
    let out = after_failed_put(Failure::LeaseNotFound);
    assert!(
        matches!(out.first(), Some(Output::Command(Command::Grant { .. }))),
        "{out:?}"
    );
}
