//! Election, lock and pool invariants, checked from outside over the
//! recorded history: the contenders' own events, samples of every
//! leadership's `is_leader()` taken from outside the process (so a paused
//! process is judged by its clock check alone), and etcd's exact change
//! log of the queues and of the fenced resources.
//!
//! - **one leader**: at no sample do two handles of one name believe they
//!   lead while both their keys exist in etcd;
//! - **belief ends**: a belief never outlives the expiry of its lease in
//!   etcd (the client deadline is counted from the send time of the last
//!   acknowledged keep-alive); after its key is deleted or its lease
//!   revoked from outside it ends within a request timeout plus 1 s (a
//!   watch delivery) when the process was undisturbed, else within the
//!   settle bound plus its TTL;
//! - **fenced**: every write that lands on a name's fenced resource carries
//!   the token of the name's holder at that revision (so a stale holder's
//!   write never lands after a newer holder's);
//! - **a leader after the heal**: once everything heals, after
//!   [`election_bound`], no candidate waits more than 3 s on a name that
//!   has no leader;
//! - **no zombie**: a waiter whose key is deleted from outside is never
//!   elected and its campaign fails (within the bound when undisturbed);
//! - **a withdrawn campaign leaves no key**: after a campaign is withdrawn
//!   (its time limit passed) its key is gone within a request timeout plus
//!   1 s, unless a later campaign of the same process wrote it again;
//! - **a losing try writes nothing**: a try that loses never created its
//!   key, even briefly (it is one round trip);
//! - **a registered session's lease lives**: a session reporting its lease
//!   registered holds a lease etcd has (it never hands out a dead one),
//!   but for one keep-alive interval after an outside revoke (its next
//!   keep-alive is answered "gone"), or a TTL when something else touched
//!   the process;
//! - **one lease per session**: a process's incarnation (a candidate, a
//!   locker, a pool of many names) holds at most one live lease, but for a
//!   request timeout and a retry after a disturbance, and a TTL after one
//!   that may have made a lease it never learned of;
//! - **losses are reported at once**: once a session no longer holds the
//!   lease a leadership is on, the leadership's `lost()` has fired within
//!   half a second.
//!
//! It also measures failover latency (a leader's process crashed to a
//! successor leading, minus the crashed leader's TTL, where the queued
//! successors were undisturbed) and handover
//! latency (resign to the successor elected).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::checker::{Invariant, Verdict};
use crate::contenders::{contender_of, resource_key};
use crate::harness::election_bound;
use crate::history::{CampaignMode, ContenderEvent, ContenderSample, History, LogEntry, What};
use crate::model::DeleteCause;
use crate::schedule::{Case, Direction, Fault};

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A request timeout plus a second for watch delivery: how soon an
/// undisturbed process learns of a change to its queue.
pub(crate) fn prompt() -> u64 {
    ms(coord::SessionOptions::default().request_timeout) + 1000
}

/// How long after a disturbance a process's streams may still lag: a
/// silent watch is probed within the probe interval plus a request
/// timeout, and the retry waits at most the backoff cap, plus 4 s.
fn settle() -> u64 {
    let o = coord::SessionOptions::default();
    ms(o.probe_interval + o.request_timeout + o.backoff.cap + Duration::from_secs(4))
}

/// The contender-index of the process that holds `lease`, if known.
fn owner(owners: &BTreeMap<i64, u64>, lease: i64) -> Option<usize> {
    owners.get(&lease).copied().and_then(contender_of)
}

/// Intervals during which contender `c` (or etcd as a whole) was disturbed.
pub(crate) fn disturbances(history: &History, c: usize) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut open: BTreeMap<&'static str, u64> = BTreeMap::new();
    for r in &history.records {
        match &r.what {
            What::Fault(Fault::ContenderPartition { contender, .. }) if *contender == c => {
                open.entry("partition").or_insert(r.at_ms);
            }
            What::ContenderPartitionEnded { contender } if *contender == c => {
                if let Some(s) = open.remove("partition") {
                    out.push((s, r.at_ms));
                }
            }
            What::Fault(Fault::ContenderPause { contender, .. }) if *contender == c => {
                open.entry("pause").or_insert(r.at_ms);
            }
            What::ContenderResumed { contender } if *contender == c => {
                if let Some(s) = open.remove("pause") {
                    out.push((s, r.at_ms));
                }
            }
            What::Fault(Fault::ContenderCrash { contender, .. }) if *contender == c => {
                open.entry("crash").or_insert(r.at_ms);
            }
            What::ContenderRestarted { contender } if *contender == c => {
                if let Some(s) = open.remove("crash") {
                    out.push((s, r.at_ms));
                }
            }
            What::Fault(Fault::LeaderChange { unavailable_ms }) => {
                out.push((r.at_ms, r.at_ms + unavailable_ms));
            }
            What::Fault(Fault::DropReplies { ms }) => out.push((r.at_ms, r.at_ms + ms)),
            What::Fault(Fault::Compact) => out.push((r.at_ms, r.at_ms)),
            _ => {}
        }
    }
    out.extend(open.into_values().map(|s| (s, u64::MAX)));
    out
}

/// True if no disturbance of `d` touches `[from - settle, to]`.
pub(crate) fn undisturbed(d: &[(u64, u64)], from: u64, to: u64) -> bool {
    let since = from.saturating_sub(settle());
    d.iter().all(|(s, e)| *e < since || *s > to)
}

/// Checks every election invariant of `case` and adds to `v`.
pub fn check(case: &Case, history: &History, v: &mut Verdict) {
    let log: Vec<LogEntry> = history
        .records
        .iter()
        .find_map(|r| match &r.what {
            What::ElectionLog(l) => Some(l.clone()),
            _ => None,
        })
        .unwrap_or_default();
    let owners: BTreeMap<i64, u64> = crate::checker::lease_log(history)
        .map(|log| log.iter().map(|(l, life)| (*l, life.client)).collect())
        .unwrap_or_default();
    let disturbed: Vec<Vec<(u64, u64)>> = (0..case.contenders.len())
        .map(|c| disturbances(history, c))
        .collect();
    let heal_at = history
        .records
        .iter()
        .find(|r| matches!(r.what, What::HealAll))
        .map(|r| r.at_ms);
    let stop_at = history
        .records
        .iter()
        .find(|r| matches!(r.what, What::StopAll))
        .map_or(u64::MAX, |r| r.at_ms);
    let samples: Vec<(u64, &Vec<ContenderSample>)> = history
        .records
        .iter()
        .filter_map(|r| match &r.what {
            What::ContenderSample(s) => Some((r.at_ms, s)),
            _ => None,
        })
        .collect();
    one_leader_and_beliefs(case, &log, &disturbed, &samples, v);
    elected_records(history, &log, v);
    campaigns_fail_only_when_lost(history, v);
    prompt_succession(case, history, &log, &owners, &disturbed, v);
    fenced(&log, v);
    if let Some(heal) = heal_at {
        leader_after_heal(case, history, heal, stop_at, v);
    }
    no_zombie(history, &owners, &disturbed, v);
    withdrawn_leave_no_key(history, &log, &disturbed, v);
    losing_tries_write_nothing(history, &log, &owners, &disturbed, v);
    one_lease(case, history, &disturbed, &samples, v);
    loss_reported(history, &samples, v);
    session_lease_lives(case, history, &owners, &samples, &disturbed, v);
    latencies(case, history, &log, &owners, &disturbed, &samples, v);
    crate::observe_checker::check(case, history, &log, v);
    crate::api_checker::check(history, &log, case.contenders.len(), v);
}

/// Every `Elected` against etcd's log: its key is the name's queue prefix
/// and its lease in hex (Go's `%s%x`); etcd put that key with that lease
/// by then, and its token is that incarnation's create revision; and when
/// it was reported no older key of the name was in etcd (it led).
fn elected_records(history: &History, log: &[LogEntry], v: &mut Verdict) {
    for r in &history.records {
        let What::Contender {
            contender,
            name,
            event: ContenderEvent::Elected {
                token, lease, key, ..
            },
            ..
        } = &r.what
        else {
            continue;
        };
        v.checks += 1;
        let prefix = format!("{name}/");
        let expected = coord_core::election::candidate_key(
            &coord_core::Key(prefix.clone().into_bytes()),
            coord_core::LeaseId(*lease),
        );
        let before: Vec<&LogEntry> = log.iter().take_while(|e| e.at_ms <= r.at_ms).collect();
        let put = before.iter().any(|e| {
            e.present && e.key == *key && e.create_revision == *token && e.lease == *lease
        });
        let mut live: BTreeMap<&str, i64> = BTreeMap::new();
        for e in before.iter().filter(|e| e.key.starts_with(&prefix)) {
            if e.present {
                live.insert(e.key.as_str(), e.create_revision);
            } else {
                live.remove(e.key.as_str());
            }
        }
        let older = live
            .iter()
            .find(|(k, rev)| **k != key.as_str() && **rev < *token);
        let problem = if expected.as_bytes() != key.as_bytes() {
            Some(format!(
                "the key of lease {lease:x} under {prefix} is not {key}"
            ))
        } else if !put {
            Some(format!(
                "etcd never put {key} with lease {lease:x} at create revision {token}"
            ))
        } else {
            older.map(|(k, rev)| format!("{k} (create revision {rev}) was still in etcd"))
        };
        if let Some(problem) = problem {
            v.violate(
                Invariant::ElectionRecords,
                r.at_ms,
                None,
                format!(
                    "contender {contender} elected for {name} with {key}, token {token}: {problem}"
                ),
            );
        }
    }
}

/// A campaign ends elected, not elected (a try), withdrawn at its time
/// limit, or lost (its key or its session's lease gone, or the session
/// closed): in every run of the simulator, faults included, any other
/// error (a task gone, a refusal) is a bug.
fn campaigns_fail_only_when_lost(history: &History, v: &mut Verdict) {
    for r in &history.records {
        let What::Contender {
            contender,
            name,
            event: ContenderEvent::Failed { error, lost },
            ..
        } = &r.what
        else {
            continue;
        };
        v.checks += 1;
        if !lost {
            v.violate(
                Invariant::CampaignFailsOnlyWhenLost,
                r.at_ms,
                None,
                format!("contender {contender}'s campaign for {name} failed: {error}"),
            );
        }
    }
}

/// How soon a campaign whose key became its name's oldest reports itself
/// elected, when neither its process nor etcd is disturbed: the watch
/// delivery of the delete that made it oldest (or the reply to its own
/// put), one read, and the sampling.
pub const SUCCESSION_MS: u64 = crate::bounds::REGISTRATION_MS;

/// Every time a name's oldest key changes to `K` (the older ones deleted
/// by a resign, an expiry after a crash, an outside delete or revoke, or
/// `K` put on an empty queue), `K`'s campaign reports itself elected with
/// `K` within [`SUCCESSION_MS`], unless its process or etcd was
/// disturbed, `K` went meanwhile, or the campaign ended otherwise
/// (withdrawn, failed, lost, resigning). This is failover and handover
/// with their bound, for undisturbed successors.
fn prompt_succession(
    case: &Case,
    history: &History,
    log: &[LogEntry],
    owners: &BTreeMap<i64, u64>,
    disturbed: &[Vec<(u64, u64)>],
    v: &mut Verdict,
) {
    let names = case.names();
    // Per name: live key -> (create revision, lease, when put).
    let mut queues: BTreeMap<&str, BTreeMap<&str, (i64, i64, u64)>> = BTreeMap::new();
    let oldest = |q: &BTreeMap<&str, (i64, i64, u64)>| -> Option<(String, (i64, i64, u64))> {
        q.iter()
            .min_by_key(|(_, (rev, _, _))| *rev)
            .map(|(k, x)| ((*k).to_string(), *x))
    };
    for e in log {
        let Some(name) = names.iter().find(|n| {
            e.key
                .strip_prefix(n.as_str())
                .is_some_and(|r| r.starts_with('/'))
        }) else {
            continue;
        };
        let queue = queues.entry(name.as_str()).or_default();
        let before = oldest(queue).map(|(k, _)| k);
        if e.present {
            queue
                .entry(e.key.as_str())
                .or_insert((e.create_revision, e.lease, e.at_ms));
        } else {
            queue.remove(e.key.as_str());
        }
        let Some((key, (token, lease, put_at))) = oldest(queue) else {
            continue;
        };
        if before.as_deref() == Some(key.as_str()) {
            continue;
        }
        let became = e.at_ms;
        let due = became + SUCCESSION_MS;
        let Some(c) = owner(owners, lease) else {
            continue;
        };
        if !disturbed
            .get(c)
            .is_some_and(|d| undisturbed(d, became, due))
        {
            continue;
        }
        // `K` still there when due (the same incarnation).
        let gone = log.iter().any(|x| {
            !x.present
                && x.key == key
                && x.create_revision == token
                && x.at_ms <= due
                && x.at_ms >= put_at
        });
        if gone {
            continue;
        }
        let events: Vec<(u64, &ContenderEvent)> = events_of(history, c, name)
            .filter(|(t, _)| *t >= put_at && *t <= due)
            .collect();
        let ended = events.iter().any(|(_, ev)| {
            matches!(
                ev,
                ContenderEvent::Cancelled { .. }
                    | ContenderEvent::Failed { .. }
                    | ContenderEvent::TryLost
                    | ContenderEvent::Lost { .. }
                    | ContenderEvent::Resigning
            )
        });
        if ended {
            continue;
        }
        v.checks += 1;
        let elected = events.iter().any(|(_, ev)| {
            matches!(ev, ContenderEvent::Elected { key: k, token: t, .. } if *k == key && *t == token)
        });
        if !elected {
            v.violate(
                Invariant::PromptSuccession,
                due,
                None,
                format!(
                    "contender {c}'s key {key} (token {token}) became the oldest of {name} at {became} ms, and it did not report itself elected within {SUCCESSION_MS} ms"
                ),
            );
        }
    }
}

/// The deletions of each key incarnation: (key, create revision) -> (at,
/// cause).
fn deletions(log: &[LogEntry]) -> BTreeMap<(String, i64), (u64, Option<DeleteCause>)> {
    log.iter()
        .filter(|e| !e.present)
        .map(|e| ((e.key.clone(), e.create_revision), (e.at_ms, e.cause)))
        .collect()
}

fn one_leader_and_beliefs(
    case: &Case,
    log: &[LogEntry],
    disturbed: &[Vec<(u64, u64)>],
    samples: &[(u64, &Vec<ContenderSample>)],
    v: &mut Verdict,
) {
    let deleted = deletions(log);
    for (at, contenders) in samples {
        let mut present: BTreeMap<&str, Vec<(usize, &str)>> = BTreeMap::new();
        for (c, s) in contenders.iter().enumerate() {
            for (name, key, token, key_present) in &s.believes {
                v.checks += 1;
                if *key_present {
                    present.entry(name).or_default().push((c, key));
                    continue;
                }
                // Believes in a key etcd no longer has: since when, why?
                let Some((gone_at, cause)) = deleted.get(&(key.clone(), *token)).copied() else {
                    continue;
                };
                let ttl = case.contenders.get(c).map_or(10, |s| s.ttl) * 1000;
                let allowed = match cause {
                    Some(DeleteCause::Expired) => gone_at,
                    _ if undisturbed(&disturbed[c], gone_at, *at) => gone_at + prompt(),
                    _ => gone_at + settle() + ttl,
                };
                if *at > allowed {
                    v.violate(
                        Invariant::BeliefEnds,
                        *at,
                        None,
                        format!(
                            "contender {c} still leads {name} with key {key} (token {token}), gone at {gone_at} ms ({cause:?}); allowed until {allowed} ms"
                        ),
                    );
                }
            }
        }
        for (name, believers) in present {
            if believers.len() > 1 {
                v.violate(
                    Invariant::OneLeader,
                    *at,
                    None,
                    format!("{name}: two leaders with both keys in etcd: {believers:?}"),
                );
            }
        }
    }
}

/// Replays etcd's change log: every write to a fenced resource must carry
/// the token of the holder (the lowest create revision) of its name.
fn fenced(log: &[LogEntry], v: &mut Verdict) {
    let mut queues: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for e in log {
        if let Some(name) = e.key.strip_prefix("/res/") {
            if !e.present {
                continue;
            }
            v.checks += 1;
            let token: Option<i64> = std::str::from_utf8(&e.value)
                .ok()
                .and_then(|t| t.parse().ok());
            let holder = queues.get(name).and_then(|q| q.values().copied().min());
            if token.is_none() || token != holder {
                v.violate(
                    Invariant::Fenced,
                    e.at_ms,
                    None,
                    format!(
                        "{} written with token {token:?} at revision {} while the holder's token was {holder:?}",
                        resource_key(name),
                        e.revision
                    ),
                );
            }
            continue;
        }
        let Some((name, _)) = e.key.split_once('/') else {
            continue;
        };
        let q = queues.entry(name.to_string()).or_default();
        if e.present {
            q.insert(e.key.clone(), e.create_revision);
        } else {
            q.remove(&e.key);
        }
    }
}

/// After the heal (plus the bound), nobody waits more than 3 s on a name
/// that has no leader: if a live candidate is campaigning, a leader
/// exists.
fn leader_after_heal(case: &Case, history: &History, heal: u64, stop: u64, v: &mut Verdict) {
    const WAITED: u64 = 3000;
    let from = heal + ms(election_bound(case));
    // Per name: contenders waiting now, since when; and the last sample
    // with a leader.
    let mut waiting: BTreeMap<&str, BTreeMap<usize, u64>> = BTreeMap::new();
    let mut led_at: BTreeMap<&str, u64> = BTreeMap::new();
    for r in &history.records {
        if r.at_ms >= stop {
            break;
        }
        match &r.what {
            What::Contender {
                contender,
                name,
                event,
                ..
            } => {
                let w = waiting.entry(name).or_default();
                match event {
                    ContenderEvent::Started {
                        mode: CampaignMode::Wait | CampaignMode::WaitAtMost(_),
                    } => {
                        w.insert(*contender, r.at_ms);
                    }
                    _ => {
                        w.remove(contender);
                    }
                }
            }
            What::ContenderSample(contenders) => {
                for (name, w) in &waiting {
                    let led = contenders
                        .iter()
                        .any(|s| s.believes.iter().any(|(n, _, _, p)| n == name && *p));
                    let since = led_at.entry(name).or_insert(r.at_ms);
                    if led {
                        *since = r.at_ms;
                        continue;
                    }
                    if r.at_ms < from {
                        continue;
                    }
                    // Leaderless since the last sample with a leader (or
                    // since the first waiter came, if later).
                    let first_waiter = w.values().min().copied();
                    v.checks += 1;
                    if let Some(waiter) = first_waiter {
                        let leaderless = r.at_ms.saturating_sub((*since).max(waiter));
                        if leaderless > WAITED {
                            v.violate(
                                Invariant::LeaderAfterHeal,
                                r.at_ms,
                                None,
                                format!(
                                    "{name}: no leader for {leaderless} ms while a candidate waited, {} ms after the heal",
                                    r.at_ms - heal
                                ),
                            );
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// Each contender's events for one name, in order.
pub(crate) fn events_of<'a>(
    history: &'a History,
    c: usize,
    name: &'a str,
) -> impl Iterator<Item = (u64, &'a ContenderEvent)> + 'a {
    history.records.iter().filter_map(move |r| match &r.what {
        What::Contender {
            contender,
            name: n,
            event,
            ..
        } if *contender == c && n == name => Some((r.at_ms, event)),
        _ => None,
    })
}

fn no_zombie(
    history: &History,
    owners: &BTreeMap<i64, u64>,
    disturbed: &[Vec<(u64, u64)>],
    v: &mut Verdict,
) {
    for r in &history.records {
        let What::Fault(Fault::DeleteWaiterKey { .. }) = &r.what else {
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
        let deleted = history.records.iter().find_map(|x| match &x.what {
            What::ElectionLog(log) => log
                .iter()
                .find(|e| !e.present && e.key == key && e.at_ms == r.at_ms)
                .map(|e| e.create_revision),
            _ => None,
        });
        v.checks += 1;
        let next = events_of(history, c, name)
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

fn withdrawn_leave_no_key(
    history: &History,
    log: &[LogEntry],
    disturbed: &[Vec<(u64, u64)>],
    v: &mut Verdict,
) {
    for r in &history.records {
        let What::Contender {
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
        let next_start = events_of(history, *c, name)
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
fn losing_tries_write_nothing(
    history: &History,
    log: &[LogEntry],
    owners: &BTreeMap<i64, u64>,
    disturbed: &[Vec<(u64, u64)>],
    v: &mut Verdict,
) {
    // Each contender's open try per name: when it started.
    let mut open: BTreeMap<(usize, &str), u64> = BTreeMap::new();
    for r in &history.records {
        let What::Contender {
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
                let created = log.iter().filter(|e| {
                    e.present
                        && e.at_ms >= start
                        && e.at_ms <= r.at_ms
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
fn present_after<'a>(
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
fn lossy(history: &History, c: usize) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = history
        .records
        .iter()
        .filter_map(|r| match &r.what {
            What::Fault(Fault::DropReplies { ms }) => Some((r.at_ms, r.at_ms + ms)),
            _ => None,
        })
        .collect();
    out.extend(history.spans(
        |what| {
            matches!(what, What::Fault(Fault::ContenderPartition {
                contender,
                direction: Direction::FromEtcd | Direction::Both,
                ..
            }) if *contender == c)
        },
        |what| matches!(what, What::ContenderPartitionEnded { contender } if *contender == c),
    ));
    out
}

/// A process's incarnation holds one lease, but briefly after a
/// disturbance (a lost lease is revoked within a request timeout and a
/// retry once etcd answers again), and for a TTL after a disturbance that
/// could have made a lease it never learned of.
fn one_lease(
    case: &Case,
    history: &History,
    disturbed: &[Vec<(u64, u64)>],
    samples: &[(u64, &Vec<ContenderSample>)],
    v: &mut Verdict,
) {
    let revoke_retry = 250;
    let windows = crate::checker::leader_windows(history);
    for (c, (spec, disturbed)) in case.contenders.iter().zip(disturbed).enumerate() {
        let ttl = spec.ttl * 1000;
        let lossy = lossy(history, c);
        let quiet = |at: u64| {
            let short = prompt() + revoke_retry;
            // A lease it never learned of expires by itself (a leader
            // change restarts its TTL).
            let expired = |e: u64| crate::checker::expiry_deadline(e, ttl, &windows) + prompt();
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
fn loss_reported(history: &History, samples: &[(u64, &Vec<ContenderSample>)], v: &mut Verdict) {
    const GRACE: u64 = 500;
    let stop = history
        .records
        .iter()
        .find(|r| matches!(r.what, What::StopAll))
        .map_or(u64::MAX, |r| r.at_ms);
    let resumed: Vec<(usize, u64)> = history
        .records
        .iter()
        .filter_map(|r| match &r.what {
            What::ContenderResumed { contender } => Some((*contender, r.at_ms)),
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
fn session_lease_lives(
    case: &Case,
    history: &History,
    owners: &BTreeMap<i64, u64>,
    samples: &[(u64, &Vec<ContenderSample>)],
    disturbed: &[Vec<(u64, u64)>],
    v: &mut Verdict,
) {
    let nominal = crate::bounds::Nominal::sessions();
    let ttl_of = |c: usize| case.contenders.get(c).map_or(10, |s| s.ttl).max(2);
    // Each key removed from outside: its lease, when, and for how long its
    // session may still report that lease (if it was revoked): one
    // keep-alive interval when nothing else touched the process within a
    // TTL, else a TTL.
    let revoked: Vec<(i64, u64, u64)> = history
        .records
        .iter()
        .filter_map(|r| match &r.what {
            What::KeyRemovedOutside { lease, .. } => {
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
            What::ContenderResumed { contender } => Some((*contender, r.at_ms)),
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

fn latencies(
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
        let What::Fault(Fault::ContenderCrash { contender, .. }) = &r.what else {
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
    for r in &history.records {
        let What::Contender {
            contender,
            name,
            event: ContenderEvent::Resigning,
            ..
        } = &r.what
        else {
            continue;
        };
        let next = history.records.iter().find(|x| {
            x.at_ms >= r.at_ms
                && matches!(&x.what, What::Contender { contender: c2, name: n2, event: ContenderEvent::Elected { .. }, .. } if c2 != contender && n2 == name)
        });
        if let Some(x) = next {
            if x.at_ms <= r.at_ms + 2000 {
                v.handover_ms.push(x.at_ms - r.at_ms);
            }
        }
    }
}
