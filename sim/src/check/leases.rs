//! What several checks read off etcd's side of the history: its lease log,
//! its outages, and when a lease left alone must be gone.

use std::collections::BTreeMap;

use super::bounds::{ms, EXPIRY_SLACK};
use crate::faults::schedule::Fault;
use crate::history::{Entry, History};

/// etcd's lease log: every lease granted, to whom, and when it ended.
pub(crate) fn lease_log(history: &History) -> Option<&BTreeMap<i64, crate::history::LeaseLife>> {
    history.records.iter().find_map(|r| match &r.what {
        Entry::LeaseLog(log) => Some(log),
        _ => None,
    })
}

/// Every outage of etcd for the whole fleet (a leader change, unanswered
/// requests, a wipe) as (start, end), virtual ms.
pub(super) fn fleet_outages(history: &History) -> Vec<(u64, u64)> {
    history
        .records
        .iter()
        .filter_map(|r| match r.what {
            Entry::Fault(Fault::LeaderChange { unavailable_ms: d })
            | Entry::Fault(Fault::DropReplies { ms: d })
            | Entry::Fault(Fault::Wipe { down_ms: d, .. }) => Some((r.at_ms, r.at_ms + d)),
            _ => None,
        })
        .collect()
}

/// Leader-change windows (start, end): etcd expires nothing without a
/// leader and restarts every TTL at the window's end.
pub(crate) fn leader_windows(history: &History) -> Vec<(u64, u64)> {
    history
        .records
        .iter()
        .filter_map(|r| match r.what {
            Entry::Fault(Fault::LeaderChange { unavailable_ms }) => {
                Some((r.at_ms, r.at_ms + unavailable_ms))
            }
            _ => None,
        })
        .collect()
}

/// When a lease last renewed at or before `from` (TTL `ttl_ms`) is surely
/// expired in etcd, leader changes included.
pub(crate) fn expiry_deadline(from: u64, ttl_ms: u64, windows: &[(u64, u64)]) -> u64 {
    let mut deadline = from + ttl_ms + ms(EXPIRY_SLACK);
    for (start, end) in windows {
        if *end >= from && *start <= deadline {
            deadline = deadline.max(end + ttl_ms + ms(EXPIRY_SLACK));
        }
    }
    deadline
}
