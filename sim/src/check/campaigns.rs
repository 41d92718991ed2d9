//! The campaigns' invariants: no zombie campaign, a withdrawn or losing
//! campaign leaves no key, one lease per session, every loss reported, a
//! session's lease alive while it is believed; and the campaigns'
//! latencies.

use std::collections::BTreeMap;

use super::contenders::{during, owner, prompt, undisturbed, ContenderEvents};
use super::verdict::{Invariant, Verdict};
use crate::faults::schedule::{Case, Direction, Fault, Target};
use crate::history::{ContenderEvent, ContenderSample, Entry, History, LogEntry};

pub(super) fn no_zombie(
    history: &History,
    events: &ContenderEvents,
    log: &[LogEntry],
    owners: &BTreeMap<i64, u64>,
    disturbed: &[Vec<(u64, u64)>],
    v: &mut Verdict,
) {
    for r in &history.records {
        let Entry::Fault(Fault::DeleteWaiterKey { .. }) = &r.what else {
            continue;
        };
        // The key removal recorded with the fault.
        let Some((key, lease)) = history.removed_outside_at(r.at_ms) else {
            continue;
        };
        let Some(c) = owner(owners, lease) else {
            continue;
        };
        let Some((name, _)) = key.split_once('/') else {
            continue;
        };
        // The incarnation deleted: a campaign still joining may create the
        // key again (a new create revision), and lead with that one.
        let deleted = log
            .iter()
            .find(|e| !e.present && e.key == key && e.at_ms == r.at_ms)
            .map(|e| e.create_revision);
        v.checks += 1;
        let next = events
            .of(c, name)
            .filter(|(t, _)| *t >= r.at_ms)
            .find(|(_, e)| !matches!(e, ContenderEvent::Started { .. }));
        match next {
            Some((t, ContenderEvent::Elected { key: k, token, .. }))
                if *k == key && Some(*token) == deleted =>
            {
                v.violate(
                Invariant::NoZombie,
                t,
                None,
                    format!(
                        "contender {c} elected with {key} (token {token}), deleted from outside at {} ms",
                        r.at_ms
                    ),
                )
            }
            Some((t, ContenderEvent::Failed { lost: true, .. }))
                if t > r.at_ms + prompt() && undisturbed(&disturbed[c], r.at_ms, t) =>
            {
                v.violate(
                    Invariant::NoZombie,
                    t,
                    None,
                    format!(
                        "contender {c}'s campaign for {name} failed {} ms after its key was deleted",
                        t - r.at_ms
                    ),
                )
            }
            _ => {}
        }
    }
}

pub(super) fn withdrawn_leave_no_key(
    history: &History,
    events: &ContenderEvents,
    log: &[LogEntry],
    disturbed: &[Vec<(u64, u64)>],
    v: &mut Verdict,
) {
    for r in &history.records {
        let Entry::Contender {
            contender: c,
            name,
            event: ContenderEvent::Cancelled { lease: Some(lease) },
            ..
        } = &r.what
        else {
            continue;
        };
        let due = r.at_ms + prompt();
        if !undisturbed(&disturbed[*c], r.at_ms, due) {
            continue;
        }
        let key = format!("{name}/{lease:x}");
        // The next campaign of the same process may write the key again.
        let next_start = events
            .of(*c, name)
            .find(|(t, e)| *t > r.at_ms && matches!(e, ContenderEvent::Started { .. }))
            .map_or(u64::MAX, |(t, _)| t);
        let live_at_due = log.iter().rfind(|e| e.key == key && e.at_ms <= due);
        v.checks += 1;
        if let Some(e) = live_at_due {
            if e.present && e.at_ms < next_start {
                v.violate(
                    Invariant::WithdrawnLeavesNoKey,
                    due,
                    None,
                    format!(
                        "contender {c} withdrew its campaign for {name} at {} ms; {key} still exists at {due} ms",
                        r.at_ms
                    ),
                );
            }
        }
    }
}

/// A try is one round trip that writes only if nobody is queued. So a try
/// never creates its key while another key is under the name, and a try
/// that reports a loss leaves no key of its own behind (one it made with an
/// answer lost, then cleaned up, or deleted from outside before it learned
/// of it, is fine: an unknown outcome can make a key the try never saw).
pub(super) fn losing_tries_write_nothing(
    history: &History,
    log: &[LogEntry],
    owners: &BTreeMap<i64, u64>,
    disturbed: &[Vec<(u64, u64)>],
    v: &mut Verdict,
) {
    // Each contender's open try per name: when it started.
    let mut open: BTreeMap<(usize, &str), u64> = BTreeMap::new();
    for r in &history.records {
        let Entry::Contender {
            contender,
            name,
            event,
            ..
        } = &r.what
        else {
            continue;
        };
        match event {
            ContenderEvent::Started {
                mode: crate::history::CampaignMode::Try,
            } => {
                open.insert((*contender, name), r.at_ms);
            }
            ContenderEvent::TryLost => {
                let Some(start) = open.remove(&(*contender, name.as_str())) else {
                    continue;
                };
                v.checks += 1;
                let prefix = format!("{name}/");
                let created = during(log, start, r.at_ms).iter().filter(|e| {
                    e.present
                        && e.key.starts_with(&prefix)
                        && e.create_revision == e.revision
                        && owner(owners, e.lease) == Some(*contender)
                });
                for e in created {
                    let queued = present_after(log, &prefix, |l| l.revision < e.revision);
                    if let Some(other) = queued.keys().find(|k| **k != e.key) {
                        v.violate(
                            Invariant::TryWritesNothing,
                            e.at_ms,
                            None,
                            format!(
                                "contender {contender}'s try for {name} created {} at {} ms while {other} was queued",
                                e.key, e.at_ms
                            ),
                        );
                    }
                    let due = r.at_ms + prompt();
                    if !undisturbed(&disturbed[*contender], r.at_ms, due) {
                        continue;
                    }
                    let left = log
                        .iter()
                        .rfind(|l| l.key == e.key && l.at_ms <= due)
                        .is_some_and(|l| l.present && l.create_revision == e.create_revision);
                    if left {
                        v.violate(
                            Invariant::TryWritesNothing,
                            due,
                            None,
                            format!(
                                "contender {contender}'s try for {name} lost at {} ms and left {} (created at {} ms)",
                                r.at_ms, e.key, e.at_ms
                            ),
                        );
                    }
                }
            }
            _ => {
                open.remove(&(*contender, name.as_str()));
            }
        }
    }
}

/// The keys under `prefix` present after the changes of `log` that
/// `before` selects (a prefix of the log).
pub(super) fn present_after<'a>(
    log: &'a [LogEntry],
    prefix: &str,
    before: impl Fn(&LogEntry) -> bool,
) -> BTreeMap<&'a str, i64> {
    let mut present = BTreeMap::new();
    for e in log
        .iter()
        .take_while(|e| before(e))
        .filter(|e| e.key.starts_with(prefix))
    {
        if e.present {
            present.insert(e.key.as_str(), e.lease);
        } else {
            present.remove(e.key.as_str());
        }
    }
    present
}

/// Intervals during which replies to contender `c` could be lost while its
/// requests were applied (unanswered requests, a partition cutting the way
/// back): a grant may have made a lease the process never learned of.
pub(super) fn lossy(history: &History, c: usize) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = history
        .records
        .iter()
        .filter_map(|r| match &r.what {
            Entry::Fault(Fault::DropReplies { ms }) => Some((r.at_ms, r.at_ms + ms)),
            _ => None,
        })
        .collect();
    out.extend(history.spans(
        |what| {
            matches!(what, Entry::Fault(Fault::Partition {
                target: Target::Contender(contender),
                direction: Direction::FromEtcd | Direction::Both | Direction::Late { .. },
                ..
            }) if *contender == c)
        },
        |what| matches!(what, Entry::ContenderPartitionEnded { contender } if *contender == c),
    ));
    out
}

/// A process's incarnation holds one lease, but briefly after a
/// disturbance (a lost lease is revoked within a request timeout and a
/// retry once etcd answers again), and for a TTL after a disturbance that
/// could have made a lease it never learned of.
pub(super) fn one_lease(
    case: &Case,
    history: &History,
    disturbed: &[Vec<(u64, u64)>],
    samples: &[(u64, &Vec<ContenderSample>)],
    v: &mut Verdict,
) {
    let revoke_retry = 250;
    let windows = crate::check::leader_windows(history);
    for (c, (spec, disturbed)) in case.contenders.iter().zip(disturbed).enumerate() {
        let ttl = spec.ttl * 1000;
        let lossy = lossy(history, c);
        let quiet = |at: u64| {
            let short = prompt() + revoke_retry;
            // A lease it never learned of expires by itself (a leader
            // change restarts its TTL).
            let expired = |e: u64| crate::check::expiry_deadline(e, ttl, &windows) + prompt();
            disturbed
                .iter()
                .all(|(st, e)| e.saturating_add(short) < at || *st > at)
                && lossy.iter().all(|(st, e)| expired(*e) < at || *st > at)
        };
        for (at, contenders) in samples {
            let Some(s) = contenders.get(c) else { continue };
            if s.condition != crate::history::Condition::Alive || !quiet(*at) {
                continue;
            }
            v.checks += 1;
            if s.leases.len() > 1 {
                v.violate(
                    Invariant::OneLeasePerSession,
                    *at,
                    None,
                    format!(
                        "contender {c} holds live leases {:x?} (its session reports {:x?})",
                        s.leases,
                        s.session_lease.map(|(l, _)| l)
                    ),
                );
            }
        }
    }
}

/// Once a session no longer holds the lease a leadership is on, that
/// leadership has ended (`lost()` fired) within half a second: the session
/// tells every campaign at once. Judged from samples of what the library
/// says, not from when a busy user loop noticed.
pub(super) fn loss_reported(
    history: &History,
    samples: &[(u64, &Vec<ContenderSample>)],
    v: &mut Verdict,
) {
    const GRACE: u64 = 500;
    let stop = history
        .records
        .iter()
        .find(|r| matches!(r.what, Entry::StopAll))
        .map_or(u64::MAX, |r| r.at_ms);
    let resumed: Vec<(usize, u64)> = history
        .records
        .iter()
        .filter_map(|r| match &r.what {
            Entry::ContenderResumed { contender } => Some((*contender, r.at_ms)),
            _ => None,
        })
        .collect();
    // Per contender: when its session last held each lease.
    let mut held: BTreeMap<(usize, i64), u64> = BTreeMap::new();
    for (at, contenders) in samples {
        if *at >= stop {
            break;
        }
        for (c, s) in contenders.iter().enumerate() {
            if let Some((lease, _)) = s.session_lease {
                held.insert((c, lease), *at);
            }
            let just_resumed = resumed
                .iter()
                .any(|(x, t)| *x == c && *at >= *t && *at < *t + GRACE);
            if s.condition != crate::history::Condition::Alive || just_resumed {
                continue;
            }
            for (name, lease, ended) in &s.leaderships {
                if *ended || s.session_lease.map(|(l, _)| l) == Some(*lease) {
                    continue;
                }
                let Some(last) = held.get(&(c, *lease)) else {
                    continue;
                };
                v.checks += 1;
                if last + GRACE < *at {
                    v.violate(
                        Invariant::LossReported,
                        *at,
                        None,
                        format!(
                            "contender {c}'s session last held lease {lease:x} at {last} ms, yet its leadership of {name} has not ended"
                        ),
                    );
                }
            }
        }
    }
}

/// A session that reports its lease registered holds a lease etcd has,
/// except for one TTL (its next keep-alive tells) after the lease was
/// revoked from outside, and for two samples after a pause ends.
pub(super) fn session_lease_lives(
    case: &Case,
    history: &History,
    owners: &BTreeMap<i64, u64>,
    samples: &[(u64, &Vec<ContenderSample>)],
    disturbed: &[Vec<(u64, u64)>],
    v: &mut Verdict,
) {
    let nominal = crate::check::bounds::Nominal::sessions();
    let ttl_of = |c: usize| case.contenders.get(c).map_or(10, |s| s.ttl).max(2);
    // Each key removed from outside: its lease, when, and for how long its
    // session may still report that lease (if it was revoked): one
    // keep-alive interval when nothing else touched the process within a
    // TTL, else a TTL.
    let revoked: Vec<(i64, u64, u64)> = history
        .records
        .iter()
        .filter_map(|r| match &r.what {
            Entry::KeyRemovedOutside { lease, .. } => {
                let window = match owner(owners, *lease) {
                    Some(c) => {
                        let ttl = ttl_of(c);
                        let span = ttl * 1000;
                        let quiet = disturbed.get(c).is_some_and(|d| {
                            d.iter()
                                .all(|(s, e)| e + span < r.at_ms || *s > r.at_ms + span)
                        });
                        if quiet {
                            nominal.learns_revoke_ms(ttl)
                        } else {
                            span + 200
                        }
                    }
                    None => 10_200,
                };
                Some((*lease, r.at_ms, window))
            }
            _ => None,
        })
        .collect();
    let resumed: Vec<(usize, u64)> = history
        .records
        .iter()
        .filter_map(|r| match &r.what {
            Entry::ContenderResumed { contender } => Some((*contender, r.at_ms)),
            _ => None,
        })
        .collect();
    for (at, contenders) in samples {
        for (c, s) in contenders.iter().enumerate() {
            let Some((lease, live)) = s.session_lease else {
                continue;
            };
            if s.condition != crate::history::Condition::Alive {
                continue;
            }
            let learning = revoked
                .iter()
                .any(|(l, t, window)| *l == lease && *at >= *t && *at <= *t + window);
            let just_resumed = resumed
                .iter()
                .any(|(x, t)| *x == c && *at >= *t && *at < *t + 200);
            if learning || just_resumed {
                continue;
            }
            v.checks += 1;
            if !live {
                v.violate(
                    Invariant::SessionLeaseLives,
                    *at,
                    None,
                    format!(
                        "contender {c}'s session reports lease {lease:x}, which etcd no longer has"
                    ),
                );
            }
        }
    }
}

pub(super) fn latencies(
    case: &Case,
    history: &History,
    log: &[LogEntry],
    owners: &BTreeMap<i64, u64>,
    disturbed: &[Vec<(u64, u64)>],
    samples: &[(u64, &Vec<ContenderSample>)],
    v: &mut Verdict,
) {
    // Failover: a crashed leader's process to a successor leading, when a
    // successor was already queued (else it measures idle time) and every
    // queued process was undisturbed until the crashed lease's expiry plus
    // `prompt()` (else it measures the other fault: a successor paused
    // through the expiry takes over when it resumes, whatever the policy).
    for r in &history.records {
        let Entry::Fault(Fault::Crash {
            target: Target::Contender(contender),
            ..
        }) = &r.what
        else {
            continue;
        };
        let before = samples.iter().rev().find(|(t, _)| *t < r.at_ms);
        let Some((_, s)) = before else { continue };
        let Some(led) = s.get(*contender).map(|x| x.believes.clone()) else {
            continue;
        };
        let ttl = case.contenders.get(*contender).map_or(10, |s| s.ttl) * 1000;
        let due = r.at_ms + ttl + prompt();
        for (name, key, _, _) in led {
            let queued = present_after(log, &format!("{name}/"), |l| l.at_ms <= r.at_ms);
            let successors: Vec<i64> = queued
                .iter()
                .filter(|(k, _)| **k != key)
                .map(|(_, lease)| *lease)
                .collect();
            let clear = successors.iter().all(|lease| {
                owner(owners, *lease)
                    .and_then(|c| disturbed.get(c))
                    .is_some_and(|d| undisturbed(d, r.at_ms, due))
            });
            if successors.is_empty() || !clear {
                continue;
            }
            let next = samples.iter().find(|(t, ss)| {
                *t > r.at_ms
                    && ss.iter().any(|x| {
                        x.believes
                            .iter()
                            .any(|(n, k, _, p)| *n == name && *k != key && *p)
                    })
            });
            if let Some((t, _)) = next {
                v.failover_ms.push((t - r.at_ms).saturating_sub(ttl));
            }
        }
    }
    // Handover: a resign to the next leader of the name, if one waited.
    let elected: Vec<(u64, usize, &str)> = history
        .records
        .iter()
        .filter_map(|x| match &x.what {
            Entry::Contender {
                contender,
                name,
                event: ContenderEvent::Elected { .. },
                ..
            } => Some((x.at_ms, *contender, name.as_str())),
            _ => None,
        })
        .collect();
    for r in &history.records {
        let Entry::Contender {
            contender,
            name,
            event: ContenderEvent::Resigning,
            ..
        } = &r.what
        else {
            continue;
        };
        let next = elected
            .iter()
            .find(|(at, c2, n2)| *at >= r.at_ms && c2 != contender && n2 == name);
        if let Some((at, _, _)) = next {
            if *at <= r.at_ms + 2000 {
                v.handover_ms.push(at - r.at_ms);
            }
        }
    }
}
