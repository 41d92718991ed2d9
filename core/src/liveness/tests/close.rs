//! Liveness tests of close: revokes, their retries, and what is reported.

use super::*;

#[test]
fn stop_while_held_revokes_and_is_idempotent() {
    let mut m = registered(StartPolicy::FailFast);
    m.handle(t(10), Input::Close).unwrap();
    assert_eq!(
        drain(&mut m),
        vec![
            cmd(Command::CloseKeepAlive { stream: OpId(3) }),
            cmd(Command::Revoke {
                op: OpId(4),
                lease: LEASE
            })
        ]
    );
    assert_eq!(m.state(), LivenessState::Closing);
    m.handle(t(11), Input::Close).unwrap();
    assert!(drain(&mut m).is_empty());
    ok(&mut m, 12, 4, Reply::Done);
    assert_eq!(
        drain(&mut m),
        vec![ev(Event::Closed {
            revoke: RevokeOutcome::Revoked(LEASE)
        })]
    );
    m.handle(t(13), Input::Close).unwrap();
    reply(&mut m, 13, 3, 9);
    assert!(drain(&mut m).is_empty());
    assert!(m.is_closed());
}

#[test]
fn stop_with_unreachable_etcd_reports_not_confirmed_at_the_deadline() {
    let mut m = registered(StartPolicy::FailFast);
    m.handle(t(10), Input::Close).unwrap();
    let _ = drain(&mut m);
    assert_eq!(m.poll_timeout(), Some(t(2010)));
    m.handle(t(2010), Input::Timeout).unwrap();
    assert_eq!(
        drain(&mut m),
        vec![
            cmd(Command::Abandon { op: OpId(4) }),
            ev(Event::Closed {
                revoke: RevokeOutcome::NotConfirmed(LEASE)
            })
        ]
    );
}

#[test]
fn stop_during_grant_revokes_the_late_lease() {
    let mut m = Liveness::new(config(StartPolicy::FailFast)).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut m);
    m.handle(t(1), Input::Close).unwrap();
    assert!(drain(&mut m).is_empty());
    ok(&mut m, 2, 1, granted(LEASE));
    assert_eq!(
        drain(&mut m),
        vec![cmd(Command::Revoke {
            op: OpId(2),
            lease: LEASE
        })]
    );
    ok(&mut m, 3, 2, Reply::Done);
    assert_eq!(
        drain(&mut m),
        vec![ev(Event::Closed {
            revoke: RevokeOutcome::Revoked(LEASE)
        })]
    );
}

#[test]
fn stop_while_healing_revokes_the_resumable_lease() {
    let mut m = registered(StartPolicy::FailFast);
    let lost_at = lose_by_silence(&mut m);
    let b = m.last_op();
    m.handle(t(lost_at + 1), Input::Close).unwrap();
    assert_eq!(
        drain(&mut m),
        vec![cmd(Command::Revoke {
            op: OpId(b + 1),
            lease: LEASE
        })]
    );
    m.handle(
        t(lost_at + 2),
        completed(OpId(b + 1), Outcome::Err(Failure::LeaseNotFound)),
    )
    .unwrap();
    assert_eq!(
        drain(&mut m),
        vec![ev(Event::Closed {
            revoke: RevokeOutcome::Revoked(LEASE)
        })]
    );
}

#[test]
fn stream_closing_during_resume_put_fails_the_attempt() {
    let mut m = registered(StartPolicy::FailFast);
    lose_by_silence(&mut m);
    let b = m.last_op();
    let at = fire(&mut m);
    let _ = drain(&mut m);
    reply(&mut m, at + 1, b + 1, 9);
    assert_eq!(drain(&mut m), vec![put(b + 2, LEASE)]);
    closed(&mut m, at + 2, b + 1, Failure::StreamClosed("again".into()));
    let out = drain(&mut m);
    assert_eq!(out[0], cmd(Command::Abandon { op: OpId(b + 2) }));
    assert_eq!(
        out[1],
        cmd(Command::CloseKeepAlive {
            stream: OpId(b + 1)
        })
    );
    assert!(matches!(
        out[2],
        Output::Event(Event::Retrying(Retry { .. }))
    ));
    // Still resumable: the next attempt reopens the same lease.
    fire(&mut m);
    assert_eq!(
        drain(&mut m),
        vec![cmd(Command::OpenKeepAlive {
            op: OpId(b + 3),
            lease: LEASE
        })]
    );
}

#[test]
fn misuse_and_bad_configs_are_typed_errors() {
    let mut m = Liveness::new(config(StartPolicy::FailFast)).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    assert_eq!(
        m.handle(t(0), Input::Start),
        Err(StartError::AlreadyStarted)
    );
    let mut c = config(StartPolicy::FailFast);
    c.lease.ttl = Duration::from_millis(500);
    assert!(matches!(
        Liveness::new(c).err(),
        Some(ConfigError::TtlOutOfRange(_))
    ));
    let mut c = config(StartPolicy::FailFast);
    c.lease.ttl = Duration::from_secs(86_401);
    assert!(matches!(
        Liveness::new(c).err(),
        Some(ConfigError::TtlOutOfRange(_))
    ));
    let mut c = config(StartPolicy::FailFast);
    c.lease.refresh = c.lease.ttl;
    assert!(matches!(
        Liveness::new(c).err(),
        Some(ConfigError::RefreshOutOfRange { .. })
    ));
    let mut c = config(StartPolicy::FailFast);
    c.key = Key(Vec::new());
    assert_eq!(Liveness::new(c).err(), Some(ConfigError::EmptyKey));
    // Stop before start: nothing to revoke, stopped at once.
    let mut m = Liveness::new(config(StartPolicy::FailFast)).unwrap();
    m.handle(t(0), Input::Close).unwrap();
    assert_eq!(
        drain(&mut m),
        vec![ev(Event::Closed {
            revoke: RevokeOutcome::NothingToRevoke
        })]
    );
}

#[test]
fn every_limit_is_allowed_and_a_step_beyond_refused() {
    let ms = Duration::from_millis;
    let check = |change: &dyn Fn(&mut LivenessConfig), want: Option<ConfigError>| {
        let mut c = config(StartPolicy::FailFast);
        change(&mut c);
        assert_eq!(c.validate().err(), want, "{c:?}");
        assert_eq!(Liveness::new(c).err(), want);
    };
    // TTL: 1 s to one day.
    check(
        &|c| {
            c.lease.ttl = ms(1_000);
            c.lease.refresh = ms(300);
        },
        None,
    );
    check(
        &|c| {
            c.lease.ttl = ms(999);
            c.lease.refresh = ms(10);
        },
        Some(ConfigError::TtlOutOfRange(ms(999))),
    );
    check(&|c| c.lease.ttl = ms(86_400_000), None);
    check(
        &|c| c.lease.ttl = ms(86_400_001),
        Some(ConfigError::TtlOutOfRange(ms(86_400_001))),
    );
    // Refresh: 10 ms to just below the TTL.
    check(&|c| c.lease.refresh = ms(10), None);
    let refresh = |refresh| ConfigError::RefreshOutOfRange {
        refresh,
        ttl: config(StartPolicy::FailFast).lease.ttl,
    };
    check(&|c| c.lease.refresh = ms(9), Some(refresh(ms(9))));
    check(&|c| c.lease.refresh = c.lease.ttl - ms(1), None);
    let ttl = config(StartPolicy::FailFast).lease.ttl;
    check(&|c| c.lease.refresh = c.lease.ttl, Some(refresh(ttl)));
    // Request timeout: 10 ms to 5 minutes.
    check(&|c| c.lease.request_timeout = ms(10), None);
    check(
        &|c| c.lease.request_timeout = ms(9),
        Some(ConfigError::RequestTimeoutOutOfRange(ms(9))),
    );
    check(&|c| c.lease.request_timeout = ms(300_000), None);
    check(
        &|c| c.lease.request_timeout = ms(300_001),
        Some(ConfigError::RequestTimeoutOutOfRange(ms(300_001))),
    );
}

#[test]
fn ttl_is_asked_in_whole_seconds_rounding_up() {
    let mut c = config(StartPolicy::FailFast);
    c.lease.ttl = Duration::from_millis(2500);
    c.lease.refresh = Duration::from_millis(800);
    let mut m = Liveness::new(c).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    assert_eq!(
        drain(&mut m),
        vec![cmd(Command::Grant {
            op: OpId(1),
            ttl_secs: 3
        })]
    );
}

#[test]
fn stop_retries_a_failed_revoke_until_it_is_confirmed() {
    let mut m = registered(StartPolicy::FailFast);
    m.handle(t(10), Input::Close).unwrap();
    let _ = drain(&mut m);
    m.handle(
        t(11),
        completed(
            OpId(4),
            Outcome::Err(Failure::Unavailable("one member down".into())),
        ),
    )
    .unwrap();
    assert!(drain(&mut m).is_empty(), "no verdict yet");
    assert_eq!(m.state(), LivenessState::Closing);
    let retry_at = m.poll_timeout().unwrap();
    assert_eq!(retry_at, t(11) + crate::lease::RETRY);
    m.handle(retry_at, Input::Timeout).unwrap();
    assert_eq!(
        drain(&mut m),
        vec![cmd(Command::Revoke {
            op: OpId(5),
            lease: LEASE
        })]
    );
    // The failed try's late completion changes nothing.
    ok(&mut m, retry_at.as_millis() + 1, 4, Reply::Done);
    assert!(drain(&mut m).is_empty());
    ok(&mut m, retry_at.as_millis() + 2, 5, Reply::Done);
    assert_eq!(
        drain(&mut m),
        vec![ev(Event::Closed {
            revoke: RevokeOutcome::Revoked(LEASE)
        })]
    );
}

#[test]
fn stop_gives_up_retrying_at_its_deadline() {
    let mut m = registered(StartPolicy::FailFast);
    m.handle(t(10), Input::Close).unwrap();
    let _ = drain(&mut m);
    let mut op = 4;
    let mut now = 10;
    loop {
        m.handle(t(now + 1), completed(OpId(op), Outcome::Unknown))
            .unwrap();
        assert!(drain(&mut m).is_empty());
        now = fire(&mut m);
        let out = drain(&mut m);
        if now >= 2010 {
            assert_eq!(
                out,
                vec![ev(Event::Closed {
                    revoke: RevokeOutcome::NotConfirmed(LEASE)
                })]
            );
            break;
        }
        op += 1;
        assert_eq!(
            out,
            vec![cmd(Command::Revoke {
                op: OpId(op),
                lease: LEASE
            })]
        );
    }
    assert!(m.is_closed());
}

/// Seed 200489 of the simulator: a partial registration's revoke was lost
/// (a partition), and a later stop reported NothingToRevoke while that
/// lease, with the key on it, lived on.
#[test]
fn a_partial_lease_whose_revoke_was_lost_is_retried_and_revoked_by_stop() {
    let mut m = Liveness::new(config(StartPolicy::Retry)).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut m);
    ok(&mut m, 1, 1, granted(LEASE));
    let _ = drain(&mut m);
    ok(&mut m, 2, 2, Reply::Done);
    // The keep-alive open gets no answer: the attempt fails and the
    // partial lease (the key is on it) must be revoked.
    let _ = drain(&mut m);
    m.handle(t(2002), Input::Timeout).unwrap();
    let out = drain(&mut m);
    assert!(out.contains(&cmd(Command::Revoke {
        op: OpId(4),
        lease: LEASE
    })));
    // That revoke is lost too: past its deadline it is tried again...
    let next = m.poll_timeout().unwrap();
    assert!(next <= t(4002), "{next}");
    m.handle(t(4002), Input::Timeout).unwrap();
    let out = drain(&mut m);
    assert!(
        out.contains(&cmd(Command::Abandon { op: OpId(4) })),
        "{out:?}"
    );
    let retry = out
        .iter()
        .find_map(|o| match o {
            Output::Command(Command::Revoke { op, lease }) if *lease == LEASE => Some(*op),
            _ => None,
        })
        .expect("the orphan's revoke is retried");
    // Meanwhile the next registration attempt started.
    let grant = out
        .iter()
        .find_map(|o| match o {
            Output::Command(Command::Grant { op, .. }) => Some(*op),
            _ => None,
        })
        .expect("a new attempt");
    // ...and stop, which finds no registration, still revokes it.
    m.handle(t(4003), Input::Close).unwrap();
    let out = drain(&mut m);
    let stop_revoke = out
        .iter()
        .find_map(|o| match o {
            Output::Command(Command::Revoke { op, lease }) if *lease == LEASE => Some(*op),
            _ => None,
        })
        .expect("stop revokes the orphan");
    assert!(out.contains(&cmd(Command::Abandon { op: retry })));
    assert_eq!(m.state(), LivenessState::Closing);
    // Stop also waits for the grant in flight (it would revoke its lease).
    m.handle(
        t(4004),
        completed(grant, Outcome::Err(Failure::Unavailable("refused".into()))),
    )
    .unwrap();
    assert!(drain(&mut m).is_empty());
    ok(&mut m, 4004, stop_revoke.0, Reply::Done);
    assert_eq!(
        drain(&mut m),
        vec![ev(Event::Closed {
            revoke: RevokeOutcome::Revoked(LEASE)
        })]
    );
    // Unconfirmed instead: stop says so, naming the lease.
    let mut m = Liveness::new(config(StartPolicy::Retry)).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut m);
    ok(&mut m, 1, 1, granted(LEASE));
    ok(&mut m, 2, 2, Reply::Done);
    let _ = drain(&mut m);
    m.handle(t(2002), Input::Timeout).unwrap();
    let _ = drain(&mut m);
    m.handle(t(2003), Input::Close).unwrap();
    let _ = drain(&mut m);
    m.handle(t(4003), Input::Timeout).unwrap();
    let out = drain(&mut m);
    assert_eq!(
        out.last(),
        Some(&ev(Event::Closed {
            revoke: RevokeOutcome::NotConfirmed(LEASE)
        }))
    );
}

#[test]
fn close_abandons_a_grant_that_timed_out_and_may_yet_be_answered() {
    let mut m = Liveness::new(config(StartPolicy::Retry)).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut m);
    // The grant (op 1) times out; its answer may still come, and its
    // lease would then be revoked, until a TTL has passed.
    m.handle(t(2000), Input::Timeout).unwrap();
    let _ = drain(&mut m);
    // Close does not wait for it: the driver is told to stop waiting.
    m.handle(t(2001), Input::Close).unwrap();
    let out = drain(&mut m);
    assert!(
        out.contains(&cmd(Command::Abandon { op: OpId(1) })),
        "{out:?}"
    );
    assert!(m.is_closed(), "nothing left to revoke: {out:?}");
}
