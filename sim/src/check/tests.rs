//! The checker's own teeth on hand-made histories, for invariants a
//! purpose-broken wrapper of etcd cannot reach (a handle that stops
//! telling its subscribers what it does).

use super::*;
use crate::faults::schedule::{Fault, Target};
use crate::history::{Condition, HostSample, Record};
use coord::{LeaseId, LivenessEvent, LivenessStatus};

fn registered(lease: i64) -> HostSample {
    HostSample {
        condition: Condition::Alive,
        status: Some(LivenessStatus::Registered {
            lease: LeaseId(lease),
        }),
        key_lease: Some(lease),
        key_mod_revision: Some(2),
    }
}

fn record(at_ms: u64, what: Entry) -> Record {
    Record { at_ms, what }
}

fn announced(at_ms: u64, lease: i64) -> Record {
    record(
        at_ms,
        Entry::Event {
            host: 0,
            incarnation: 1,
            event: LivenessEvent::Reregistered {
                lease: LeaseId(lease),
                resumed: false,
            },
        },
    )
}

/// The `StatesAnnounced` violations of `records`.
fn unannounced(records: Vec<Record>) -> Vec<(u64, Option<usize>)> {
    let history = History { records };
    let mut v = Verdict::default();
    states_announced(&history, &host_samples(&history), &mut v);
    v.violations
        .iter()
        .filter(|x| x.invariant == Invariant::StatesAnnounced)
        .map(|x| (x.at_ms, x.host))
        .collect()
}

#[test]
fn a_lease_shown_in_state_needs_an_event_naming_it() {
    // Announced before or after the sample (the recorder and the sampler
    // are different tasks): both fine.
    let before = vec![
        announced(90, 7),
        record(100, Entry::Sample(vec![registered(7)])),
    ];
    assert_eq!(unannounced(before), vec![]);
    let after = vec![
        record(100, Entry::Sample(vec![registered(7)])),
        announced(100, 7),
    ];
    assert_eq!(unannounced(after), vec![]);
    // Never announced: caught at its first sighting.
    let silent = vec![
        announced(50, 6),
        record(100, Entry::Sample(vec![registered(7)])),
        record(200, Entry::Sample(vec![registered(7)])),
    ];
    assert_eq!(unannounced(silent), vec![(100, Some(0))]);
}

#[test]
fn only_a_lagged_subscription_or_a_crash_before_the_recorder_ran_excuses_it() {
    let lagged = vec![
        record(90, Entry::EventsLagged { host: 0 }),
        record(100, Entry::Sample(vec![registered(7)])),
    ];
    assert_eq!(unannounced(lagged), vec![]);
    let crash = |at_ms| {
        record(
            at_ms,
            Entry::Fault(Fault::Crash {
                target: Target::Host(0),
                down_ms: 1000,
            }),
        )
    };
    let crashed_at_once = vec![record(100, Entry::Sample(vec![registered(7)])), crash(100)];
    assert_eq!(unannounced(crashed_at_once), vec![]);
    let crashed_later = vec![record(100, Entry::Sample(vec![registered(7)])), crash(300)];
    assert_eq!(unannounced(crashed_later), vec![(100, Some(0))]);
    // Paused from 90 to 400: the recorder could not run before the crash.
    let pause = record(
        90,
        Entry::Fault(Fault::Pause {
            target: Target::Host(0),
            ms: 310,
        }),
    );
    let crashed_in_pause = vec![
        pause.clone(),
        record(100, Entry::Sample(vec![registered(7)])),
        crash(300),
        record(400, Entry::Resumed { host: 0 }),
    ];
    assert_eq!(unannounced(crashed_in_pause), vec![]);
    let crashed_after_pause = vec![
        pause,
        record(100, Entry::Sample(vec![registered(7)])),
        record(400, Entry::Resumed { host: 0 }),
        crash(500),
    ];
    assert_eq!(unannounced(crashed_after_pause), vec![(100, Some(0))]);
}
