//! The election protocol through a session: joining, queueing, trying,
//! leaving, guarded requests, and re-lists of the queue.

use super::*;

#[test]
fn a_first_candidate_joins_in_one_transaction_and_leads() {
    let mut s = session();
    let out = campaign(&mut s, 10, 1, Mode::Wait);
    let (op, txn) = the_txn(&out);
    assert_eq!(
        op.0 >> crate::outbox::SLOT_SHIFT,
        1,
        "campaign ops use slot 1"
    );
    assert!(
        (CAMPAIGN_OPS..2 * CAMPAIGN_OPS).contains(&op.0),
        "and start at CAMPAIGN_OPS"
    );
    // Create the key only if absent (a retry finds its own), and read the
    // queue in the same revision.
    assert_eq!(
        txn.compares,
        vec![Compare::create_revision(
            key_of(LEASE),
            CompareOp::Equal,
            Revision(0)
        )]
    );
    assert_eq!(
        txn.success,
        vec![
            TxnOp::Put {
                key: key_of(LEASE),
                value: b"me".to_vec(),
                lease: LEASE
            },
            TxnOp::Get(Get::prefix(name()))
        ]
    );
    assert_eq!(txn.failure, vec![TxnOp::Get(Get::prefix(name()))]);
    io(&mut s, 11, joined(op, true, vec![kv(LEASE, "me", 20)], 20));
    let out = drain(&mut s);
    assert_eq!(
        election_events(&out, 1),
        vec![ElectionEvent::Elected {
            key: key_of(LEASE),
            lease: LEASE,
            token: FencingToken(20)
        }]
    );
    assert_eq!(the_watch(&out).1, Revision(21));
    assert_eq!(
        s.standing(ElectionId(1)),
        Standing::Leading {
            key: key_of(LEASE),
            token: FencingToken(20)
        }
    );
}

#[test]
fn a_queued_candidate_leads_once_every_predecessor_is_gone() {
    let mut s = session();
    let out = campaign(&mut s, 10, 1, Mode::Wait);
    let (op, _) = the_txn(&out);
    let first = kv(LeaseId(0x10), "a", 5);
    let second = kv(LeaseId(0x11), "b", 8);
    let later = kv(LeaseId(0x12), "c", 30);
    io(
        &mut s,
        11,
        joined(
            op,
            true,
            vec![
                first.clone(),
                second.clone(),
                kv(LEASE, "me", 20),
                later.clone(),
            ],
            30,
        ),
    );
    let out = drain(&mut s);
    assert!(election_events(&out, 1).is_empty(), "{out:?}");
    assert_eq!(
        s.standing(ElectionId(1)),
        Standing::Queued {
            token: FencingToken(20)
        }
    );
    let (stream, from) = the_watch(&out);
    assert_eq!(from, Revision(31));
    // A later candidate leaving changes nothing; the first leaving neither.
    io(&mut s, 12, deleted(stream, later, 31));
    io(&mut s, 13, deleted(stream, first, 32));
    assert!(election_events(&drain(&mut s), 1).is_empty());
    io(&mut s, 14, deleted(stream, second, 33));
    assert_eq!(
        election_events(&drain(&mut s), 1),
        vec![ElectionEvent::Elected {
            key: key_of(LEASE),
            lease: LEASE,
            token: FencingToken(20)
        }]
    );
}

#[test]
fn a_waiter_whose_key_is_deleted_fails_at_once() {
    let mut s = session();
    let (op, _) = the_txn(&campaign(&mut s, 10, 1, Mode::Wait));
    let first = kv(LeaseId(0x10), "a", 5);
    io(
        &mut s,
        11,
        joined(op, true, vec![first, kv(LEASE, "me", 20)], 20),
    );
    let (stream, _) = the_watch(&drain(&mut s));
    io(&mut s, 12, deleted(stream, kv(LEASE, "me", 20), 21));
    let out = drain(&mut s);
    assert_eq!(
        election_events(&out, 1),
        vec![ElectionEvent::Lost {
            reason: Loss::KeyDeleted
        }]
    );
    assert!(commands(&out).contains(&Command::CancelWatch { stream }));
    assert_eq!(s.standing(ElectionId(1)), Standing::Done);
    assert_eq!(s.elections(), 0, "forgotten");
}

#[test]
fn a_try_returns_in_one_round_trip_and_leaves_no_key_when_it_loses() {
    let mut s = session();
    let out = campaign(&mut s, 10, 1, Mode::Try);
    let (op, txn) = the_txn(&out);
    // Create only if nobody at all is queued.
    assert_eq!(
        txn.compares,
        vec![Compare {
            key: name(),
            prefix: true,
            op: CompareOp::Equal,
            target: CompareTarget::CreateRevision(Revision(0)),
        }]
    );
    let leader = kv(LeaseId(0x10), "a", 5);
    io(&mut s, 11, joined(op, false, vec![leader.clone()], 25));
    let out = drain(&mut s);
    assert_eq!(
        election_events(&out, 1),
        vec![ElectionEvent::NotElected {
            leader: Some(leader)
        }]
    );
    assert!(commands(&out).is_empty(), "nothing to delete: {out:?}");
    assert_eq!(s.elections(), 0);
    // A try that finds nobody leads.
    let (op, _) = the_txn(&campaign(&mut s, 12, 2, Mode::Try));
    io(&mut s, 13, joined(op, true, vec![kv(LEASE, "me", 26)], 26));
    assert_eq!(
        election_events(&drain(&mut s), 2),
        vec![ElectionEvent::Elected {
            key: key_of(LEASE),
            lease: LEASE,
            token: FencingToken(26)
        }]
    );
}

#[test]
fn resign_deletes_the_key_only_if_it_is_still_ours() {
    let (mut s, stream) = leading_watched();
    s.handle(t(12), Input::Leave { id: ElectionId(1) }).unwrap();
    let out = drain(&mut s);
    assert!(commands(&out).contains(&Command::CancelWatch { stream }));
    let (op, txn) = the_txn(&out);
    assert_eq!(
        txn,
        Txn {
            compares: vec![Compare::create_revision(
                key_of(LEASE),
                CompareOp::Equal,
                Revision(20)
            )],
            success: vec![TxnOp::Delete { key: key_of(LEASE) }],
            failure: vec![],
        }
    );
    // A leave is idempotent.
    s.handle(t(12), Input::Leave { id: ElectionId(1) }).unwrap();
    assert!(drain(&mut s).is_empty());
    io(
        &mut s,
        13,
        Completion::Txn {
            op,
            outcome: Outcome::Ok(TxnResponse {
                cluster: crate::ClusterId::default(),
                succeeded: true,
                revision: Revision(21),
                responses: vec![TxnOpResponse::Delete { deleted: 1 }],
            }),
        },
    );
    assert_eq!(
        election_events(&drain(&mut s), 1),
        vec![ElectionEvent::Left]
    );
    assert_eq!(s.elections(), 0);
}

#[test]
fn a_campaign_cancelled_while_joining_waits_for_the_join_then_deletes_its_key() {
    // Found by the simulator (quick withdrawals, generator V4): a delete
    // sent while the join was in flight reached etcd first and missed the
    // key the join then created, which stayed in the queue.
    let mut s = session();
    let (op, _) = the_txn(&campaign(&mut s, 10, 1, Mode::Wait));
    s.handle(t(11), Input::Leave { id: ElectionId(1) }).unwrap();
    let out = drain(&mut s);
    assert!(
        commands(&out).is_empty(),
        "nothing sent before the join answers: {out:?}"
    );
    // The join landed: its key is deleted, guarded by its create revision.
    io(&mut s, 12, joined(op, true, vec![kv(LEASE, "me", 20)], 20));
    let (del, txn) = the_txn(&drain(&mut s));
    assert_eq!(
        txn.compares,
        vec![Compare::create_revision(
            key_of(LEASE),
            CompareOp::Equal,
            Revision(20)
        )]
    );
    assert_eq!(txn.success, vec![TxnOp::Delete { key: key_of(LEASE) }]);
    // The delete fails once, then is retried until etcd answers.
    io(
        &mut s,
        13,
        Completion::Txn {
            op: del,
            outcome: Outcome::Err(Failure::Unavailable("no leader".into())),
        },
    );
    let out = drain(&mut s);
    assert!(matches!(
        election_events(&out, 1)[..],
        [ElectionEvent::Retrying(Retry { attempt: 1, .. })]
    ));
    let at = s.poll_timeout().unwrap();
    s.handle(at, Input::Timeout).unwrap();
    let (again, txn2) = the_txn(&drain(&mut s));
    assert_eq!(txn2, txn);
    io(
        &mut s,
        at.as_millis() + 1,
        Completion::Txn {
            op: again,
            outcome: Outcome::Ok(TxnResponse {
                cluster: crate::ClusterId::default(),
                succeeded: true,
                revision: Revision(22),
                responses: vec![TxnOpResponse::Delete { deleted: 1 }],
            }),
        },
    );
    assert_eq!(
        election_events(&drain(&mut s), 1),
        vec![ElectionEvent::Left]
    );

    // A join that definitely failed leaves nothing to delete; one whose
    // outcome stays unknown past its deadline deletes blindly.
    let (op, _) = the_txn(&campaign(&mut s, 20, 2, Mode::Wait));
    s.handle(t(21), Input::Leave { id: ElectionId(2) }).unwrap();
    io(
        &mut s,
        22,
        Completion::Txn {
            op,
            outcome: Outcome::Err(Failure::Unavailable("refused".into())),
        },
    );
    let out = drain(&mut s);
    assert!(commands(&out).is_empty());
    assert_eq!(election_events(&out, 2), vec![ElectionEvent::Left]);
    let (op, _) = the_txn(&campaign(&mut s, 30, 3, Mode::Wait));
    s.handle(t(31), Input::Leave { id: ElectionId(3) }).unwrap();
    let _ = drain(&mut s);
    s.handle(t(2030), Input::Timeout).unwrap();
    let out = drain(&mut s);
    assert!(commands(&out).contains(&Command::Abandon { op }));
    let (_, txn) = the_txn(&out);
    assert_eq!(txn.compares, vec![], "the create revision is unknown");
    assert_eq!(txn.success, vec![TxnOp::Delete { key: key_of(LEASE) }]);
}

#[test]
fn an_unknown_join_is_retried_with_the_same_idempotent_transaction() {
    let mut s = session();
    let (op, txn) = the_txn(&campaign(&mut s, 10, 1, Mode::Wait));
    s.handle(t(2010), Input::Timeout).unwrap();
    let out = drain(&mut s);
    assert!(commands(&out).contains(&Command::Abandon { op }));
    assert!(matches!(
        election_events(&out, 1)[..],
        [ElectionEvent::Retrying(Retry {
            failure: Some(AttemptFailure::Timeout),
            ..
        })]
    ));
    let at = s.poll_timeout().unwrap();
    s.handle(at, Input::Timeout).unwrap();
    let (again, txn2) = the_txn(&drain(&mut s));
    assert_ne!(again, op);
    assert_eq!(txn2, txn);
    // The first attempt had landed: the retry finds the key (else branch).
    io(
        &mut s,
        at.as_millis() + 1,
        joined(again, false, vec![kv(LEASE, "me", 20)], 21),
    );
    assert!(matches!(
        election_events(&drain(&mut s), 1)[..],
        [ElectionEvent::Elected { .. }]
    ));
}

#[test]
fn proclaim_and_transactions_are_guarded_by_the_token() {
    let (mut s, stream, first) = queued_behind_first();
    // Not leading yet: refused at once, nothing sent.
    let out = proclaim(&mut s, 12, 7, "v2");
    assert_eq!(
        election_events(&out, 1),
        vec![ElectionEvent::Answered {
            request: 7,
            answer: Answer::NotLeader
        }]
    );
    assert!(commands(&out).is_empty());
    io(&mut s, 13, deleted(stream, first, 21));
    let _ = drain(&mut s);
    let user = Txn {
        compares: vec![],
        success: vec![TxnOp::Put {
            key: Key(b"/resource".to_vec()),
            value: b"w".to_vec(),
            lease: LeaseId(0),
        }],
        failure: vec![],
    };
    s.handle(
        t(14),
        Input::Txn {
            id: ElectionId(1),
            request: 8,
            txn: user.clone(),
        },
    )
    .unwrap();
    let (op, txn) = the_txn(&drain(&mut s));
    assert_eq!(
        txn,
        Txn {
            compares: vec![Compare::create_revision(
                key_of(LEASE),
                CompareOp::Equal,
                Revision(20)
            )],
            success: vec![TxnOp::Txn(Box::new(user))],
            failure: vec![],
        }
    );
    let inner = TxnResponse {
        cluster: crate::ClusterId::default(),
        succeeded: true,
        revision: Revision(22),
        responses: vec![TxnOpResponse::Put],
    };
    io(
        &mut s,
        15,
        Completion::Txn {
            op,
            outcome: Outcome::Ok(TxnResponse {
                cluster: crate::ClusterId::default(),
                succeeded: true,
                revision: Revision(22),
                responses: vec![TxnOpResponse::Txn(inner.clone())],
            }),
        },
    );
    assert_eq!(
        election_events(&drain(&mut s), 1),
        vec![ElectionEvent::Answered {
            request: 8,
            answer: Answer::Txn(inner)
        }]
    );
    // etcd refuses the guard (the key is gone): NotLeader, and lost.
    let (op, txn) = the_txn(&proclaim(&mut s, 16, 9, "v3"));
    // A proclaim is a put of the value on our key, guarded by the token.
    assert_eq!(
        txn,
        Txn {
            compares: vec![Compare::create_revision(
                key_of(LEASE),
                CompareOp::Equal,
                Revision(20)
            )],
            success: vec![TxnOp::Put {
                key: key_of(LEASE),
                value: b"v3".to_vec(),
                lease: LEASE
            }],
            failure: vec![],
        }
    );
    io(
        &mut s,
        17,
        Completion::Txn {
            op,
            outcome: Outcome::Ok(TxnResponse {
                cluster: crate::ClusterId::default(),
                succeeded: false,
                revision: Revision(23),
                responses: vec![],
            }),
        },
    );
    let evs = election_events(&drain(&mut s), 1);
    assert!(evs.contains(&ElectionEvent::Answered {
        request: 9,
        answer: Answer::NotLeader
    }));
    assert!(evs.contains(&ElectionEvent::Lost {
        reason: Loss::KeyDeleted
    }));
}

#[test]
fn a_predecessor_found_recreated_by_a_relist_no_longer_blocks_the_queue() {
    // Found by the simulator (seed 20702, generator V4): the leader resigned
    // and joined again with the same key, value and lease while a waiter's
    // queue watch was being re-listed after a compaction. The re-list saw
    // the key with a new create revision; the mirror took it for an
    // identical re-put, kept the old create revision, and the waiter
    // waited forever behind a phantom predecessor (with the new candidate
    // queued behind it: a deadlock).
    let (mut s, stream, first) = queued_behind_first();
    io(
        &mut s,
        12,
        Completion::WatchClosed {
            stream,
            failure: Failure::Compacted(25),
        },
    );
    let relist = commands(&drain(&mut s))
        .into_iter()
        .find_map(|c| match c {
            Command::Range { op, .. } => Some(op),
            _ => None,
        })
        .expect("a re-list");
    let again = KeyValue {
        create_revision: Revision(30),
        mod_revision: Revision(30),
        ..first
    };
    io(
        &mut s,
        13,
        Completion::Listed {
            op: relist,
            outcome: Outcome::Ok(crate::io::Listing {
                cluster: crate::ClusterId::default(),
                more: false,
                count: 2,
                kvs: vec![again, kv(LEASE, "me", 20)],
                revision: Revision(31),
            }),
        },
    );
    assert_eq!(
        election_events(&drain(&mut s), 1),
        vec![ElectionEvent::Elected {
            key: key_of(LEASE),
            lease: LEASE,
            token: FencingToken(20)
        }]
    );
}

#[test]
fn a_leader_is_not_silently_demoted_by_a_key_older_than_its_own() {
    // Found by libFuzzer (fuzz/seeds/session/regression-leader-demoted-by-
    // older-key): a watch showed a key whose create revision was below the
    // leader's token. etcd cannot do that (create revisions only grow), but
    // the machine flipped Leading to Queued without an event, so its caller
    // went on believing it led while `standing` said it did not. Leadership
    // now ends only with the leader's own key.
    let (mut s, stream) = leading_watched();
    let leading = Standing::Leading {
        key: key_of(LEASE),
        token: FencingToken(20),
    };
    assert_eq!(s.standing(ElectionId(1)), leading);
    let older = KeyValue {
        mod_revision: Revision(25),
        ..kv(LeaseId(0x10), "impossible", 7)
    };
    io(
        &mut s,
        12,
        Completion::WatchMessage {
            cluster: crate::ClusterId::default(),
            stream,
            kind: crate::io::MessageKind::Events,
            events: vec![WatchEvent::Put {
                kv: older,
                prev: None,
            }],
            revision: Revision(25),
        },
    );
    assert!(election_events(&drain(&mut s), 1).is_empty());
    assert_eq!(s.standing(ElectionId(1)), leading, "still leading");
    // Its own key going still ends it, once.
    io(&mut s, 13, deleted(stream, kv(LEASE, "me", 20), 26));
    assert_eq!(
        election_events(&drain(&mut s), 1),
        vec![ElectionEvent::Lost {
            reason: Loss::KeyDeleted
        }]
    );
}

#[test]
fn a_losing_try_that_finds_a_stale_key_of_its_own_ends_once_and_cleans_up_quietly() {
    // Found by the session fuzz smoke: the campaign said NotElected, then
    // Left once its cleanup finished: two endings for one campaign.
    let mut s = session();
    let (op, _) = the_txn(&campaign(&mut s, 10, 1, Mode::Try));
    let leader = kv(LeaseId(0x10), "a", 5);
    // Someone leads; a key of ours (an earlier attempt's) queues behind.
    io(
        &mut s,
        11,
        joined(op, false, vec![leader.clone(), kv(LEASE, "me", 20)], 25),
    );
    let out = drain(&mut s);
    assert_eq!(
        election_events(&out, 1),
        vec![ElectionEvent::NotElected {
            leader: Some(leader)
        }]
    );
    let (del, txn) = the_txn(&out);
    assert_eq!(
        txn.compares,
        vec![Compare::create_revision(
            key_of(LEASE),
            CompareOp::Equal,
            Revision(20)
        )]
    );
    io(
        &mut s,
        12,
        Completion::Txn {
            op: del,
            outcome: Outcome::Ok(TxnResponse {
                cluster: crate::ClusterId::default(),
                succeeded: true,
                revision: Revision(26),
                responses: vec![TxnOpResponse::Delete { deleted: 1 }],
            }),
        },
    );
    assert!(
        election_events(&drain(&mut s), 1).is_empty(),
        "no second ending"
    );
    assert_eq!(s.elections(), 0);
}

#[test]
fn a_campaign_on_a_name_still_being_left_waits_for_the_leave() {
    // A user drops a campaign and campaigns again at once: the new one
    // waits for the old key's delete instead of failing.
    let mut s = leading();
    s.handle(t(12), Input::Leave { id: ElectionId(1) }).unwrap();
    let (del, _) = the_txn(&drain(&mut s));
    let out = campaign(&mut s, 13, 2, Mode::Wait);
    assert!(commands(&out).is_empty(), "waits: {out:?}");
    assert_eq!(s.standing(ElectionId(2)), Standing::Pending);
    io(
        &mut s,
        14,
        Completion::Txn {
            op: del,
            outcome: Outcome::Ok(TxnResponse {
                cluster: crate::ClusterId::default(),
                succeeded: true,
                revision: Revision(21),
                responses: vec![TxnOpResponse::Delete { deleted: 1 }],
            }),
        },
    );
    let out = drain(&mut s);
    assert_eq!(election_events(&out, 1), vec![ElectionEvent::Left]);
    let (_, txn) = the_txn(&out);
    assert_eq!(
        txn.compares,
        vec![Compare::create_revision(
            key_of(LEASE),
            CompareOp::Equal,
            Revision(0)
        )],
        "the new campaign joins once the old key is gone"
    );
}

#[test]
fn a_campaign_still_joining_when_the_lease_is_lost_joins_again_with_the_next_lease() {
    // Campaigning right after an outside revoke, on the lease the session
    // still believed in: the campaign proceeds on the next lease instead of
    // failing.
    let mut s = session();
    let (op, _) = the_txn(&campaign(&mut s, 10, 1, Mode::Wait));
    let out = lease_gone(&mut s, 11);
    assert!(election_events(&out, 1).is_empty(), "not lost: {out:?}");
    assert!(commands(&out).contains(&Command::Abandon { op }));
    assert_eq!(s.standing(ElectionId(1)), Standing::Pending);
    reregister(&mut s, LEASE2);
    let (_, txn) = the_txn(&drain(&mut s));
    assert_eq!(
        txn.compares,
        vec![Compare::create_revision(
            key_of(LEASE2),
            CompareOp::Equal,
            Revision(0)
        )]
    );
}

#[test]
fn a_try_still_joining_when_the_lease_is_lost_fails_it_is_one_round_trip() {
    let mut s = session();
    let (op, _) = the_txn(&campaign(&mut s, 10, 1, Mode::Try));
    let out = lease_gone(&mut s, 11);
    assert!(commands(&out).contains(&Command::Abandon { op }));
    assert_eq!(
        election_events(&out, 1),
        vec![ElectionEvent::Lost {
            reason: Loss::LeaseLost(LostReason::LeaseExpired)
        }]
    );
}

#[test]
fn a_campaign_watches_its_queue_on_the_sessions_timeouts_and_backoff() {
    // None is the default: a 2 s request timeout, a quiet stream probed
    // after 1 s, and plain pacing from 700 ms (a first retry exactly
    // 700 ms after the failure).
    let mut c = config();
    c.probe_interval = Duration::from_secs(1);
    c.backoff = crate::backoff::BackoffConfig {
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
    c.backoff = crate::backoff::BackoffConfig {
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
