//! etcd found back after a silence: a listing sent in it given up, a
//! quiet watch probed at once, another cluster checked at the first
//! attempt's pace.

use super::*;

#[test]
fn etcd_returning_gives_up_a_listing_sent_in_the_silence_and_cuts_the_wait() {
    let mut m = Watcher::new(config(StartPolicy::Retry)).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    drain(&mut m);
    assert!(m.awaits_etcd(), "a listing in flight waits on etcd");
    // Unanswered listings back off, longer each time.
    let mut now = 0;
    for _ in 0..6 {
        now += 2_000;
        m.handle(t(now), Input::Timeout).unwrap();
        drain(&mut m);
        let at = m.poll_timeout().unwrap();
        now = at.as_millis();
        m.handle(at, Input::Timeout).unwrap();
        drain(&mut m);
    }
    // The seventh listing went out at `now`; a probe sent 500 ms later
    // found etcd back: the listing is given up at once and the retry waits
    // half a second at most, not the grown backoff.
    let back = now + 600;
    m.handle(
        t(back),
        Input::Returned {
            probe_sent: t(now + 500),
        },
    )
    .unwrap();
    let out = drain(&mut m);
    assert!(
        matches!(out.first(), Some(Output::Command(Command::Abandon { .. }))),
        "{out:?}"
    );
    assert!(out.iter().any(is_retrying), "{out:?}");
    let at = m.poll_timeout().unwrap();
    assert!(at <= t(back + 500), "retry at {at}, returned at {back}");
    // A listing sent after the probe is kept.
    m.handle(at, Input::Timeout).unwrap();
    drain(&mut m);
    let deadline = m.poll_timeout().unwrap();
    m.handle(
        t(at.as_millis() + 10),
        Input::Returned {
            probe_sent: t(at.as_millis() - 1),
        },
    )
    .unwrap();
    assert_eq!(drain(&mut m), vec![]);
    assert_eq!(m.poll_timeout(), Some(deadline));
}

#[test]
fn etcd_returning_probes_a_quiet_watch_at_once() {
    let mut m = watching_a();
    header(&mut m, 5, 2, MessageKind::Created, 10, A);
    assert!(!m.awaits_etcd());
    m.handle(t(100), Input::Returned { probe_sent: t(90) })
        .unwrap();
    assert_eq!(
        drain(&mut m),
        vec![cmd(Command::RequestProgress { stream: OpId(2) })]
    );
}

/// The retry announced in `out`.
fn retrying(out: &[Output]) -> crate::outcome::Retry {
    match out.iter().find(|o| is_retrying(o)) {
        Some(Output::Event(Event::Retrying(r))) => r.clone(),
        _ => panic!("no retry announced: {out:?}"),
    }
}

#[test]
fn a_watch_answered_by_another_cluster_after_an_outage_is_checked_at_the_first_attempts_pace() {
    // Seed 9762455: etcd wiped; the watcher's attempts were refused five
    // times (the backoff grew to the fast cap), then the new cluster
    // answered its watch. The check waited out attempt 6's delay (940 ms)
    // before listing, leaving the view without a host etcd held for over
    // 1 s.
    let mut m = watching_a();
    let no_leader = || Failure::Unavailable("etcdserver: no leader".into());
    let _ = stream_closed(&mut m, 100, 2, no_leader());
    // Each retry reads the view back first; refused four more times.
    let mut sent = after_retry(&mut m);
    for k in 0..4 {
        let Some(Output::Command(Command::Range { op, .. })) = sent.last() else {
            panic!("a retry reads the view back: {sent:?}");
        };
        let at = m.poll_timeout().expect("the read's deadline");
        failed(&mut m, at.as_millis() - 1, op.0, no_leader());
        assert_eq!(retrying(&drain(&mut m)).attempt, k + 2, "the backoff grows");
        sent = after_retry(&mut m);
    }
    // etcd answers the read back as it was, then its watch as another
    // cluster (wiped just between).
    let Some(Output::Command(Command::Range { op, .. })) = sent.last() else {
        panic!("a retry reads the view back: {sent:?}");
    };
    let now = m.poll_timeout().expect("the read's deadline").as_millis() - 1;
    page(&mut m, now, op.0, vec![kv("b", "B", 4, 8)], 10, false, A);
    let sent = drain(&mut m);
    let Some(Output::Command(Command::Watch { op: stream, .. })) = sent.last() else {
        panic!("the same history: the watch resumes: {sent:?}");
    };
    header(&mut m, now + 5, stream.0, MessageKind::Created, 1, B);
    let r = retrying(&drain(&mut m));
    assert_eq!(
        r.attempt, 1,
        "the failures before etcd answered still count"
    );
    let initial = BackoffConfig::default().initial;
    assert!(
        r.next_at <= t(now + 5) + initial,
        "the check waits {:?}",
        r.next_at.saturating_since(t(now + 5))
    );
    assert_eq!(after_retry(&mut m).last(), Some(&lin(stream.0 + 1)));
}
