//! Campaigns and answers or timeouts nobody awaits: at every step, an
//! answer to an op the campaign never sent (or no longer awaits) and a
//! timeout before its deadline leave it as it was.

use super::*;

/// A campaign op (slot 1) that was never sent.
fn stray_op() -> OpId {
    OpId((1 << crate::outbox::SLOT_SHIFT) | 99)
}

/// Feeds a stray answer (ok, then failed) and a timeout at `now`, which
/// must be before the session's next deadline: nothing is said or sent,
/// the campaign keeps its standing and the session its deadline.
fn strays_leave_it_alone(s: &mut Session, now: u64) {
    let deadline = s.poll_timeout();
    assert!(deadline > Some(t(now)), "{deadline:?} is not after {now}");
    let standing = s.standing(ElectionId(1));
    let answers = [
        joined(stray_op(), true, vec![kv(LEASE, "me", 20)], 40),
        joined(stray_op(), false, vec![], 40),
        Completion::Txn {
            op: stray_op(),
            outcome: Outcome::Err(Failure::Unavailable("no leader".into())),
        },
    ];
    for input in answers.into_iter().map(Input::Io).chain([Input::Timeout]) {
        let shown = format!("{input:?}");
        s.handle(t(now), input).unwrap();
        assert_eq!(drain(s), vec![], "{shown} moved the campaign");
        assert_eq!(s.standing(ElectionId(1)), standing, "{shown}");
        assert_eq!(s.poll_timeout(), deadline, "{shown}");
    }
}

fn failed(op: OpId) -> Completion {
    Completion::Txn {
        op,
        outcome: Outcome::Err(Failure::Unavailable("no leader".into())),
    }
}

#[test]
fn strays_leave_a_join_and_a_wait_to_rejoin_alone() {
    let mut s = session();
    let (op, _) = the_txn(&campaign(&mut s, 10, 1, Mode::Wait));
    strays_leave_it_alone(&mut s, 11);
    io(&mut s, 12, failed(op));
    let out = drain(&mut s);
    assert!(matches!(
        election_events(&out, 1)[..],
        [ElectionEvent::Retrying(Retry { attempt: 1, .. })]
    ));
    strays_leave_it_alone(&mut s, 13);
    // The rejoin at its time.
    assert_ne!(next_attempt(&mut s), op);
}

#[test]
fn strays_leave_a_queued_and_a_leading_campaign_alone() {
    let (mut s, stream, first) = queued_behind_first();
    io(&mut s, 12, created(stream, 20));
    let _ = drain(&mut s);
    strays_leave_it_alone(&mut s, 13);
    io(&mut s, 14, deleted(stream, first, 21));
    let _ = drain(&mut s);
    assert!(matches!(
        s.standing(ElectionId(1)),
        Standing::Leading { .. }
    ));
    strays_leave_it_alone(&mut s, 15);
    // A guarded request in flight is not given up before its deadline.
    let (proclaim, _) = the_txn(&proclaim(&mut s, 16, 7, "v2"));
    strays_leave_it_alone(&mut s, 17);
    s.handle(t(2016), Input::Timeout).unwrap();
    let out = drain(&mut s);
    assert!(
        commands(&out).contains(&Command::Abandon { op: proclaim }),
        "given up at its deadline: {out:?}"
    );
}

#[test]
fn strays_leave_a_leave_alone_at_every_step() {
    // Leaving while the join is in flight: the leave waits for its answer.
    let mut s = session();
    let (join, _) = the_txn(&campaign(&mut s, 10, 1, Mode::Wait));
    s.handle(t(11), Input::Leave { id: ElectionId(1) }).unwrap();
    let _ = drain(&mut s);
    strays_leave_it_alone(&mut s, 12);
    io(
        &mut s,
        13,
        joined(join, true, vec![kv(LEASE, "me", 20)], 20),
    );
    // The delete in flight.
    let (delete, _) = the_txn(&drain(&mut s));
    strays_leave_it_alone(&mut s, 14);
    // The delete failed: waiting to try again.
    io(&mut s, 15, failed(delete));
    let _ = drain(&mut s);
    strays_leave_it_alone(&mut s, 16);
    assert_ne!(next_attempt(&mut s), delete);
}

#[test]
fn a_key_of_ours_recreated_behind_our_back_ends_the_campaign() {
    // Our key deleted and created again (by another process, or a join
    // retried across a compaction): its create revision, our fencing
    // token, is not ours any more.
    let (mut s, stream) = leading_watched();
    let recreated = kv(LEASE, "me", 25);
    io(
        &mut s,
        12,
        Completion::WatchMessage {
            cluster: crate::ClusterId::default(),
            stream,
            kind: crate::io::MessageKind::Events,
            events: vec![WatchEvent::Put {
                kv: recreated,
                prev: None,
            }],
            revision: Revision(25),
        },
    );
    assert_eq!(
        election_events(&drain(&mut s), 1),
        vec![ElectionEvent::Lost {
            reason: Loss::KeyDeleted
        }]
    );
    assert_eq!(s.standing(ElectionId(1)), Standing::Done);
}

/// A leader (token 20) whose proclaim (deadline t = 2016) is in flight
/// when it resigns at t = 17: returns the session and the delete sent.
fn resigning_with_a_proclaim_in_flight() -> (Session, OpId, OpId) {
    let mut s = leading();
    let (proclaim, _) = the_txn(&proclaim(&mut s, 16, 7, "v2"));
    s.handle(t(17), Input::Leave { id: ElectionId(1) }).unwrap();
    let (delete, _) = the_txn(&drain(&mut s));
    (s, proclaim, delete)
}

/// The proclaim's deadline passes: it is answered unknown, and nothing
/// else happens to the leave.
fn proclaim_times_out(s: &mut Session, proclaim: OpId) {
    assert_eq!(s.poll_timeout(), Some(t(2016)));
    s.handle(t(2016), Input::Timeout).unwrap();
    let out = drain(s);
    assert_eq!(
        commands(&out),
        vec![Command::Abandon { op: proclaim }],
        "{out:?}"
    );
    assert!(
        matches!(
            election_events(&out, 1)[..],
            [ElectionEvent::Answered { request: 7, .. }]
        ),
        "{out:?}"
    );
}

#[test]
fn a_requests_deadline_leaves_a_leave_in_flight_or_waiting_to_retry_alone() {
    // The delete in flight (deadline t = 2017) is not given up at 2016.
    let (mut s, proclaim, delete) = resigning_with_a_proclaim_in_flight();
    proclaim_times_out(&mut s, proclaim);
    assert_eq!(s.poll_timeout(), Some(t(2017)));
    s.handle(t(2017), Input::Timeout).unwrap();
    assert!(commands(&drain(&mut s)).contains(&Command::Abandon { op: delete }));
    // The delete refused at 1990: its retry (50 ms later at the soonest)
    // is not sent early at 2016.
    let (mut s, proclaim, delete) = resigning_with_a_proclaim_in_flight();
    io(&mut s, 1990, failed(delete));
    let _ = drain(&mut s);
    proclaim_times_out(&mut s, proclaim);
    let retry_at = s.poll_timeout().unwrap();
    assert!(retry_at > t(2016), "{retry_at}");
    assert_ne!(next_attempt(&mut s), delete);
}
