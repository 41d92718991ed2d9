//! A campaign's waits: on the session's timeouts and backoff, cut short
//! when etcd is found back, and across a lost lease.

use super::*;

#[test]
fn a_campaign_watches_its_queue_on_the_sessions_timeouts_and_backoff() {
    // None is the default: a 2 s request timeout, a quiet stream probed
    // after 1 s, and plain pacing from 700 ms (a first retry exactly
    // 700 ms after the failure).
    let mut c = config();
    c.probe_interval = Duration::from_secs(1);
    c.lease.backoff = crate::backoff::BackoffConfig {
        initial: Duration::from_millis(700),
        ..crate::backoff::BackoffConfig::plain()
    };
    let queued = |c: SessionConfig| {
        let mut s = session_with(c);
        let (op, _) = the_txn(&campaign(&mut s, 10, 1, Mode::Wait));
        let queue = vec![kv(LeaseId(0x10), "a", 5), kv(LEASE, "me", 20)];
        io(&mut s, 11, joined(op, true, queue, 30));
        let (stream, _) = the_watch(&drain(&mut s));
        (s, stream)
    };
    // Confirmed, the stream is probed once quiet for the probe interval
    // (before the lease's next keep-alive, 3 s after t=3).
    let (mut s, stream) = queued(c.clone());
    io(&mut s, 12, created(stream, 30));
    let _ = drain(&mut s);
    assert_eq!(s.poll_timeout(), Some(t(1012)));
    let (mut s, stream) = queued(c);
    // The watch's creation must be confirmed within the request timeout
    // (the lease's next keep-alive is later: refresh 3 s after t=3).
    assert_eq!(s.poll_timeout(), Some(t(2011)));
    s.handle(t(2011), Input::Timeout).unwrap();
    let out = drain(&mut s);
    assert!(
        commands(&out).contains(&Command::CancelWatch { stream }),
        "{out:?}"
    );
    // Unconfirmed: retried after the session's backoff, and the campaign
    // says so.
    assert!(
        matches!(
            election_events(&out, 1)[..],
            [ElectionEvent::Retrying(Retry { attempt: 1, .. })]
        ),
        "{out:?}"
    );
    assert_eq!(s.poll_timeout(), Some(t(2711)));
}

/// The session's config with slow failures waited out for 10-20 s (a 20 s
/// ceiling, equal jitter): far longer than a wait cut short by etcd's
/// return (half the 1 s fast cap at most).
fn slow_backoff() -> SessionConfig {
    let mut c = config();
    c.lease.backoff = crate::backoff::BackoffConfig {
        initial: Duration::from_secs(20),
        cap: Duration::from_secs(20),
        ..crate::backoff::BackoffConfig::default()
    };
    c
}

/// Steps `s` through its deadlines up to `by` (ms); true once a command
/// `wanted` accepts is sent.
fn sends_by(s: &mut Session, by: u64, wanted: impl Fn(&Command) -> bool) -> bool {
    for _ in 0..1000 {
        let Some(at) = s.poll_timeout().filter(|at| *at <= t(by)) else {
            return false;
        };
        s.handle(at, Input::Timeout).unwrap();
        if commands(&drain(s)).iter().any(&wanted) {
            return true;
        }
    }
    false
}

fn is_txn(c: &Command) -> bool {
    matches!(c, Command::Txn { .. })
}

/// etcd found back (a probe sent at t=2050 answered at t=2100).
fn etcd_returns(s: &mut Session) {
    s.handle(
        t(2100),
        Input::Returned {
            probe_sent: t(2050),
        },
    )
    .unwrap();
}

#[test]
fn etcd_found_back_cuts_a_campaigns_waits_to_rejoin_to_leave_and_to_watch_again() {
    // A join unanswered by its deadline (t=2010) waits 10-20 s to join
    // again; etcd's return cuts the wait to at most 500 ms.
    let mut s = session_with(slow_backoff());
    let (join, _) = the_txn(&campaign(&mut s, 10, 1, Mode::Wait));
    s.handle(t(2010), Input::Timeout).unwrap();
    assert!(commands(&drain(&mut s)).contains(&Command::Abandon { op: join }));
    assert!(!sends_by(&mut s, 2099, is_txn), "joined again at once");
    etcd_returns(&mut s);
    assert!(sends_by(&mut s, 2600, is_txn), "no join by t=2600");

    // A leave unanswered by its deadline (t=2012) likewise.
    let mut s = session_with(slow_backoff());
    let (op, _) = the_txn(&campaign(&mut s, 10, 1, Mode::Wait));
    io(&mut s, 11, joined(op, true, vec![kv(LEASE, "me", 20)], 20));
    let (stream, _) = the_watch(&drain(&mut s));
    io(&mut s, 11, created(stream, 20));
    s.handle(t(12), Input::Leave { id: ElectionId(1) }).unwrap();
    let _ = the_txn(&drain(&mut s));
    s.handle(t(2012), Input::Timeout).unwrap();
    let _ = drain(&mut s);
    assert!(!sends_by(&mut s, 2099, is_txn), "left again at once");
    etcd_returns(&mut s);
    assert!(sends_by(&mut s, 2600, is_txn), "no leave by t=2600");

    // A queue watch never confirmed (its deadline t=2011) is watched again
    // after 10-20 s; etcd's return cuts that wait too.
    let mut s = session_with(slow_backoff());
    let (op, _) = the_txn(&campaign(&mut s, 10, 1, Mode::Wait));
    let queue = vec![kv(LeaseId(0x10), "a", 5), kv(LEASE, "me", 20)];
    io(&mut s, 11, joined(op, true, queue, 30));
    let _ = the_watch(&drain(&mut s));
    s.handle(t(2011), Input::Timeout).unwrap();
    let _ = drain(&mut s);
    // (It reads back its own key, then watches again.)
    let reads_queue = |c: &Command| match c {
        Command::Watch { key, .. } => key.0.starts_with(NAME),
        Command::Range { request, .. } => request.get.key.0.starts_with(NAME),
        _ => false,
    };
    assert!(!sends_by(&mut s, 2099, reads_queue), "read again at once");
    etcd_returns(&mut s);
    assert!(
        sends_by(&mut s, 2600, reads_queue),
        "queue not read again by t=2600"
    );
}

#[test]
fn a_campaign_waits_on_etcd_and_counts_silences_only_while_its_queue_is_unsettled() {
    let mut s = session();
    assert!(!s.awaits_etcd(), "a held lease, nothing to do");
    let (op, _) = the_txn(&campaign(&mut s, 10, 1, Mode::Wait));
    assert!(s.awaits_etcd(), "joining");
    let queue = vec![kv(LeaseId(0x10), "a", 5), kv(LEASE, "me", 20)];
    io(&mut s, 11, joined(op, true, queue, 30));
    let (stream, _) = the_watch(&drain(&mut s));
    assert!(!s.awaits_etcd(), "queued, its watch on the way");
    assert_eq!(s.silences(), 0);
    // The watch's creation unconfirmed by its deadline: a silence, and the
    // queue's mirror waits to watch again.
    s.handle(t(2011), Input::Timeout).unwrap();
    assert!(commands(&drain(&mut s)).contains(&Command::CancelWatch { stream }));
    // Nothing more is routed to a stream given up (a pool's routes stay
    // as many as its live requests).
    assert!(!s.routes.contains_key(&stream));
    assert!(s.awaits_etcd(), "the queue's mirror waits to watch again");
    assert_eq!(s.silences(), 1);
}

#[test]
fn answers_reach_a_live_campaign_after_another_ended_and_an_answered_op_is_forgotten() {
    let mut s = session();
    let (join, _) = the_txn(&campaign(&mut s, 10, 1, Mode::Wait));
    // A try on another name, lost at once: it ends, its routes with it.
    let other = Key(b"/f/".to_vec());
    s.handle(
        t(10),
        Input::Campaign {
            id: ElectionId(2),
            name: other.clone(),
            value: b"me".to_vec(),
            mode: Mode::Try,
        },
    )
    .unwrap();
    let (tried, _) = the_txn(&drain(&mut s));
    let holder = KeyValue {
        key: crate::election::candidate_key(&other, LeaseId(0x10)),
        ..kv(LeaseId(0x10), "a", 5)
    };
    io(&mut s, 11, joined(tried, false, vec![holder], 25));
    let _ = drain(&mut s);
    assert_eq!(s.elections(), 1);
    // The first campaign's join is still answered to it.
    io(
        &mut s,
        12,
        joined(join, true, vec![kv(LEASE, "me", 26)], 26),
    );
    assert_eq!(
        election_events(&drain(&mut s), 1),
        vec![ElectionEvent::Elected {
            key: key_of(LEASE),
            lease: LEASE,
            token: FencingToken(26)
        }]
    );
    assert!(
        !s.routes.contains_key(&join),
        "an answered join is forgotten"
    );
}

/// A session holding LEASE with campaign 1 (waiting) whose join went
/// unanswered by its deadline: it waits to join again.
fn rejoining() -> Session {
    let mut s = session();
    let (join, _) = the_txn(&campaign(&mut s, 10, 1, Mode::Wait));
    s.handle(t(2010), Input::Timeout).unwrap();
    assert!(commands(&drain(&mut s)).contains(&Command::Abandon { op: join }));
    s
}

#[test]
fn a_campaign_not_queued_yet_waits_out_a_lost_lease_but_not_a_closed_session() {
    // Waiting to join again when the lease is lost: it waits for the next
    // lease, and says nothing.
    let mut s = rejoining();
    let out = lease_gone(&mut s, 2100);
    assert!(election_events(&out, 1).is_empty(), "{out:?}");
    assert_eq!(s.standing(ElectionId(1)), Standing::Pending);
    // The same for a campaign waiting for an earlier one on its name to
    // be left: it waits out the lost lease, then joins with the next.
    let mut s = leading();
    s.handle(t(12), Input::Leave { id: ElectionId(1) }).unwrap();
    let _ = drain(&mut s);
    let _ = campaign(&mut s, 13, 2, Mode::Wait);
    assert_eq!(s.standing(ElectionId(2)), Standing::Pending);
    let out = lease_gone(&mut s, 14);
    assert!(election_events(&out, 2).is_empty(), "{out:?}");
    assert_eq!(s.standing(ElectionId(2)), Standing::Pending);
    reregister(&mut s, LEASE2);
    let (_, txn) = the_txn(&drain(&mut s));
    assert!(
        matches!(&txn.success[0], TxnOp::Put { lease: LEASE2, .. }),
        "{txn:?}"
    );
    // The session closes instead: it is lost.
    let mut s = rejoining();
    s.handle(t(2100), Input::Close).unwrap();
    assert_eq!(
        election_events(&drain(&mut s), 1),
        vec![ElectionEvent::Lost {
            reason: Loss::SessionClosed
        }]
    );
    // Waiting for a first lease when the session closes: lost too.
    let mut s = Session::new(config()).unwrap();
    s.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut s);
    let _ = campaign(&mut s, 0, 1, Mode::Wait);
    assert_eq!(s.standing(ElectionId(1)), Standing::Pending);
    s.handle(t(1), Input::Close).unwrap();
    assert_eq!(
        election_events(&drain(&mut s), 1),
        vec![ElectionEvent::Lost {
            reason: Loss::SessionClosed
        }]
    );
}
