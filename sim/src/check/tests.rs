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

/// The `LostTruth` violations of a campaign of contender 0 for `e` that
/// began at 100 ms and failed at 900 ms as lost with its key deleted,
/// over etcd's change log `log` (its key on lease 0x10, granted to it).
fn campaign_loss_untrue(log: Vec<crate::history::LogEntry>) -> usize {
    use crate::faults::schedule::{Case, ContenderKind, ContenderSpec, Generator};
    use crate::history::{client_id, CampaignMode, ContenderEvent, LeaseLife};
    let contender = |at_ms, event| {
        record(
            at_ms,
            Entry::Contender {
                contender: 0,
                incarnation: 1,
                name: "e".into(),
                event,
            },
        )
    };
    let lease = LeaseLife {
        client: client_id(0, 1),
        ttl_secs: 3,
        granted_at: 0,
        ended_at: None,
    };
    let history = History {
        records: vec![
            contender(
                100,
                ContenderEvent::Started {
                    mode: CampaignMode::Wait,
                },
            ),
            contender(
                900,
                ContenderEvent::Failed {
                    error: coord::Error::Lost(coord::Loss::KeyDeleted).to_string(),
                    lost: true,
                },
            ),
            record(1000, Entry::ElectionLog(log)),
            record(1000, Entry::LeaseLog([(0x10, lease)].into_iter().collect())),
        ],
    };
    let case = Case {
        seed: 1,
        ttls: vec![3],
        faults: Vec::new(),
        phase1_ms: 1000,
        contenders: vec![ContenderSpec {
            kind: ContenderKind::Candidate,
            ttl: 3,
        }],
        pool_names: 0,
        generator: Generator::NEWEST,
    };
    let mut v = Verdict::default();
    crate::check::elections::check(&case, &history, &mut v);
    v.violations
        .iter()
        .filter(|x| x.invariant == Invariant::LostTruth)
        .count()
}

#[test]
fn a_campaign_failing_with_its_key_deleted_needs_etcd_to_have_deleted_it() {
    let change = |at_ms, present| crate::history::LogEntry {
        at_ms,
        revision: if present { 5 } else { 9 },
        key: "e/10".into(),
        present,
        create_revision: 5,
        value: b"c0".to_vec(),
        lease: 0x10,
        cause: None,
    };
    // Put, never deleted: the loss did not happen.
    assert_eq!(campaign_loss_untrue(vec![change(200, true)]), 1);
    // Deleted during the campaign: it did.
    assert_eq!(
        campaign_loss_untrue(vec![change(200, true), change(500, false)]),
        0
    );
    // Deleted before the campaign began: not this campaign's loss.
    assert_eq!(
        campaign_loss_untrue(vec![change(20, true), change(50, false)]),
        1
    );
}

/// The `WatcherSound` violations of watcher 0 delivering `events`.
fn unsound(events: Vec<(u64, crate::history::WatcherEventRecord)>) -> Vec<String> {
    let records = events
        .into_iter()
        .map(|(at, event)| record(at, Entry::WatcherEvent { watcher: 0, event }))
        .collect();
    let mut v = Verdict::default();
    crate::check::watchers::watchers(&History { records }, 1, None, None, &mut v);
    v.violations
        .iter()
        .filter(|x| x.invariant == Invariant::WatcherSound)
        .map(|x| x.detail.clone())
        .collect()
}

#[test]
fn an_updated_that_repeats_the_record_it_replaces_is_unsound() {
    use crate::history::{SeenRecord, WatcherEventKind, WatcherEventRecord};
    let put = |mod_revision: i64| SeenRecord {
        mod_revision,
        lease: 7,
        raw: b"{}".to_vec(),
    };
    let event =
        |kind, revision, record: SeenRecord, previous: Option<SeenRecord>| WatcherEventRecord {
            kind,
            host: Some("host-0".into()),
            mod_revision: Some(record.mod_revision),
            revision,
            record: Some(record),
            previous,
        };
    let up = (10, event(WatcherEventKind::Up, 5, put(5), None));
    let updated = (
        20,
        event(WatcherEventKind::Updated, 6, put(6), Some(put(5))),
    );
    assert_eq!(
        unsound(vec![up.clone(), updated.clone()]),
        Vec::<String>::new()
    );
    let replayed = (
        30,
        event(WatcherEventKind::Updated, 7, put(6), Some(put(6))),
    );
    let found = unsound(vec![up, updated, replayed]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("repeats the record it replaces"),
        "{found:?}"
    );
}
