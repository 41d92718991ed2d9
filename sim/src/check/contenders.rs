//! What the checks of the election and lock processes share: when each
//! contender was disturbed, its events, and how promptly an undisturbed
//! one must see a change.

use std::collections::BTreeMap;
use std::time::Duration;

use super::bounds::ms;
use crate::faults::schedule::{Fault, Target};
use crate::history::{contender_of, ContenderEvent, Entry, History, LogEntry};

/// A request timeout plus a second for watch delivery: how soon an
/// undisturbed process learns of a change to its queue.
pub(super) fn prompt() -> u64 {
    ms(coord::SessionOptions::default().request_timeout) + 1000
}

/// How long after a disturbance a process's streams may still lag: a
/// silent watch is probed within the probe interval plus a request
/// timeout, and the retry waits at most the backoff cap, plus 4 s.
pub(super) fn settle() -> u64 {
    let o = coord::SessionOptions::default();
    ms(o.probe_interval + o.request_timeout + o.backoff.cap + Duration::from_secs(4))
}

/// The contender-index of the process that holds `lease`, if known.
pub(super) fn owner(owners: &BTreeMap<i64, u64>, lease: i64) -> Option<usize> {
    owners.get(&lease).copied().and_then(contender_of)
}

/// Intervals during which contender `c` (or etcd as a whole) was disturbed.
pub(super) fn disturbances(history: &History, c: usize) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut open: BTreeMap<&'static str, u64> = BTreeMap::new();
    for r in &history.records {
        match &r.what {
            Entry::Fault(Fault::Partition {
                target: Target::Contender(contender),
                ..
            }) if *contender == c => {
                open.entry("partition").or_insert(r.at_ms);
            }
            Entry::ContenderPartitionEnded { contender } if *contender == c => {
                if let Some(s) = open.remove("partition") {
                    out.push((s, r.at_ms));
                }
            }
            Entry::Fault(Fault::Pause {
                target: Target::Contender(contender),
                ..
            }) if *contender == c => {
                open.entry("pause").or_insert(r.at_ms);
            }
            Entry::ContenderResumed { contender } if *contender == c => {
                if let Some(s) = open.remove("pause") {
                    out.push((s, r.at_ms));
                }
            }
            Entry::Fault(Fault::Crash {
                target: Target::Contender(contender),
                ..
            }) if *contender == c => {
                open.entry("crash").or_insert(r.at_ms);
            }
            Entry::ContenderRestarted { contender } if *contender == c => {
                if let Some(s) = open.remove("crash") {
                    out.push((s, r.at_ms));
                }
            }
            Entry::Fault(Fault::LeaderChange { unavailable_ms }) => {
                out.push((r.at_ms, r.at_ms + unavailable_ms));
            }
            Entry::Fault(Fault::DropReplies { ms }) => out.push((r.at_ms, r.at_ms + ms)),
            Entry::Fault(Fault::Compact) => out.push((r.at_ms, r.at_ms)),
            // Its campaign learns where it stands only when the join's
            // retry, a request timeout later, is answered.
            Entry::JoinsUnanswered(joins) => {
                let timeout = ms(coord::SessionOptions::default().request_timeout);
                out.extend(
                    joins
                        .iter()
                        .filter(|(_, x)| *x == c)
                        .map(|(at, _)| (*at, at + timeout)),
                );
            }
            _ => {}
        }
    }
    out.extend(open.into_values().map(|s| (s, u64::MAX)));
    out
}

/// True if no disturbance of `d` touches `[from - settle, to]`.
pub(super) fn undisturbed(d: &[(u64, u64)], from: u64, to: u64) -> bool {
    let since = from.saturating_sub(settle());
    d.iter().all(|(s, e)| *e < since || *s > to)
}

/// How soon a campaign whose key became its name's oldest reports itself
/// elected, when neither its process nor etcd is disturbed: the watch
/// delivery of the delete that made it oldest (or the reply to its own
/// put), one read, and the sampling.
pub const SUCCESSION_MS: u64 = crate::check::bounds::REGISTRATION_MS;

/// Every contender's events, by contender and name, each list in the
/// history's order: gathered in one pass, so that a check of one event can
/// look at the others of its campaign without reading the whole history.
pub(super) struct ContenderEvents<'a> {
    /// By contender, then by name.
    by: BTreeMap<usize, ByName<'a>>,
}

/// One contender's events, by name: (when, what).
type ByName<'a> = BTreeMap<&'a str, Vec<(u64, &'a ContenderEvent)>>;

impl<'a> ContenderEvents<'a> {
    pub(super) fn new(history: &'a History) -> Self {
        let mut by: BTreeMap<usize, ByName<'a>> = BTreeMap::new();
        for r in history.contender_events() {
            by.entry(r.contender)
                .or_default()
                .entry(r.name)
                .or_default()
                .push((r.at_ms, r.event));
        }
        ContenderEvents { by }
    }

    /// Contender `c`'s events for `name`, in order.
    pub(super) fn of(
        &self,
        c: usize,
        name: &str,
    ) -> impl Iterator<Item = (u64, &'a ContenderEvent)> + '_ {
        self.by
            .get(&c)
            .and_then(|names| names.get(name))
            .into_iter()
            .flat_map(|events| events.iter().copied())
    }
}

/// The entries of etcd's log (in the order etcd made them, so by time)
/// made from `from` to `to` ms, both included.
pub(super) fn during(log: &[LogEntry], from: u64, to: u64) -> &[LogEntry] {
    let start = log.partition_point(|e| e.at_ms < from);
    let end = log.partition_point(|e| e.at_ms <= to).max(start);
    &log[start..end]
}
