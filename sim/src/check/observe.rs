//! Invariants of `observe` (each watcher process observes every election
//! name), judged against the leader etcd really had at every revision,
//! replayed from its exact change log:
//! - **sound**: every observation's revisions increase, and the leader it
//!   reports (key, token and value) is the one etcd had at its revision;
//! - **complete**: between two observations, unless a compaction removed
//!   the revisions between them, etcd's leader never changed without being
//!   reported;
//! - **converges**: just before everyone is stopped, every observer reports
//!   the leader etcd has had for the last second;
//! - **prompt**: a change of leader is reported within
//!   `SUCCESSION_MS` by every observer whose process and etcd were
//!   undisturbed (each disturbance's catch-up bound passed, as for the
//!   host watchers).

use std::collections::BTreeMap;

use crate::check::bounds::WatchPath;
use crate::check::contenders::SUCCESSION_MS;
use crate::check::watchers::{bounded, watcher_disturbances};
use crate::check::{Invariant, Verdict};
use crate::faults::schedule::{Case, WATCHERS};
use crate::history::{Entry, History, LogEntry};

/// A leader as the checker compares it: key, token, value.
type Leader = Option<(String, i64, Vec<u8>)>;

/// The leader of `name` after each revision that touched its queue:
/// (revision, virtual ms, leader).
fn truth(log: &[LogEntry], name: &str) -> Vec<(i64, u64, Leader)> {
    let prefix = format!("{name}/");
    let mut queue: BTreeMap<String, (i64, Vec<u8>)> = BTreeMap::new();
    let mut out: Vec<(i64, u64, Leader)> = Vec::new();
    let entries: Vec<&LogEntry> = log.iter().filter(|e| e.key.starts_with(&prefix)).collect();
    for (i, e) in entries.iter().enumerate() {
        if e.present {
            queue.insert(e.key.clone(), (e.create_revision, e.value.clone()));
        } else {
            queue.remove(&e.key);
        }
        let last_of_revision = entries.get(i + 1).is_none_or(|n| n.revision != e.revision);
        if last_of_revision {
            let leader = queue
                .iter()
                .min_by_key(|(_, (create, _))| *create)
                .map(|(k, (create, value))| (k.clone(), *create, value.clone()));
            out.push((e.revision, e.at_ms, leader));
        }
    }
    out
}

/// The leader at `revision`.
fn at(truth: &[(i64, u64, Leader)], revision: i64) -> Leader {
    let i = truth.partition_point(|(r, _, _)| *r <= revision);
    i.checked_sub(1).and_then(|i| truth[i].2.clone())
}

/// Checks every observation of `history`.
pub fn check(case: &Case, history: &History, log: &[LogEntry], v: &mut Verdict) {
    let compactions: Vec<(u64, i64)> = history
        .records
        .iter()
        .filter_map(|r| match r.what {
            Entry::Compacted { revision } => Some((r.at_ms, revision)),
            _ => None,
        })
        .collect();
    let restarts: Vec<(usize, u64)> = history
        .records
        .iter()
        .filter_map(|r| match r.what {
            Entry::WatcherRestarted { watcher } => Some((watcher, r.at_ms)),
            _ => None,
        })
        .collect();
    let stop_at = history
        .records
        .iter()
        .find(|r| matches!(r.what, Entry::StopAll))
        .map(|r| r.at_ms);
    // Each watcher process's disturbances with their catch-up bounds (its
    // start included; a queue holds at most one key per contender).
    // A compaction reaches a quiet watch only with etcd's next change
    // (the watch is then behind the compacted revision): that change may
    // come and go inside the re-list it forces, unreported, so the
    // compaction's catch-up runs from the next change of a queue.
    let told = |at: u64| log.iter().find(|e| e.at_ms >= at).map_or(at, |e| e.at_ms);
    let disturbed: Vec<Vec<(u64, u64, WatchPath, u64)>> = (0..WATCHERS)
        .map(|w| {
            let mut d = bounded(watcher_disturbances(history, w), case.contenders.len());
            for (_, e, path, _) in &mut d {
                if *path == WatchPath::Compact {
                    *e = told(*e);
                }
            }
            d
        })
        .collect();
    for name in case.names() {
        let truth = truth(log, &name);
        let mut seen: BTreeMap<usize, Vec<Observation>> = BTreeMap::new();
        for r in &history.records {
            if let Entry::Observed {
                watcher,
                name: n,
                leader,
                revision,
                reset,
            } = &r.what
            {
                if *n == name {
                    seen.entry(*watcher)
                        .or_default()
                        .push((r.at_ms, *revision, leader, *reset));
                }
            }
        }
        prompt(&name, &truth, &seen, &disturbed, stop_at, v);
        for (w, obs) in &seen {
            let restarted: Vec<u64> = restarts
                .iter()
                .filter(|(x, _)| x == w)
                .map(|(_, t)| *t)
                .collect();
            sound_and_complete(&name, *w, obs, &truth, (&compactions, &restarted), v);
            if let Some(stop) = stop_at {
                converged(&name, *w, obs, &truth, stop, v);
            }
        }
    }
}

/// Every change of `name`'s leader at revision `rev` (time `t`) is
/// reported, by an observation at `rev` or later, within
/// [`SUCCESSION_MS`] by every observer whose process was undisturbed from
/// `t` to then (every disturbance's catch-up bound passed).
fn prompt(
    name: &str,
    truth: &[(i64, u64, Leader)],
    seen: &BTreeMap<usize, Vec<Observation>>,
    disturbed: &[Vec<(u64, u64, WatchPath, u64)>],
    stop_at: Option<u64>,
    v: &mut Verdict,
) {
    let changes = truth
        .iter()
        .enumerate()
        .filter(|(i, (_, _, l))| i.checked_sub(1).is_none_or(|p| truth[p].2 != *l))
        .map(|(_, c)| c);
    for (rev, t, leader) in changes {
        let due = t + SUCCESSION_MS;
        if stop_at.is_some_and(|s| due >= s) {
            continue;
        }
        for (w, d) in disturbed.iter().enumerate() {
            let quiet = d
                .iter()
                .all(|(s, e, _, b)| e.saturating_add(*b) < *t || *s > due);
            if !quiet {
                continue;
            }
            v.checks += 1;
            let reported = seen
                .get(&w)
                .is_some_and(|obs| obs.iter().any(|(at, r, _, _)| *r >= *rev && *at <= due));
            if !reported {
                v.violate(
                    Invariant::ObserverPrompt,
                    due,
                    None,
                    format!(
                        "watcher {w} had not reported {name}'s leader {leader:?} of revision {rev} (at {t} ms) {SUCCESSION_MS} ms later"
                    ),
                );
            }
        }
    }
}

/// One observation: when, at what revision, the leader, and whether it
/// is the first after etcd's history started over.
type Observation<'a> = (u64, i64, &'a Leader, bool);

fn sound_and_complete(
    name: &str,
    w: usize,
    obs: &[Observation],
    truth: &[(i64, u64, Leader)],
    (compactions, restarts): (&[(u64, i64)], &[u64]),
    v: &mut Verdict,
) {
    for (i, (t, rev, leader, reset)) in obs.iter().enumerate() {
        v.checks += 1;
        let real = at(truth, *rev);
        if **leader != real {
            v.violate(
                Invariant::ObserverSound,
                *t,
                None,
                format!("watcher {w} observed {name} led by {leader:?} at revision {rev}; etcd's leader was {real:?}"),
            );
        }
        let Some((prev_t, prev_rev, prev, _)) = i.checked_sub(1).map(|p| obs[p]) else {
            continue;
        };
        // The process crashed and started again in between: a new
        // observer, owing nothing of what happened before it started.
        if restarts.iter().any(|r| prev_t < *r && *r <= *t) {
            continue;
        }
        // etcd's history started over, and the observation says so: its
        // revision may go down (only here), and what lay between belongs
        // to the history that was lost.
        if *reset {
            continue;
        }
        if *rev <= prev_rev {
            v.violate(
                Invariant::ObserverSound,
                *t,
                None,
                format!(
                    "watcher {w}'s observations of {name} went from revision {prev_rev} to {rev}"
                ),
            );
            continue;
        }
        // A compaction (applied before this observation) past the previous
        // one's revision may have removed what lay between: a re-list.
        let gap = compactions
            .iter()
            .any(|(ct, crev)| *ct <= *t && *crev > prev_rev);
        if gap {
            continue;
        }
        let missed = truth
            .iter()
            .filter(|(r, _, _)| *r > prev_rev && *r < *rev)
            .find(|(_, _, l)| l != prev);
        if let Some((r, _, l)) = missed {
            v.violate(
                Invariant::ObserverComplete,
                *t,
                None,
                format!(
                    "watcher {w} never reported {name}'s leader {l:?} of revision {r} (between its reports at {prev_rev} and {rev})"
                ),
            );
        }
    }
}

fn converged(
    name: &str,
    w: usize,
    obs: &[Observation],
    truth: &[(i64, u64, Leader)],
    stop: u64,
    v: &mut Verdict,
) {
    // etcd's leader just before the stop, if stable for a second.
    let Some((_, changed_at, leader)) = truth.iter().rev().find(|(_, t, _)| *t < stop) else {
        return;
    };
    if changed_at + 1000 > stop {
        return;
    }
    v.checks += 1;
    let last = obs
        .iter()
        .rev()
        .find(|(t, _, _, _)| *t < stop)
        .map(|(_, _, l, _)| *l);
    if last != Some(leader) {
        v.violate(
            Invariant::ObserverConverges,
            stop,
            None,
            format!(
                "watcher {w} last observed {name} led by {last:?}; etcd's leader was {leader:?}"
            ),
        );
    }
}
