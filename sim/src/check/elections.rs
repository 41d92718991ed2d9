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
//!   half a second;
//! - **a lost lease is retired**: once a leadership ends with its
//!   session's lease lost, etcd no longer holds that lease nor the lost
//!   leadership's key a TTL (and expiry slack) later, no campaign is
//!   elected on it again, and the session never reports it again.
//!
//! It also measures failover latency (a leader's process crashed to a
//! successor leading, minus the crashed leader's TTL, where the queued
//! successors were undisturbed) and handover
//! latency (resign to the successor elected).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use super::bounds::{election_bound, ms};
use super::campaigns::{
    latencies, losing_tries_write_nothing, loss_reported, no_zombie, one_lease,
    session_lease_lives, withdrawn_leave_no_key,
};
use super::contenders::{
    disturbances, during, owner, prompt, settle, undisturbed, ContenderEvents, SUCCESSION_MS,
};
use super::deletions::{deletions, Deletions};
use super::verdict::{Invariant, Verdict};
use crate::faults::schedule::Case;
use crate::history::{
    resource_key, CampaignMode, ContenderEvent, ContenderSample, DeleteCause, Entry, History,
    LogEntry,
};

/// Checks every election invariant of `case` and adds to `v`.
pub fn check(case: &Case, history: &History, v: &mut Verdict) {
    let log: &[LogEntry] = history
        .records
        .iter()
        .find_map(|r| match &r.what {
            Entry::ElectionLog(l) => Some(l.as_slice()),
            _ => None,
        })
        .unwrap_or_default();
    let owners: BTreeMap<i64, u64> = crate::check::lease_log(history)
        .map(|log| log.iter().map(|(l, life)| (*l, life.client)).collect())
        .unwrap_or_default();
    let disturbed: Vec<Vec<(u64, u64)>> = (0..case.contenders.len())
        .map(|c| disturbances(history, c))
        .collect();
    let heal_at = history
        .records
        .iter()
        .find(|r| matches!(r.what, Entry::HealAll))
        .map(|r| r.at_ms);
    let stop_at = history
        .records
        .iter()
        .find(|r| matches!(r.what, Entry::StopAll))
        .map_or(u64::MAX, |r| r.at_ms);
    let samples: Vec<(u64, &Vec<ContenderSample>)> = history
        .records
        .iter()
        .filter_map(|r| match &r.what {
            Entry::ContenderSample(s) => Some((r.at_ms, s)),
            _ => None,
        })
        .collect();
    let events = ContenderEvents::new(history);
    let deleted = deletions(log);
    one_leader_and_beliefs(case, &deleted, &disturbed, &samples, v);
    elected_records(history, log, v);
    campaigns_fail_only_when_lost(history, v);
    prompt_succession(case, &events, log, &owners, &disturbed, v);
    fenced(log, v);
    if let Some(heal) = heal_at {
        leader_after_heal(case, history, heal, stop_at, v);
    }
    no_zombie(history, &events, log, &owners, &disturbed, v);
    withdrawn_leave_no_key(history, &events, log, &disturbed, v);
    losing_tries_write_nothing(history, log, &owners, &disturbed, v);
    one_lease(case, history, &disturbed, &samples, v);
    loss_reported(history, &samples, v);
    session_lease_lives(case, history, &owners, &samples, &disturbed, v);
    super::lost_leases::lost_leases_retired(history, &deleted, &samples, v);
    latencies(case, history, log, &owners, &disturbed, &samples, v);
    crate::check::observe::check(case, history, log, v);
    crate::check::api::check(history, &events, log, &owners, case.contenders.len(), v);
}

/// etcd's log replayed from its start to an instant: the keys live then
/// (with their create revisions) and every incarnation put by then (key,
/// create revision, lease). Replays forward from where it was, or from the
/// start again for an earlier instant.
struct Replay<'a> {
    log: &'a [LogEntry],
    next: usize,
    /// The latest instant among the entries applied.
    latest: u64,
    live: BTreeMap<&'a str, i64>,
    puts: BTreeSet<(&'a str, i64, i64)>,
}

impl<'a> Replay<'a> {
    fn new(log: &'a [LogEntry]) -> Self {
        Replay {
            log,
            next: 0,
            latest: 0,
            live: BTreeMap::new(),
            puts: BTreeSet::new(),
        }
    }

    /// Every entry of the log's first run at or before `at`, applied.
    fn to(&mut self, at: u64) {
        if self.latest > at {
            *self = Replay::new(self.log);
        }
        while let Some(e) = self.log.get(self.next).filter(|e| e.at_ms <= at) {
            if e.present {
                self.live.insert(e.key.as_str(), e.create_revision);
                self.puts
                    .insert((e.key.as_str(), e.create_revision, e.lease));
            } else {
                self.live.remove(e.key.as_str());
            }
            self.latest = self.latest.max(e.at_ms);
            self.next += 1;
        }
    }
}

/// Every `Elected` against etcd's log: its key is the name's queue prefix
/// and its lease in hex (Go's `%s%x`); etcd put that key with that lease
/// by then, and its token is that incarnation's create revision; and when
/// it was reported no older key of the name was in etcd (it led).
pub(super) fn elected_records(history: &History, log: &[LogEntry], v: &mut Verdict) {
    let mut replay = Replay::new(log);
    for r in &history.records {
        let Entry::Contender {
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
        replay.to(r.at_ms);
        let put = replay.puts.contains(&(key.as_str(), *token, *lease));
        let older = replay
            .live
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(&prefix))
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
pub(super) fn campaigns_fail_only_when_lost(history: &History, v: &mut Verdict) {
    for r in &history.records {
        let Entry::Contender {
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

/// Every time a name's oldest key changes to `K` (the older ones deleted
/// by a resign, an expiry after a crash, an outside delete or revoke, or
/// `K` put on an empty queue), `K`'s campaign reports itself elected with
/// `K` within [`SUCCESSION_MS`], unless its process or etcd was
/// disturbed, `K` went meanwhile, or the campaign ended otherwise
/// (withdrawn, failed, lost, resigning). This is failover and handover
/// with their bound, for undisturbed successors.
pub(super) fn prompt_succession(
    case: &Case,
    events: &ContenderEvents,
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
        let gone = during(log, put_at, due)
            .iter()
            .any(|x| !x.present && x.key == key && x.create_revision == token);
        if gone {
            continue;
        }
        let events: Vec<(u64, &ContenderEvent)> = events
            .of(c, name)
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

pub(super) fn one_leader_and_beliefs(
    case: &Case,
    deleted: &Deletions,
    disturbed: &[Vec<(u64, u64)>],
    samples: &[(u64, &Vec<ContenderSample>)],
    v: &mut Verdict,
) {
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
pub(super) fn fenced(log: &[LogEntry], v: &mut Verdict) {
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
pub(super) fn leader_after_heal(
    case: &Case,
    history: &History,
    heal: u64,
    stop: u64,
    v: &mut Verdict,
) {
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
            Entry::Contender {
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
            Entry::ContenderSample(contenders) => {
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
