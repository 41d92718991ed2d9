use super::*;
use crate::ids::{LeaseId, OpId};
use crate::io::{Completion, Get, Listing, MessageKind, RangeRequest};
use crate::kv::WatchEvent;
use crate::outcome::Outcome;
use crate::time::Instant;

fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn kv(tail: &str, value: &str, create: i64) -> KeyValue {
    KeyValue {
        key: Key(format!("/e/{tail}").into_bytes()),
        value: value.as_bytes().to_vec(),
        create_revision: Revision(create),
        mod_revision: Revision(create),
        lease: LeaseId(1),
    }
}

fn leader(kv: &KeyValue) -> Option<Leader> {
    Some(Leader {
        key: kv.key.clone(),
        value: kv.value.clone(),
        token: FencingToken(kv.create_revision.0),
    })
}

fn events(o: &mut Observer) -> Vec<Event> {
    std::iter::from_fn(|| o.poll())
        .filter_map(|out| match out {
            outbox::Output::Event(e) => Some(e),
            outbox::Output::Command(_) => None,
        })
        .collect()
}

fn message(o: &mut Observer, now: u64, events: Vec<WatchEvent>, rev: i64) {
    o.handle(
        t(now),
        Input::Io(Completion::WatchMessage {
            cluster: crate::ClusterId::default(),
            stream: OpId(2),
            kind: MessageKind::Events,
            events,
            revision: Revision(rev),
        }),
    )
    .unwrap();
}

fn del(kv: &KeyValue, rev: i64) -> WatchEvent {
    WatchEvent::Delete {
        key: kv.key.clone(),
        revision: Revision(rev),
        prev: Some(kv.clone()),
    }
}

fn put(kv: KeyValue) -> WatchEvent {
    WatchEvent::Put { kv, prev: None }
}

#[test]
fn every_change_of_leader_is_reported_including_none() {
    let mut o = Observer::new(MirrorConfig::new(Key(b"/e/".to_vec()), 1)).unwrap();
    assert!(
        !o.awaits_etcd() && o.poll_timeout().is_none(),
        "not started"
    );
    o.handle(t(0), Input::Start).unwrap();
    assert!(o.awaits_etcd(), "listing");
    // The listing's deadline (the default request timeout, 5 s).
    assert_eq!(o.poll_timeout(), Some(t(5_000)));
    let cmds: Vec<_> = std::iter::from_fn(|| o.poll()).collect();
    assert_eq!(
        cmds,
        vec![outbox::Output::Command(Command::Range {
            op: OpId(1),
            request: RangeRequest {
                after: None,
                revision: crate::Revision(0),
                get: Get {
                    limit: crate::mirror::DEFAULT_PAGE_SIZE,
                    ..Get::prefix(Key(b"/e/".to_vec()))
                },
                consistency: crate::io::Consistency::Linearizable,
            }
        })]
    );
    let (a, b, c) = (kv("a", "A", 5), kv("b", "B", 7), kv("c", "C", 12));
    o.handle(
        t(1),
        Input::Io(Completion::Listed {
            op: OpId(1),
            outcome: Outcome::Ok(Listing {
                cluster: crate::ClusterId::default(),
                more: false,
                count: 2,
                kvs: vec![b.clone(), a.clone()],
                revision: Revision(10),
            }),
        }),
    )
    .unwrap();
    assert_eq!(
        events(&mut o),
        vec![Event::Leader {
            leader: leader(&a),
            revision: Revision(10)
        }]
    );
    assert_eq!(o.leader(), leader(&a).as_ref());
    assert!(!o.awaits_etcd(), "listed");
    assert_eq!(o.silences(), 0);
    // A new candidate behind: nothing. The leader proclaims: reported.
    message(&mut o, 2, vec![put(c.clone())], 12);
    assert!(events(&mut o).is_empty());
    let a2 = KeyValue {
        value: b"A2".to_vec(),
        mod_revision: Revision(13),
        ..a.clone()
    };
    message(&mut o, 3, vec![put(a2.clone())], 13);
    assert_eq!(
        events(&mut o),
        vec![Event::Leader {
            leader: leader(&a2),
            revision: Revision(13)
        }]
    );
    // Two successions in one message: each is reported, in order.
    message(&mut o, 4, vec![del(&a2, 14), del(&b, 15)], 15);
    assert_eq!(
        events(&mut o),
        vec![
            Event::Leader {
                leader: leader(&b),
                revision: Revision(14)
            },
            Event::Leader {
                leader: leader(&c),
                revision: Revision(15)
            }
        ]
    );
    message(&mut o, 5, vec![del(&c, 16)], 16);
    assert_eq!(
        events(&mut o),
        vec![Event::Leader {
            leader: None,
            revision: Revision(16)
        }]
    );
    assert_eq!(o.leader(), None);
    // Quiet for the probe interval (10 s) since t=5, the stream is asked
    // for progress; unanswered in the request timeout (5 s), it is silent.
    assert!(!o.is_closed());
    assert_eq!(o.poll_timeout(), Some(t(10_005)));
    o.handle(t(10_005), Input::Timeout).unwrap();
    assert_eq!(o.silences(), 0);
    assert_eq!(o.poll_timeout(), Some(t(15_005)));
    o.handle(t(15_005), Input::Timeout).unwrap();
    assert_eq!(o.silences(), 1);
    assert!(o.awaits_etcd(), "waiting to watch again");
    o.handle(t(15_006), Input::Close).unwrap();
    assert!(o.is_closed());
    assert_eq!(o.poll_timeout(), None);
}

#[test]
fn deletions_in_one_revision_never_report_a_leader_that_never_led() {
    let mut o = Observer::new(MirrorConfig::new(Key(b"/e/".to_vec()), 1)).unwrap();
    o.handle(t(0), Input::Start).unwrap();
    let _ = events(&mut o);
    let (a, b, c) = (kv("a", "A", 5), kv("b", "B", 7), kv("c", "C", 9));
    o.handle(
        t(1),
        Input::Io(Completion::Listed {
            op: OpId(1),
            outcome: Outcome::Ok(Listing {
                cluster: crate::ClusterId::default(),
                more: false,
                count: 3,
                kvs: vec![a.clone(), b.clone(), c.clone()],
                revision: Revision(10),
            }),
        }),
    )
    .unwrap();
    let _ = events(&mut o);
    // One lease revoke deletes a and b at revision 11: b never led.
    message(&mut o, 2, vec![del(&a, 11), del(&b, 11)], 11);
    assert_eq!(
        events(&mut o),
        vec![Event::Leader {
            leader: leader(&c),
            revision: Revision(11)
        }]
    );
}

/// Lists `kvs` at `rev` as the answer to the next range the observer
/// sends, firing its timers until it sends one.
fn answer_next_range(o: &mut Observer, kvs: Vec<KeyValue>, rev: i64) {
    let mut now = 0;
    for _ in 0..20 {
        for out in std::iter::from_fn(|| o.poll()).collect::<Vec<_>>() {
            if let outbox::Output::Command(Command::Range { op, .. }) = out {
                o.handle(
                    t(now),
                    Input::Io(Completion::Listed {
                        op,
                        outcome: Outcome::Ok(Listing {
                            cluster: crate::ClusterId::default(),
                            more: false,
                            count: u64::try_from(kvs.len()).unwrap(),
                            kvs,
                            revision: Revision(rev),
                        }),
                    }),
                )
                .unwrap();
                return;
            }
        }
        now = o.poll_timeout().expect("a timer").as_millis();
        o.handle(t(now), Input::Timeout).unwrap();
    }
    panic!("no range sent");
}

/// etcd restored to an older snapshot (its revision went back): `Reset`
/// first, then the leader at the new listing, reported even though it did
/// not change, so that the consumer learns the lower revision.
#[test]
fn a_restore_is_announced_then_the_leader_is_reported_changed_or_not() {
    let mut o = Observer::new(MirrorConfig::new(Key(b"/e/".to_vec()), 1)).unwrap();
    o.handle(t(0), Input::Start).unwrap();
    let a = kv("a", "A", 5);
    answer_next_range(&mut o, vec![a.clone()], 10);
    assert_eq!(
        events(&mut o),
        vec![Event::Leader {
            leader: leader(&a),
            revision: Revision(10)
        }]
    );
    // The watch is created at revision 8: below the 10 already seen.
    o.handle(
        t(1),
        Input::Io(Completion::WatchMessage {
            cluster: crate::ClusterId::default(),
            stream: OpId(2),
            kind: MessageKind::Created,
            events: vec![],
            revision: Revision(8),
        }),
    )
    .unwrap();
    // The restored etcd holds the same leader.
    answer_next_range(&mut o, vec![a.clone()], 8);
    let seen: Vec<Event> = events(&mut o)
        .into_iter()
        .filter(|e| !matches!(e, Event::Retrying(_)))
        .collect();
    assert_eq!(
        seen,
        vec![
            Event::Reset {
                reason: ResyncReason::RevisionWentBack {
                    seen: Revision(10),
                    now: Revision(8)
                },
                revision: Revision(8)
            },
            Event::Leader {
                leader: leader(&a),
                revision: Revision(8)
            }
        ]
    );
}
