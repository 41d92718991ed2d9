//! Fuzzing the lock family's pure parts:
//! - marker files: any bytes parse without panicking, and what parses
//!   writes back to the same marker;
//! - the verdict, for any marker, probe and ages, against its rules: the
//!   pid is trusted only on the marker's own host, `Held` by pid only for
//!   the recorded start time, `Stale` only past the window and never for
//!   `PidOnly`, `TimeOnly` never asks the pid, and a marker that may be
//!   taken over at some age may be at every later age;
//! - the lock table, against a model: at most `slots` holds per name,
//!   tokens strictly increasing per name, a release or eviction frees
//!   exactly the hold it names.

use std::collections::BTreeMap;
use std::time::Duration;

use arbitrary::Arbitrary;
use coord_core::lock::{
    verdict, Grant, LockTable, Marker, PidProbe, Released, Slots, Strategy, Verdict,
};

use crate::Reach;

#[derive(Debug, Arbitrary)]
struct Judge {
    strategy: Strategy,
    marker: Marker,
    /// This host is the marker's.
    same_host: bool,
    probe: PidProbe,
    age_ms: u32,
    later_ms: u16,
    stale_ms: u32,
}

#[derive(Debug, Arbitrary)]
enum Step {
    Acquire { name: u8, slots: u8 },
    Release { name: u8, which: u8 },
    Evict { name: u8, slot: u8 },
    Judge(Box<Judge>),
}

/// Runs one input: its bytes as a marker, then as steps.
pub fn run(data: &[u8]) -> Reach {
    let mut reach = Reach::default();
    if let Ok(m) = Marker::parse(data) {
        let text = m.encode().unwrap_or_default();
        assert_eq!(
            Marker::parse(text.as_bytes()).as_ref(),
            Ok(&m),
            "round trip"
        );
        reach.milestones += 1;
    }
    let Some(((), steps)) = crate::decode::<(), Step>(data) else {
        return reach;
    };
    let mut table = LockTable::new();
    // The model: each name's live holds and its last token.
    let mut holds: BTreeMap<u8, Vec<Grant>> = BTreeMap::new();
    let mut last: BTreeMap<u8, i64> = BTreeMap::new();
    for step in steps {
        reach.steps += 1;
        match step {
            Step::Acquire { name, slots } => {
                let slots = Slots::new(u32::from(slots % 4) + 1).unwrap_or_default();
                let live = holds.entry(name).or_default();
                let got = table.try_acquire(&name.to_string(), slots);
                let free = (0..slots.get()).find(|s| live.iter().all(|g| g.slot != *s));
                match (got, free) {
                    (Some(g), Some(slot)) => {
                        assert_eq!(g.slot, slot, "lowest free slot");
                        let before = last.insert(name, g.token.0).unwrap_or(0);
                        assert!(g.token.0 > before, "tokens grow: {before} then {g:?}");
                        live.push(g);
                        reach.milestones += 1;
                    }
                    (None, None) => {}
                    (got, free) => panic!("acquire gave {got:?}, free slot {free:?}"),
                }
                assert!(live.len() <= 4);
            }
            Step::Release { name, which } => {
                let live = holds.entry(name).or_default();
                if live.is_empty() {
                    continue;
                }
                let i = usize::from(which) % live.len();
                let g = live.remove(i);
                assert_eq!(table.release(&name.to_string(), g), Released::Released);
                assert_eq!(table.release(&name.to_string(), g), Released::AlreadyGone);
                assert!(!table.holds(&name.to_string(), g));
            }
            Step::Evict { name, slot } => {
                let slot = u32::from(slot % 4);
                let live = holds.entry(name).or_default();
                let was = live
                    .iter()
                    .position(|g| g.slot == slot)
                    .map(|i| live.remove(i));
                assert_eq!(table.evict(&name.to_string(), slot), was);
            }
            Step::Judge(j) => {
                if judge(&j) {
                    reach.milestones += 1;
                }
            }
        }
        for (name, live) in &holds {
            assert_eq!(table.held(&name.to_string()), live.len());
        }
    }
    reach
}

/// Checks one verdict against the rules; true if it takes over.
fn judge(j: &Judge) -> bool {
    let here = if j.same_host {
        j.marker.host.clone()
    } else {
        format!("{}-elsewhere", j.marker.host)
    };
    let stale = Duration::from_millis(u64::from(j.stale_ms));
    let age = Duration::from_millis(u64::from(j.age_ms));
    let v = verdict(j.strategy, &j.marker, &here, j.probe, age, stale);
    match v {
        Verdict::Dead => {
            assert!(j.same_host && j.probe == PidProbe::Gone, "{j:?}");
            assert_ne!(j.strategy, Strategy::TimeOnly);
        }
        Verdict::Reused => {
            assert!(j.same_host && j.strategy != Strategy::TimeOnly, "{j:?}");
            let PidProbe::Alive {
                start_time: Some(now),
            } = j.probe
            else {
                panic!("reused without a start time: {j:?}");
            };
            assert!(j.marker.start_time.is_some_and(|then| then != now));
        }
        Verdict::Held if j.strategy != Strategy::TimeOnly => {
            assert!(j.same_host, "{j:?}");
            assert_eq!(
                j.probe,
                PidProbe::Alive {
                    start_time: j.marker.start_time
                },
                "{j:?}"
            );
            assert!(j.marker.start_time.is_some());
        }
        Verdict::Held => assert!(age < stale, "{j:?}"),
        Verdict::Stale => {
            assert!(age >= stale && j.strategy != Strategy::PidOnly, "{j:?}");
        }
        Verdict::Inconclusive => assert_ne!(j.strategy, Strategy::TimeOnly),
    }
    let later = age + Duration::from_millis(u64::from(j.later_ms));
    let then = verdict(j.strategy, &j.marker, &here, j.probe, later, stale);
    assert!(
        !v.takes_over() || then.takes_over(),
        "{v:?} at {age:?} but {then:?} at {later:?}: {j:?}"
    );
    v.takes_over()
}
