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

mod waits;
