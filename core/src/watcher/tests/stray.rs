//! The watcher (through its mirror) and answers or timeouts nobody
//! awaits: at every step, an answer to an op or stream it never opened and
//! a timeout before its deadline leave it as it was. And the read-back of
//! an empty view.

use super::*;

/// An op and a stream the watcher never issued.
const STRAY: OpId = OpId(99);

/// Feeds stray answers and a timeout at `now`, before the next deadline:
/// nothing is said or sent, the view, revision and deadline stay.
fn strays_leave_it_alone(m: &mut Watcher, now: u64) {
    let deadline = m.poll_timeout();
    assert!(deadline > Some(t(now)), "{deadline:?} is not after {now}");
    let (view, revision, watching) = (m.view(), m.revision(), m.is_watching());
    let inputs = [
        Input::Io(Completion::Listed {
            op: STRAY,
            outcome: Outcome::Ok(Listing::complete(vec![kv("z", "Z", 50, 9)], Revision(50))),
        }),
        Input::Io(Completion::Listed {
            op: STRAY,
            outcome: Outcome::Err(Failure::Compacted(40)),
        }),
        Input::Io(Completion::WatchMessage {
            cluster: crate::ClusterId::default(),
            stream: STRAY,
            kind: MessageKind::Events,
            events: vec![put(kv("z", "Z", 50, 9), None)],
            revision: Revision(50),
        }),
        Input::Io(Completion::WatchClosed {
            stream: STRAY,
            failure: Failure::Compacted(40),
        }),
        Input::Timeout,
    ];
    for input in inputs {
        let shown = format!("{input:?}");
        m.handle(t(now), input).unwrap();
        assert_eq!(drain(m), vec![], "{shown} moved the watcher");
        assert_eq!(m.view(), view, "{shown}");
        assert_eq!(m.revision(), revision, "{shown}");
        assert_eq!(m.is_watching(), watching, "{shown}");
        assert_eq!(m.poll_timeout(), deadline, "{shown}");
        assert!(!m.is_closed());
    }
}

#[test]
fn strays_leave_the_watcher_alone_at_every_step() {
    let mut m = Watcher::new(config(StartPolicy::Retry)).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut m);
    // Listing (op 1).
    strays_leave_it_alone(&mut m, 1);
    listed(&mut m, 2, 1, vec![kv("a", "A", 3, 7)], 10);
    assert_eq!(drain(&mut m).last(), Some(&watch(2, 11)));
    // The watch's creation awaited.
    strays_leave_it_alone(&mut m, 3);
    message(&mut m, 4, 2, MessageKind::Created, vec![], 10);
    let _ = drain(&mut m);
    // Watching, quiet.
    strays_leave_it_alone(&mut m, 5);
    m.handle(t(10_004), Input::Timeout).unwrap();
    assert_eq!(
        drain(&mut m),
        vec![cmd(Command::RequestProgress { stream: OpId(2) })]
    );
    // A progress answer awaited.
    strays_leave_it_alone(&mut m, 10_005);
    let _ = stream_closed(&mut m, 10_006, 2, Failure::Unavailable("cut".into()));
    // Waiting to resume.
    strays_leave_it_alone(&mut m, 10_007);
    let at = m.poll_timeout().unwrap();
    m.handle(at, Input::Timeout).unwrap();
    assert_eq!(drain(&mut m), vec![read_back(3, "a", 10)]);
    // The read-back in flight.
    let now = at.as_millis();
    strays_leave_it_alone(&mut m, now + 1);
    // Unanswered by its deadline: a silence, and a retry.
    assert_eq!(m.silences(), 0);
    m.handle(t(now + 2000), Input::Timeout).unwrap();
    assert_eq!(m.silences(), 1);
    let out = drain(&mut m);
    assert!(
        out.contains(&cmd(Command::Abandon { op: OpId(3) })),
        "{out:?}"
    );
}

/// A watcher whose view is empty (only its own host, which it leaves
/// out, is listed at revision 10), its stream broken: returns it with the
/// read-back of the prefix it sent.
fn empty_view_reading_back() -> (Watcher, OpId) {
    let mut m = Watcher::new(config(StartPolicy::Retry)).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut m);
    listed(&mut m, 1, 1, vec![kv("me", "M", 5, 9)], 10);
    let _ = drain(&mut m);
    message(&mut m, 2, 2, MessageKind::Created, vec![], 10);
    let _ = stream_closed(&mut m, 3, 2, Failure::Unavailable("cut".into()));
    let at = m.poll_timeout().unwrap();
    m.handle(at, Input::Timeout).unwrap();
    let out = drain(&mut m);
    let [Output::Command(Command::Range { op, request })] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(request.revision, Revision(10));
    assert!(request.get.prefix, "{request:?}");
    (m, *op)
}

#[test]
fn an_empty_views_read_back_finds_the_same_history_unless_a_kept_key_is_there() {
    // Only keys the view leaves out (its own host): the same history, the
    // watch resumes.
    let (mut m, op) = empty_view_reading_back();
    listed(&mut m, 200, op.0, vec![kv("me", "M", 5, 9)], 10);
    let out = drain(&mut m);
    assert!(
        matches!(out[..], [Output::Command(Command::Watch { .. })]),
        "{out:?}"
    );
    // A host the view would keep but never saw: another history, re-list.
    let (mut m, op) = empty_view_reading_back();
    listed(&mut m, 200, op.0, vec![kv("b", "B", 6, 9)], 10);
    let out = drain(&mut m);
    assert!(
        matches!(out.last(), Some(Output::Command(Command::Range { .. }))),
        "{out:?}"
    );
}
