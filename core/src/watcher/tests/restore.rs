//! Listings in pages, and etcd restored, wiped or replaced: what the
//! watcher (through its mirror) does when etcd's revision goes back or
//! another cluster answers.

use super::*;
use crate::ids::ClusterId;
use crate::io::Consistency;

const A: ClusterId = ClusterId(0xa);
const B: ClusterId = ClusterId(0xb);

fn page(
    m: &mut Watcher,
    now: u64,
    op: u64,
    kvs: Vec<KeyValue>,
    rev: i64,
    more: bool,
    c: ClusterId,
) {
    m.handle(
        t(now),
        Input::Io(Completion::Listed {
            op: OpId(op),
            outcome: Outcome::Ok(Listing {
                count: u64::try_from(kvs.len()).unwrap_or(0),
                kvs,
                revision: Revision(rev),
                more,
                cluster: c,
            }),
        }),
    )
    .unwrap();
}

fn failed(m: &mut Watcher, now: u64, op: u64, failure: Failure) {
    m.handle(
        t(now),
        Input::Io(Completion::Listed {
            op: OpId(op),
            outcome: Outcome::Err(failure),
        }),
    )
    .unwrap();
}

fn header(m: &mut Watcher, now: u64, stream: u64, kind: MessageKind, rev: i64, c: ClusterId) {
    m.handle(
        t(now),
        Input::Io(Completion::WatchMessage {
            stream: OpId(stream),
            kind,
            events: Vec::new(),
            revision: Revision(rev),
            cluster: c,
        }),
    )
    .unwrap();
}

fn range_page(
    op: u64,
    limit: u32,
    after: Option<&str>,
    rev: i64,
    consistency: Consistency,
) -> Output {
    cmd(Command::Range {
        op: OpId(op),
        request: RangeRequest {
            get: Get {
                limit,
                ..Get::prefix(Key(PREFIX.to_vec()))
            },
            consistency,
            after: after.map(key),
            revision: Revision(rev),
        },
    })
}

fn lin(op: u64) -> Output {
    range_page(
        op,
        crate::mirror::DEFAULT_PAGE_SIZE,
        None,
        0,
        Consistency::Linearizable,
    )
}

/// Watching after a listing of a and b at revision 10 from cluster A
/// (stream op 2).
fn watching_a() -> Watcher {
    let mut m = Watcher::new(config(StartPolicy::FailFast)).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    assert_eq!(drain(&mut m), vec![lin(1)]);
    page(
        &mut m,
        1,
        1,
        vec![kv("a", "A", 3, 7), kv("b", "B", 4, 8)],
        10,
        false,
        A,
    );
    let out = drain(&mut m);
    assert_eq!(out.last(), Some(&watch(2, 11)));
    m
}

/// Waits out the announced retry; returns what it sent.
fn after_retry(m: &mut Watcher) -> Vec<Output> {
    let at = m.poll_timeout().expect("a retry is scheduled");
    m.handle(at, Input::Timeout).unwrap();
    drain(m)
}

fn is_retrying(o: &Output) -> bool {
    matches!(o, Output::Event(Event::Retrying(_)))
}

#[test]
fn a_wiped_etcd_is_noticed_by_its_watch_header_and_the_view_becomes_the_new_truth() {
    // etcd wiped and restarted: the resumed watch is created at revision 3,
    // below the 10 already reflected.
    let mut m = watching_a();
    header(&mut m, 5, 2, MessageKind::Created, 3, A);
    let out = drain(&mut m);
    assert_eq!(out[0], cmd(Command::CancelWatch { stream: OpId(2) }));
    assert!(is_retrying(&out[1]), "{out:?}");
    assert_eq!(out.len(), 2);
    // A linearizable listing confirms it: b is gone, a came back on a new
    // lease, c is new.
    assert_eq!(after_retry(&mut m), vec![lin(3)]);
    page(
        &mut m,
        6,
        3,
        vec![kv("a", "A", 2, 9), kv("c", "C", 3, 9)],
        4,
        false,
        A,
    );
    assert_eq!(
        drain(&mut m),
        vec![
            // Announced before the difference, whose revisions went back.
            ev(Event::Reset {
                reason: ResyncReason::RevisionWentBack {
                    seen: Revision(10),
                    now: Revision(4)
                },
                revision: Revision(4)
            }),
            ev(Event::Down {
                host: "b".into(),
                last_seen: kv("b", "B", 4, 8),
                revision: Revision(4)
            }),
            ev(Event::Updated {
                host: "a".into(),
                kv: kv("a", "A", 2, 9),
                previous: kv("a", "A", 3, 7),
                revision: Revision(4)
            }),
            ev(Event::Up {
                host: "c".into(),
                kv: kv("c", "C", 3, 9),
                revision: Revision(4)
            }),
            ev(Event::Resynced {
                reason: ResyncReason::RevisionWentBack {
                    seen: Revision(10),
                    now: Revision(4)
                },
                revision: Revision(4)
            }),
            watch(4, 5),
        ]
    );
    // Revisions start over: the next put at 5 applies.
    message(
        &mut m,
        7,
        4,
        MessageKind::Events,
        vec![put(kv("d", "D", 5, 9), None)],
        5,
    );
    assert_eq!(
        drain(&mut m),
        vec![ev(Event::Up {
            host: "d".into(),
            kv: kv("d", "D", 5, 9),
            revision: Revision(5)
        })]
    );
}

#[test]
fn a_listing_behind_the_view_is_a_restore_when_linearizable() {
    // A compaction resync whose linearizable listing is older than the
    // view: etcd went back (restored from a snapshot while cut off).
    let mut m = watching_a();
    let _ = stream_closed(&mut m, 5, 2, Failure::Compacted(9));
    page(&mut m, 6, 3, vec![kv("a", "A", 3, 7)], 8, false, A);
    let out = drain(&mut m);
    assert!(out.contains(&ev(Event::Resynced {
        reason: ResyncReason::RevisionWentBack {
            seen: Revision(10),
            now: Revision(8)
        },
        revision: Revision(8)
    })));
    assert_eq!(out.last(), Some(&watch(4, 9)));
}

/// A serializable watcher that listed a at revision 10 (stream op 2),
/// whose watch was then compacted at `compacted`; with what that sent.
fn serializable_watch_compacted(compacted: i64) -> (Watcher, Vec<Output>) {
    let mut c = config(StartPolicy::FailFast);
    c.consistency = Consistency::Serializable;
    let mut m = Watcher::new(c).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut m);
    page(&mut m, 1, 1, vec![kv("a", "A", 3, 7)], 10, false, A);
    let _ = drain(&mut m);
    let out = stream_closed(&mut m, 5, 2, Failure::Compacted(compacted));
    (m, out)
}

#[test]
fn a_serializable_listing_behind_the_view_is_read_again_linearizably_never_applied() {
    let (mut m, out) = serializable_watch_compacted(9);
    assert_eq!(
        out.last(),
        Some(&range_page(
            3,
            crate::mirror::DEFAULT_PAGE_SIZE,
            None,
            0,
            Consistency::Serializable
        ))
    );
    // A lagging member, without a: nothing applies; read through the
    // leader.
    page(&mut m, 6, 3, Vec::new(), 8, false, A);
    assert_eq!(drain(&mut m), vec![lin(4)]);
    page(&mut m, 7, 4, vec![kv("a", "A", 3, 7)], 12, false, A);
    assert_eq!(
        drain(&mut m),
        vec![
            ev(Event::Resynced {
                reason: ResyncReason::Compacted {
                    compact_revision: Revision(9)
                },
                revision: Revision(12)
            }),
            watch(5, 13),
        ]
    );
}

/// Found by the simulator (generator 6, seed 1816): a member frozen at the
/// view's own revision answered the listing after a compaction; applied,
/// its watch was compacted again at once, and the mirror re-listed in a
/// loop, stale, for as long as the member lagged.
#[test]
fn a_serializable_listing_behind_the_compaction_it_was_read_for_is_read_again_linearizably() {
    let (mut m, _) = serializable_watch_compacted(12);
    // At the view's revision, not behind it, but behind the compaction.
    page(&mut m, 6, 3, vec![kv("a", "A", 3, 7)], 10, false, A);
    assert_eq!(drain(&mut m), vec![lin(4)]);
    page(
        &mut m,
        7,
        4,
        vec![kv("a", "A", 3, 7), kv("b", "B", 11, 7)],
        13,
        false,
        A,
    );
    let out = drain(&mut m);
    assert_eq!(out.last(), Some(&watch(5, 14)), "{out:?}");
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Event(Event::Resynced {
            revision: Revision(13),
            ..
        })
    )));
}

#[test]
fn another_cluster_answering_is_a_restore_even_with_a_higher_revision() {
    let mut m = watching_a();
    header(&mut m, 5, 2, MessageKind::Progress, 50, B);
    let out = drain(&mut m);
    assert_eq!(out[0], cmd(Command::CancelWatch { stream: OpId(2) }));
    assert_eq!(after_retry(&mut m), vec![lin(3)]);
    page(&mut m, 6, 3, vec![kv("b", "B", 40, 8)], 60, false, B);
    let out = drain(&mut m);
    assert_eq!(
        out,
        vec![
            ev(Event::Reset {
                reason: ResyncReason::ClusterChanged { from: A, to: B },
                revision: Revision(60)
            }),
            ev(Event::Down {
                host: "a".into(),
                last_seen: kv("a", "A", 3, 7),
                revision: Revision(60)
            }),
            ev(Event::Updated {
                host: "b".into(),
                kv: kv("b", "B", 40, 8),
                previous: kv("b", "B", 4, 8),
                revision: Revision(60)
            }),
            ev(Event::Resynced {
                reason: ResyncReason::ClusterChanged { from: A, to: B },
                revision: Revision(60)
            }),
            watch(4, 61),
        ]
    );
    // Cluster B is the one now: its messages are not suspicious.
    header(&mut m, 7, 4, MessageKind::Created, 61, B);
    assert!(drain(&mut m).is_empty());
}

#[test]
fn a_check_that_finds_etcd_as_it_was_resumes_the_watch_where_the_view_stands_and_backs_off() {
    // A lagging member answered the watch from behind; the linearizable
    // listing is ahead and already holds a change since (b updated at 11):
    // no restore, no `Resynced`, and the change is not folded into a
    // difference. The watch resumes from the view's revision (after a
    // read-back, as after any break), so the change arrives as itself.
    let mut m = watching_a();
    header(&mut m, 5, 2, MessageKind::Created, 9, A);
    let _ = drain(&mut m);
    assert_eq!(after_retry(&mut m), vec![lin(3)]);
    let b2 = KeyValue {
        mod_revision: Revision(11),
        ..kv("b", "B2", 4, 8)
    };
    page(
        &mut m,
        6,
        3,
        vec![kv("a", "A", 3, 7), b2.clone()],
        11,
        false,
        A,
    );
    assert_eq!(drain(&mut m), vec![read_back(4, "b", 10)]);
    page(&mut m, 7, 4, vec![kv("b", "B", 4, 8)], 11, false, A);
    assert_eq!(drain(&mut m), vec![watch(5, 11)]);
    // Behind again: the next check waits longer (no re-list loop).
    let first = m.poll_timeout();
    header(&mut m, 8, 5, MessageKind::Created, 9, A);
    let out = drain(&mut m);
    let Some(Output::Event(Event::Retrying(r2))) = out.get(1) else {
        panic!("{out:?}")
    };
    assert_eq!(r2.attempt, 2, "backoff carried over: {first:?}");
    assert_eq!(after_retry(&mut m), vec![lin(6)]);
    page(
        &mut m,
        9,
        6,
        vec![kv("a", "A", 3, 7), b2.clone()],
        11,
        false,
        A,
    );
    assert_eq!(drain(&mut m), vec![read_back(7, "b", 10)]);
    page(&mut m, 10, 7, vec![kv("b", "B", 4, 8)], 11, false, A);
    assert_eq!(drain(&mut m), vec![watch(8, 11)]);
    // An up-to-date member answers: the change since arrives in order.
    message(
        &mut m,
        11,
        8,
        MessageKind::Events,
        vec![put(b2.clone(), Some(kv("b", "B", 4, 8)))],
        11,
    );
    assert_eq!(
        drain(&mut m),
        vec![ev(Event::Updated {
            host: "b".into(),
            kv: b2,
            previous: kv("b", "B", 4, 8),
            revision: Revision(11),
        })]
    );
}

#[test]
fn a_large_prefix_is_listed_in_pages_all_at_the_first_page_revision() {
    let mut c = config(StartPolicy::FailFast);
    c.page_size = 2;
    let mut m = Watcher::new(c).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    assert_eq!(
        drain(&mut m),
        vec![range_page(1, 2, None, 0, Consistency::Linearizable)]
    );
    page(
        &mut m,
        1,
        1,
        vec![kv("a", "A", 3, 7), kv("b", "B", 4, 8)],
        10,
        true,
        A,
    );
    assert_eq!(
        drain(&mut m),
        vec![range_page(2, 2, Some("b"), 10, Consistency::Linearizable)],
        "nothing reported before the listing is whole"
    );
    // etcd's header names its current revision on later pages.
    page(&mut m, 2, 2, vec![kv("c", "C", 5, 9)], 14, false, A);
    let out = drain(&mut m);
    let hosts: Vec<&str> = out
        .iter()
        .filter_map(|o| match o {
            Output::Event(Event::Up { host, revision, .. }) => {
                assert_eq!(*revision, Revision(10));
                Some(host.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(hosts, vec!["a", "b", "c"]);
    assert!(out.contains(&ev(Event::Synced {
        revision: Revision(10)
    })));
    assert_eq!(out.last(), Some(&watch(3, 11)));
}

#[test]
fn a_page_too_large_is_asked_again_with_half_the_keys_down_to_one() {
    let mut c = config(StartPolicy::FailFast);
    c.page_size = 4;
    let mut m = Watcher::new(c).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut m);
    let big = || Failure::TooLarge("decoded message length too large".into());
    failed(&mut m, 1, 1, big());
    assert_eq!(
        drain(&mut m),
        vec![range_page(2, 2, None, 0, Consistency::Linearizable)]
    );
    failed(&mut m, 2, 2, big());
    assert_eq!(
        drain(&mut m),
        vec![range_page(3, 1, None, 0, Consistency::Linearizable)]
    );
    // One key too large to receive: a failure like any other.
    failed(&mut m, 3, 3, big());
    let out = drain(&mut m);
    assert!(
        matches!(out.first(), Some(Output::Event(Event::StartFailed { .. }))),
        "{out:?}"
    );
}

#[test]
fn a_pinned_revision_compacted_between_pages_starts_the_listing_over() {
    let mut c = config(StartPolicy::FailFast);
    c.page_size = 1;
    let mut m = Watcher::new(c).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut m);
    page(&mut m, 1, 1, vec![kv("a", "A", 3, 7)], 10, true, A);
    let _ = drain(&mut m);
    failed(&mut m, 2, 2, Failure::Compacted(11));
    assert_eq!(
        drain(&mut m),
        vec![range_page(3, 1, None, 0, Consistency::Linearizable)]
    );
    page(&mut m, 3, 3, vec![kv("b", "B", 12, 8)], 13, false, A);
    let out = drain(&mut m);
    assert!(out.contains(&ev(Event::Up {
        host: "b".into(),
        kv: kv("b", "B", 12, 8),
        revision: Revision(13)
    })));
    assert!(
        !out.iter()
            .any(|o| matches!(o, Output::Event(Event::Up { host, .. }) if host == "a")),
        "nothing from the abandoned first page: {out:?}"
    );
}

#[test]
fn a_page_with_nothing_past_the_last_key_ends_the_listing() {
    // A page must start after the last key read; one that repeats it (and
    // nothing newer) while saying there is more would page forever.
    let mut c = config(StartPolicy::FailFast);
    c.page_size = 2;
    let mut m = Watcher::new(c).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut m);
    let (a, b) = (kv("a", "A", 3, 7), kv("b", "B", 4, 8));
    page(&mut m, 1, 1, vec![a, b.clone()], 10, true, A);
    let _ = drain(&mut m);
    page(&mut m, 2, 2, vec![b], 10, true, A);
    let out = drain(&mut m);
    assert_eq!(out.last(), Some(&watch(3, 11)), "{out:?}");
    assert_eq!(hosts(&m), vec!["a", "b"]);
}

#[test]
fn a_first_page_refused_as_compacted_or_ahead_is_a_failure_not_a_restart() {
    // Only a revision pinned by a first page can be compacted away between
    // pages (or be ahead of a lagging member): a first page refused so is
    // retried with the backoff like any failure, not asked again at once.
    for failure in [Failure::Compacted(4), Failure::FutureRevision] {
        let mut m = Watcher::new(config(StartPolicy::Retry)).unwrap();
        m.handle(t(0), Input::Start).unwrap();
        let _ = drain(&mut m);
        failed(&mut m, 1, 1, failure.clone());
        let out = drain(&mut m);
        assert!(
            matches!(out[..], [Output::Event(Event::Retrying(_))]),
            "{failure:?}: {out:?}"
        );
    }
}

#[test]
fn a_listing_at_the_views_own_revision_is_no_restore() {
    // Linearizable, after a compaction below the view: etcd has not moved.
    let mut m = watching_a();
    let _ = stream_closed(&mut m, 5, 2, Failure::Compacted(9));
    page(
        &mut m,
        6,
        3,
        vec![kv("a", "A", 3, 7), kv("b", "B", 4, 8)],
        10,
        false,
        A,
    );
    let out = drain(&mut m);
    assert!(
        !out.iter().any(|o| matches!(
            o,
            Output::Event(Event::Resynced {
                reason: ResyncReason::RevisionWentBack { .. },
                ..
            })
        )),
        "{out:?}"
    );
    assert_eq!(out.last(), Some(&watch(4, 11)));
    // Serializable, at both the view's revision and the compaction's: as
    // recent as anything etcd has shown, applied.
    let (mut m, _) = serializable_watch_compacted(10);
    page(&mut m, 6, 3, vec![kv("a", "A", 3, 7)], 10, false, A);
    let out = drain(&mut m);
    assert_eq!(out.last(), Some(&watch(4, 11)), "{out:?}");
}

#[test]
fn a_later_page_from_another_cluster_starts_the_listing_over() {
    let mut c = config(StartPolicy::FailFast);
    c.page_size = 1;
    let mut m = Watcher::new(c).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut m);
    page(&mut m, 1, 1, vec![kv("a", "A", 3, 7)], 10, true, A);
    let _ = drain(&mut m);
    page(&mut m, 2, 2, vec![kv("b", "B", 4, 7)], 10, false, B);
    assert_eq!(
        drain(&mut m),
        vec![range_page(3, 1, None, 0, Consistency::Linearizable)]
    );
}

#[test]
fn status_says_when_the_view_may_be_stale_and_since_when() {
    use crate::mirror::MirrorStatus;
    let mut m = Watcher::new(config(StartPolicy::Retry)).unwrap();
    assert_eq!(m.status(), MirrorStatus::Starting);
    m.handle(t(0), Input::Start).unwrap();
    drain(&mut m);
    assert_eq!(m.status(), MirrorStatus::Starting);
    // The first listing is unanswered: failing since its deadline.
    m.handle(t(2_000), Input::Timeout).unwrap();
    assert!(drain(&mut m).iter().any(is_retrying));
    let failing = |attempt, failure: AttemptFailure| MirrorStatus::Failing {
        revision: Revision(0),
        since: t(2_000),
        attempt,
        failure,
    };
    assert_eq!(m.status(), failing(1, AttemptFailure::Timeout));
    // The retry is in flight: still failing (nothing succeeded yet), and a
    // second failure keeps the start of the run.
    let sent = after_retry(&mut m);
    let Some(Output::Command(Command::Range { op, .. })) = sent.last().cloned() else {
        panic!("a retry lists again: {sent:?}");
    };
    assert_eq!(m.status(), failing(1, AttemptFailure::Timeout));
    let refused = Failure::Unavailable("refused".into());
    failed(&mut m, 3_000, op.0, refused.clone());
    assert!(drain(&mut m).iter().any(is_retrying));
    assert_eq!(m.status(), failing(2, AttemptFailure::Etcd(refused)));
    // A listing succeeds: the view is current and watched.
    let sent = after_retry(&mut m);
    let Some(Output::Command(Command::Range { op, .. })) = sent.last().cloned() else {
        panic!("a retry lists again: {sent:?}");
    };
    page(&mut m, 5_000, op.0, vec![kv("a", "A", 3, 7)], 10, false, A);
    let out = drain(&mut m);
    let Some(Output::Command(Command::Watch { op: stream, .. })) = out.last().cloned() else {
        panic!("watches after the listing: {out:?}");
    };
    assert_eq!(
        m.status(),
        MirrorStatus::Watching {
            revision: Revision(10)
        }
    );
    // A compaction: re-listing, with no failure.
    m.handle(
        t(6_000),
        Input::Io(Completion::WatchClosed {
            stream,
            failure: Failure::Compacted(20),
        }),
    )
    .unwrap();
    drain(&mut m);
    assert_eq!(
        m.status(),
        MirrorStatus::Relisting {
            revision: Revision(10)
        }
    );
    m.handle(t(7_000), Input::Close).unwrap();
    drain(&mut m);
    assert_eq!(m.status(), MirrorStatus::Closed);
}

#[test]
fn a_restore_already_past_the_view_is_found_by_the_read_back_before_resuming() {
    // Watching a and b at 10; the stream breaks. Meanwhile etcd was wiped
    // and has moved past revision 10: no header will ever be behind.
    let mut m = watching_a();
    let out = stream_closed(&mut m, 5, 2, Failure::StreamClosed("etcd restarted".into()));
    assert!(out.iter().any(is_retrying));
    let sent = after_retry(&mut m);
    let read_back = cmd(Command::Range {
        op: OpId(3),
        request: RangeRequest {
            get: Get::key(key("b")),
            consistency: Consistency::Linearizable,
            after: None,
            revision: Revision(10),
        },
    });
    assert_eq!(sent, vec![read_back]);
    // At revision 10 etcd has another b (re-registered under a new lease).
    page(&mut m, 300, 3, vec![kv("b", "B", 9, 31)], 40, false, A);
    assert_eq!(drain(&mut m), vec![lin(4)]);
    page(
        &mut m,
        310,
        4,
        vec![kv("b", "B", 9, 31), kv("c", "C", 12, 32)],
        40,
        false,
        A,
    );
    let out = drain(&mut m);
    assert_eq!(
        out,
        vec![
            ev(Event::Reset {
                reason: ResyncReason::HistoryDiverged { seen: Revision(10) },
                revision: Revision(40),
            }),
            ev(Event::Down {
                host: "a".into(),
                last_seen: kv("a", "A", 3, 7),
                revision: Revision(40),
            }),
            ev(Event::Updated {
                host: "b".into(),
                kv: kv("b", "B", 9, 31),
                previous: kv("b", "B", 4, 8),
                revision: Revision(40),
            }),
            ev(Event::Up {
                host: "c".into(),
                kv: kv("c", "C", 12, 32),
                revision: Revision(40),
            }),
            ev(Event::Resynced {
                reason: ResyncReason::HistoryDiverged { seen: Revision(10) },
                revision: Revision(40),
            }),
            watch(5, 41),
        ]
    );
}

#[test]
fn a_read_back_ahead_of_etcd_or_compacted_relists_and_a_failed_one_retries() {
    // Behind: a linearizable listing tells a restore from a lagging
    // member. Compacted: the watch resumes and reports the compaction with
    // etcd's compact revision (a range's error lacks it).
    for (answer, then) in [
        (Failure::FutureRevision, lin(4)),
        (Failure::Compacted(30), watch(4, 11)),
    ] {
        let mut m = watching_a();
        header(&mut m, 5, 2, MessageKind::Progress, 10, A);
        let _ = stream_closed(&mut m, 6, 2, Failure::StreamClosed("broken".into()));
        assert_eq!(after_retry(&mut m).len(), 1);
        failed(&mut m, 400, 3, answer.clone());
        assert_eq!(drain(&mut m), vec![then], "{answer:?}");
    }
    let mut m = watching_a();
    let _ = stream_closed(&mut m, 6, 2, Failure::StreamClosed("broken".into()));
    after_retry(&mut m);
    failed(&mut m, 400, 3, Failure::Unavailable("refused".into()));
    let out = drain(&mut m);
    assert!(out.iter().any(is_retrying), "{out:?}");
    // The retry reads back again.
    let again = after_retry(&mut m);
    assert!(
        matches!(again.as_slice(), [Output::Command(Command::Range { request, .. })] if request.revision == Revision(10)),
        "{again:?}"
    );
}

mod returning;
