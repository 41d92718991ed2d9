//! A lost lease is retired: once a leadership ends because its session
//! lost the lease (its client deadline passed, its stream broke, or etcd
//! expired it), that lease is done with, whether or not etcd still holds
//! it. Judged from outside, over etcd's lease log and change log:
//!
//! - the lease is gone from etcd (revoked, or expired by itself when the
//!   session could not reach etcd) by the time a lease last renewed at
//!   the loss would surely have expired: its TTL plus expiry slack,
//!   leader changes restarting it;
//! - the lost leadership's key is gone by then too;
//! - no campaign is elected on it again, and the session never reports it
//!   again once it has reported another lease or none.

use std::collections::BTreeMap;

use super::deletions::Deletions;
use super::verdict::{Invariant, Verdict};
use crate::history::{ContenderEvent, ContenderSample, History};

/// The text every loss of a session's lease starts with (`Loss`'s
/// display, before its reason).
fn lease_lost_prefix() -> String {
    let loss = coord::Loss::LeaseLost(coord::LostReason::LeaseExpired).to_string();
    loss.split(':').next().unwrap_or(&loss).to_string()
}

/// One leadership ended by the loss of its session's lease.
struct LostLeadership<'a> {
    at: u64,
    contender: usize,
    lease: i64,
    key: &'a str,
    token: i64,
}

/// Every leadership ended by its session's lease loss, in order.
fn lost_leaderships(history: &History) -> Vec<LostLeadership<'_>> {
    let prefix = lease_lost_prefix();
    // The last `Elected` of each (contender, incarnation, name).
    let mut elected: BTreeMap<(usize, u64, &str), (i64, &str, i64)> = BTreeMap::new();
    let mut out = Vec::new();
    for r in history.contender_events() {
        let at = (r.contender, r.incarnation, r.name);
        match r.event {
            ContenderEvent::Elected {
                lease, key, token, ..
            } => {
                elected.insert(at, (*lease, key.as_str(), *token));
            }
            ContenderEvent::Lost { reason, .. } if reason.starts_with(&prefix) => {
                if let Some((lease, key, token)) = elected.remove(&at) {
                    out.push(LostLeadership {
                        at: r.at_ms,
                        contender: r.contender,
                        lease,
                        key,
                        token,
                    });
                }
            }
            ContenderEvent::Lost { .. }
            | ContenderEvent::Resigned { .. }
            | ContenderEvent::Dropped { .. } => {
                elected.remove(&at);
            }
            _ => {}
        }
    }
    out
}

/// Checks that every lease a session lost is retired (see the module).
pub(super) fn lost_leases_retired(
    history: &History,
    deleted: &Deletions,
    samples: &[(u64, &Vec<ContenderSample>)],
    v: &mut Verdict,
) {
    let leases = crate::check::lease_log(history);
    let windows = crate::check::leader_windows(history);
    let end = history.records.last().map_or(0, |r| r.at_ms);
    // Every `Elected`: (when, contender, lease).
    let elections: Vec<(u64, usize, i64)> = history
        .contender_events()
        .filter_map(|r| match r.event {
            ContenderEvent::Elected { lease, .. } => Some((r.at_ms, r.contender, *lease)),
            _ => None,
        })
        .collect();
    for lost in lost_leaderships(history) {
        let Some(life) = leases.and_then(|l| l.get(&lost.lease)) else {
            continue;
        };
        let ttl_ms = u64::try_from(life.ttl_secs).unwrap_or(0) * 1000;
        let due = crate::check::expiry_deadline(lost.at, ttl_ms, &windows);
        let c = lost.contender;
        v.checks += 1;
        match life.ended_at {
            Some(ended) if ended <= due => {}
            Some(ended) => v.violate(
                Invariant::LostLeaseRetired,
                ended,
                None,
                format!(
                    "contender {c} lost lease {:x} at {} ms, yet etcd held it until {ended} ms (due by {due} ms)",
                    lost.lease, lost.at
                ),
            ),
            None if end > due => v.violate(
                Invariant::LostLeaseRetired,
                due,
                None,
                format!(
                    "contender {c} lost lease {:x} at {} ms, yet etcd still holds it",
                    lost.lease, lost.at
                ),
            ),
            None => {}
        }
        v.checks += 1;
        match deleted
            .get(&(lost.key.to_string(), lost.token))
            .map(|(at, _)| at)
        {
            Some(at) if *at <= due => {}
            Some(at) => v.violate(
                Invariant::LostLeaseRetired,
                *at,
                None,
                format!(
                    "contender {c}'s key {} (token {}) on lost lease {:x} stayed until {at} ms (due by {due} ms)",
                    lost.key, lost.token, lost.lease
                ),
            ),
            None if end > due => v.violate(
                Invariant::LostLeaseRetired,
                due,
                None,
                format!(
                    "contender {c}'s key {} (token {}) on lost lease {:x} was never deleted",
                    lost.key, lost.token, lost.lease
                ),
            ),
            None => {}
        }
        v.checks += 1;
        if let Some((at, by, _)) = elections
            .iter()
            .find(|(at, _, lease)| *at > lost.at && *lease == lost.lease)
        {
            v.violate(
                Invariant::LostLeaseRetired,
                *at,
                None,
                format!(
                    "contender {by} was elected on lease {:x}, lost by contender {c} at {} ms",
                    lost.lease, lost.at
                ),
            );
        }
    }
    sessions_never_return(samples, v);
}

/// A session that has reported another lease, or none, never reports an
/// earlier one again: a lease it left is not its to use.
fn sessions_never_return(samples: &[(u64, &Vec<ContenderSample>)], v: &mut Verdict) {
    // Per contender: the lease it reports now, and every one it left.
    let mut now: BTreeMap<usize, Option<i64>> = BTreeMap::new();
    let mut left: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
    for (at, contenders) in samples {
        for (c, s) in contenders.iter().enumerate() {
            // A crashed process reports nothing: its next incarnation
            // starts afresh (with leases of its own).
            if s.condition == crate::history::Condition::Crashed {
                now.remove(&c);
                left.remove(&c);
                continue;
            }
            let lease = s.session_lease.map(|(l, _)| l);
            let before = now.insert(c, lease).flatten();
            if lease == before {
                continue;
            }
            let gone = left.entry(c).or_default();
            if let Some(old) = before {
                gone.push(old);
            }
            let Some(l) = lease else { continue };
            v.checks += 1;
            if gone.contains(&l) {
                v.violate(
                    Invariant::LostLeaseRetired,
                    *at,
                    None,
                    format!("contender {c}'s session reports lease {l:x} again, after leaving it"),
                );
            }
        }
    }
}
