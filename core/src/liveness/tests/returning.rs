//! etcd found silent and then back: what was sent in the silence, and how
//! a loss near the lease's deadline heals.

use super::*;
use crate::backoff::BackoffConfig;

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
    c.lease.backoff = BackoffConfig::plain();
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
    // Attempts 1-5 were the refusals; the sixth, the reopen at 3.6 s found
    // silent at 7.6 s (its keep-alive unanswered for TTL/3 + 1 s), drew
    // 3.2 s in full, past the deadline: the loss keeps that wait, which
    // coord's pacing would have cut to its 1 s fast cap.
    assert_eq!(lost_at, 9_002);
    assert_eq!(grant_at, 7_600 + 3_200);
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
    c.lease.backoff = crate::backoff::BackoffConfig {
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
    assert_eq!(fire(&mut m), 6002);
    let _ = drain(&mut m);
    assert_eq!(
        m.silences(),
        0,
        "a second keep-alive sent, the first not due"
    );
    // Unanswered for TTL/3 + 1 s (longer than the 2 s request timeout).
    assert_eq!(fire(&mut m), 7002);
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
