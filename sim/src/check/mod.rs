//! Invariants, checked over a recorded [`History`] by an outside observer,
//! never by the code under test. Liveness invariants:
//!
//! - **lease matches**: whenever a running host reports `Registered{L}`,
//!   its key exists in etcd attached to `L`;
//! - **back after heal**: once everything heals, every host is registered
//!   (and its key attached to the lease it reports) within
//!   [`heal_bound`](crate::check::bounds::heal_bound);
//! - **crashed key expires**: a crashed host's key is gone within its TTL
//!   plus expiry slack (counted from the last etcd leader change, which
//!   restarts TTLs);
//! - **no ghost**: after `stop` returns, the key is gone and never returns;
//! - **stop works and ends the task**: `stop` succeeds once faults are
//!   healed, and the handle's task ends.
//!
//!
//! Watcher invariants:
//!
//! - **sound**: replaying a watcher's events from empty never gives an
//!   `Up` for a host already up, a `Down` or `Updated` for one not up, or a
//!   revision going back;
//! - **converges**: once everything heals, within
//!   [`watcher_bound`](crate::check::bounds::watcher_bound), both the replayed
//!   view and the watcher's `view()` equal the hosts in etcd (with their
//!   mod revisions);
//! - **complete**: whenever a watcher has been undisturbed for that bound,
//!   its replayed view agrees with every host whose key has been stably
//!   present or absent for the last second.
//!
//! It also measures detection latency (crash to key gone), heal latency
//! (path to etcd clear to registered again) and watcher lag (etcd change
//! to event delivered, while undisturbed).

pub mod api;
pub mod bounds;
mod campaigns;
mod contenders;
mod deletions;
pub mod elections;
mod heals;
mod hosts;
mod leases;
mod lock_history;
mod lost_leases;
pub mod observe;
mod verdict;
pub mod watchers;

pub use heals::{HERD_BOUND_PERMILLE, HERD_FLEET, HERD_WINDOW_MS, RETURN_WINDOW_MS};
pub(crate) use leases::{expiry_deadline, leader_windows, lease_log};
pub use verdict::{Invariant, LockHistories, Verdict, Violation};

use self::heals::{heal_times, herd, peak_grants, Healers};
use self::hosts::{
    back_after_heal, crashed_keys_expire, host_samples, lease_id_agrees, lease_matches,
    liveness_records, no_ghost, states_announced,
};
use crate::faults::schedule::Case;
use crate::history::{Entry, History};

/// Checks every invariant over `history` of `case`.
pub fn check(case: &Case, history: &History) -> Verdict {
    let mut v = Verdict::default();
    let samples = host_samples(history);
    let at_of = |pred: &dyn Fn(&Entry) -> bool| {
        history
            .records
            .iter()
            .find(|r| pred(&r.what))
            .map(|r| r.at_ms)
    };
    let heal_at = at_of(&|w| matches!(w, Entry::HealAll));
    let stop_all_at = at_of(&|w| matches!(w, Entry::StopAll));

    lease_matches(case, history, &samples, &mut v);
    if let Some(h) = heal_at {
        back_after_heal(case, history, h, stop_all_at, &samples, &mut v);
    }
    crashed_keys_expire(case, history, &samples, &mut v);
    no_ghost(case, history, &samples, &mut v);
    heal_times(&Healers::hosts(case, history, &samples), history, &mut v);
    if !case.contenders.is_empty() {
        heal_times(&Healers::sessions(case, history), history, &mut v);
    }
    liveness_records(history, &mut v);
    lease_id_agrees(history, &mut v);
    states_announced(history, &samples, &mut v);
    crate::check::watchers::watchers(history, case.ttls.len(), heal_at, stop_all_at, &mut v);
    if !case.contenders.is_empty() {
        crate::check::elections::check(case, history, &mut v);
        lock_history::check(history, &mut v);
    }
    // Only fleets large enough for a herd to mean something.
    if case.ttls.len() >= 5 {
        let fleet = u64::try_from(case.ttls.len()).unwrap_or(1);
        v.peak_grant_pct = peak_grants(history).map(|peak| peak * 100 / fleet);
        if case.ttls.len() >= HERD_FLEET {
            herd(history, case.ttls.len(), &mut v);
        }
    }
    for r in &history.records {
        if let Entry::SimulatorAnomalies(n) = r.what {
            v.checks += 1;
            if n > 0 {
                v.violate(
                    Invariant::SimulatorSound,
                    r.at_ms,
                    None,
                    format!("{n} simulated messages arrived with the wrong type"),
                );
            }
        }
    }
    v
}

#[cfg(test)]
mod tests;
