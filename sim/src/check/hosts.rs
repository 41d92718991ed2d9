//! The hosts' invariants: every lease a host reports is etcd's, every
//! state is announced, a host is back after the heal, a crashed host's key
//! expires, and nothing is left after `stop`.

use std::collections::{BTreeMap, BTreeSet};

use coord::{LivenessEvent, LivenessStatus, LostReason, RevokeOutcome};

use super::bounds::{heal_bound, ms, Nominal};
use super::leases::{expiry_deadline, leader_windows, lease_log};
use super::verdict::{Invariant, Verdict};
use crate::faults::schedule::{Case, Fault, Target};
use crate::history::{Condition, Entry, History, HostSample, SAMPLE_EVERY};

/// Registered, with its key attached to the lease it reports.
pub(super) fn healthy(s: &HostSample) -> bool {
    match (&s.status, s.key_lease) {
        (Some(LivenessStatus::Registered { lease }), Some(k)) => lease.0 == k,
        _ => false,
    }
}

/// Every sample of the hosts in `history`, with its time.
pub(super) fn host_samples(history: &History) -> Vec<(u64, &Vec<HostSample>)> {
    history
        .records
        .iter()
        .filter_map(|r| match &r.what {
            Entry::Sample(s) => Some((r.at_ms, s)),
            _ => None,
        })
        .collect()
}

/// Whenever a running host reports `Registered{L}`, its key is attached to
/// `L`. Hosts just resumed from a pause get two sampling periods to run
/// their due timers. After its lease is revoked from outside, a host may
/// claim it until its next keep-alive is answered "gone"
/// ([`Nominal::learns_revoke_ms`]); when something else disturbs it near
/// the revoke, until its own deadline passes (one TTL).
pub(super) fn lease_matches(
    case: &Case,
    history: &History,
    samples: &[(u64, &Vec<HostSample>)],
    v: &mut Verdict,
) {
    let resumed: Vec<(usize, u64)> = history
        .records
        .iter()
        .filter_map(|r| match r.what {
            Entry::Resumed { host } => Some((host, r.at_ms)),
            _ => None,
        })
        .collect();
    let nominal = Nominal::default();
    // After a revoke, how long each host may still claim the lease (from
    // the revoke): its next keep-alive tells it, unless something else
    // disturbs it then; a disturbed host may claim it until its own
    // deadline (one TTL).
    let revoked: Vec<(usize, u64, Option<u64>)> = history
        .records
        .iter()
        .filter_map(|r| match r.what {
            Entry::Fault(Fault::RevokeLease { host }) => Some((host, r.at_ms)),
            // A wipe revokes every lease, with etcd down meanwhile.
            Entry::Fault(Fault::Wipe { .. }) => Some((usize::MAX, r.at_ms)),
            _ => None,
        })
        .map(|(host, at)| {
            let ttl = case.ttls.get(host).copied().unwrap_or(10).max(2);
            let quiet = host != usize::MAX && !disturbed_near(history, host, at, ttl * 1000);
            (host, at, quiet.then(|| nominal.learns_revoke_ms(ttl)))
        })
        .collect();
    for (at, hosts) in samples {
        for (i, s) in hosts.iter().enumerate() {
            if s.condition != Condition::Alive {
                continue;
            }
            let just_resumed = resumed
                .iter()
                .any(|(h, r)| *h == i && *at >= *r && *at < *r + ms(SAMPLE_EVERY) * 2);
            let ttl = case.ttls.get(i).copied().unwrap_or(2).max(2) * 1000;
            let learning = revoked.iter().any(|(h, r, window)| {
                let window = window.unwrap_or(ttl + ms(SAMPLE_EVERY));
                (*h == i || *h == usize::MAX) && *at >= *r && *at <= *r + window
            });
            if just_resumed || learning {
                continue;
            }
            if let Some(LivenessStatus::Registered { lease }) = &s.status {
                v.checks += 1;
                if s.key_lease != Some(lease.0) {
                    v.violate(
                        Invariant::LeaseMatches,
                        *at,
                        Some(i),
                        format!(
                            "reports Registered under lease {lease} but the key's lease is {:?}",
                            s.key_lease.map(|l| format!("{l:x}"))
                        ),
                    );
                }
            }
        }
    }
}

/// True if anything but a revoke touched `host` within `span_ms` before
/// or after `at`: its own partition, pause, crash or stop, or an outage of
/// etcd for everyone.
pub(super) fn disturbed_near(history: &History, host: usize, at: u64, span_ms: u64) -> bool {
    history.records.iter().any(|r| {
        r.at_ms + span_ms >= at
            && r.at_ms <= at + span_ms
            && match &r.what {
                Entry::Fault(
                    Fault::Partition {
                        target: Target::Host(h),
                        ..
                    }
                    | Fault::Pause {
                        target: Target::Host(h),
                        ..
                    }
                    | Fault::Crash {
                        target: Target::Host(h),
                        ..
                    }
                    | Fault::Stop { host: h },
                ) => *h == host,
                Entry::PartitionEnded { host: h }
                | Entry::Resumed { host: h }
                | Entry::Restarted { host: h } => *h == host,
                Entry::Fault(
                    Fault::LeaderChange { .. }
                    | Fault::DropReplies { .. }
                    | Fault::Wipe { .. }
                    | Fault::StaleReads { .. },
                ) => true,
                _ => false,
            }
    })
}

/// Every `lease_id()` read names the lease of the `state()` read with it.
/// (`state()` is held to etcd's truth by the lease-match invariant.)
pub(super) fn lease_id_agrees(history: &History, v: &mut Verdict) {
    for r in &history.records {
        let Entry::LeaseIdRead {
            host,
            lease_id,
            state_lease,
        } = &r.what
        else {
            continue;
        };
        v.checks += 1;
        if lease_id != state_lease {
            v.violate(
                Invariant::LeaseIdAgrees,
                r.at_ms,
                Some(*host),
                format!("lease_id() is {lease_id:?} while state() holds lease {state_lease:?}"),
            );
        }
    }
}

/// Every lease a host's `state()` showed as `Registered` was announced by
/// one of its `Registered` or `Reregistered` events: a subscriber learns
/// every lease the host holds. A host publishes the event before the
/// state, and its recorder takes events at the instant they are sent, so
/// only two things excuse a lease no event named: the host's subscription
/// lagged (events were lost to the recorder), or the host crashed before
/// its recorder could run after the state appeared (at that instant, or
/// while paused).
pub(super) fn states_announced(
    history: &History,
    samples: &[(u64, &Vec<HostSample>)],
    v: &mut Verdict,
) {
    let mut announced: BTreeSet<(usize, i64)> = BTreeSet::new();
    let mut lagged: BTreeSet<usize> = BTreeSet::new();
    // Per host: its crashes, and its pauses as [start, resumed).
    let mut crashes: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    let mut paused_at: BTreeMap<usize, u64> = BTreeMap::new();
    let mut pauses: BTreeMap<usize, Vec<(u64, u64)>> = BTreeMap::new();
    for r in &history.records {
        match &r.what {
            Entry::Event {
                host,
                event:
                    LivenessEvent::Registered { lease, .. } | LivenessEvent::Reregistered { lease, .. },
                ..
            } => {
                announced.insert((*host, lease.0));
            }
            Entry::EventsLagged { host } => {
                lagged.insert(*host);
            }
            Entry::Fault(Fault::Crash {
                target: Target::Host(host),
                ..
            }) => {
                crashes.entry(*host).or_default().push(r.at_ms);
            }
            Entry::Fault(Fault::Pause {
                target: Target::Host(host),
                ..
            }) => {
                paused_at.insert(*host, r.at_ms);
            }
            Entry::Resumed { host } => {
                if let Some(from) = paused_at.remove(host) {
                    pauses.entry(*host).or_default().push((from, r.at_ms));
                }
            }
            _ => {}
        }
    }
    for (host, from) in paused_at {
        pauses.entry(host).or_default().push((from, u64::MAX));
    }
    // The first sighting of each (host, lease) no event named.
    let mut unannounced: BTreeMap<(usize, i64), u64> = BTreeMap::new();
    for (at, hosts) in samples {
        for (i, s) in hosts.iter().enumerate() {
            if s.condition == Condition::Crashed || lagged.contains(&i) {
                continue;
            }
            let Some(LivenessStatus::Registered { lease }) = &s.status else {
                continue;
            };
            v.checks += 1;
            if !announced.contains(&(i, lease.0)) {
                unannounced.entry((i, lease.0)).or_insert(*at);
            }
        }
    }
    for ((host, lease), seen) in unannounced {
        // The recorder could run from `seen` on, or from the end of the
        // pause `seen` falls in.
        let runs_from = pauses
            .get(&host)
            .and_then(|p| p.iter().find(|(from, to)| (*from..*to).contains(&seen)))
            .map_or(seen, |(_, to)| *to);
        let crashed_first = crashes
            .get(&host)
            .is_some_and(|c| c.iter().any(|at| (seen..=runs_from).contains(at)));
        if !crashed_first {
            v.violate(
                Invariant::StatesAnnounced,
                seen,
                Some(host),
                format!("state() showed Registered under lease {lease:x}, which no event named"),
            );
        }
    }
}

/// Every field of every host event against etcd's lease log: a
/// registration names a lease etcd granted to that very process, with the
/// TTL etcd granted; an interruption or loss names the lease the host
/// held; a resume is exactly a re-registration under the lease just lost;
/// a loss because the lease expired, and a confirmed revoke on close, come
/// after etcd really ended that lease.
pub(super) fn liveness_records(history: &History, v: &mut Verdict) {
    let Some(log) = lease_log(history) else {
        return;
    };
    // Per (host, incarnation): the lease held, the lease last lost.
    let mut held: BTreeMap<(usize, u64), (Option<i64>, Option<i64>)> = BTreeMap::new();
    let mut lagged: BTreeSet<usize> = BTreeSet::new();
    for r in &history.records {
        let (host, incarnation, event) = match &r.what {
            Entry::Event {
                host,
                incarnation,
                event,
            } => (*host, *incarnation, event),
            Entry::EventsLagged { host } => {
                lagged.insert(*host);
                continue;
            }
            _ => continue,
        };
        if lagged.contains(&host) {
            continue;
        }
        let client = (u64::try_from(host).unwrap_or(0) << 32) | incarnation;
        let (lease_held, last_lost) = held.entry((host, incarnation)).or_default();
        let mine = |lease: i64| log.get(&lease).is_some_and(|l| l.client == client);
        let ended_by = |lease: i64, at: u64| {
            log.get(&lease)
                .and_then(|l| l.ended_at)
                .is_some_and(|e| e <= at)
        };
        let wrong = match event {
            LivenessEvent::Registered { lease, ttl } => {
                *lease_held = Some(lease.0);
                let granted = log.get(&lease.0).map(|l| l.ttl_secs);
                (!mine(lease.0) || granted != i64::try_from(ttl.as_secs()).ok())
                    .then(|| format!("granted {granted:?} s"))
            }
            LivenessEvent::KeepAliveInterrupted { lease, .. } => {
                (*lease_held != Some(lease.0)).then(|| format!("held {lease_held:?}"))
            }
            LivenessEvent::Lost { lease, reason } => {
                let was = lease_held.take();
                *last_lost = Some(lease.0);
                if was != Some(lease.0) {
                    Some(format!("held {was:?}"))
                } else if matches!(reason, LostReason::LeaseExpired) && !ended_by(lease.0, r.at_ms)
                {
                    Some(format!("etcd still had it: {:?}", log.get(&lease.0)))
                } else {
                    None
                }
            }
            LivenessEvent::Reregistered { lease, resumed } => {
                *lease_held = Some(lease.0);
                let is_resume = *last_lost == Some(lease.0);
                (!mine(lease.0) || *resumed != is_resume).then(|| {
                    format!(
                        "last lost {last_lost:?}, granted to {:?}",
                        log.get(&lease.0)
                    )
                })
            }
            LivenessEvent::Closed {
                revoke: RevokeOutcome::Revoked(lease),
            } => (!mine(lease.0) || !ended_by(lease.0, r.at_ms))
                .then(|| format!("etcd: {:?}", log.get(&lease.0))),
            LivenessEvent::Closed {
                revoke: RevokeOutcome::NotConfirmed(lease),
            } => (!mine(lease.0)).then(|| format!("etcd: {:?}", log.get(&lease.0))),
            _ => None,
        };
        v.checks += 1;
        if let Some(why) = wrong {
            v.violate(
                Invariant::LivenessRecords,
                r.at_ms,
                Some(host),
                format!("{event:?} from incarnation {incarnation}: {why}"),
            );
        }
    }
}

pub(super) fn back_after_heal(
    case: &Case,
    history: &History,
    heal_at: u64,
    stop_all_at: Option<u64>,
    samples: &[(u64, &Vec<HostSample>)],
    v: &mut Verdict,
) {
    let stopped_hosts: Vec<usize> = history
        .records
        .iter()
        .filter(|r| r.at_ms <= heal_at)
        .filter_map(|r| match r.what {
            Entry::Fault(Fault::Stop { host }) => Some(host),
            _ => None,
        })
        .collect();
    let deadline = heal_at + ms(heal_bound());
    let Some((at, hosts)) = samples.iter().find(|(at, _)| *at >= deadline) else {
        return;
    };
    if stop_all_at.is_some_and(|s| s <= *at) {
        return;
    }
    for i in 0..case.ttls.len() {
        if stopped_hosts.contains(&i) {
            continue;
        }
        v.checks += 1;
        match hosts.get(i) {
            Some(s) if healthy(s) => {}
            other => v.violate(
                Invariant::BackAfterHeal,
                *at,
                Some(i),
                format!(
                    "not registered {:?} after the heal: {other:?}",
                    heal_bound()
                ),
            ),
        }
    }
}

pub(super) fn crashed_keys_expire(
    case: &Case,
    history: &History,
    samples: &[(u64, &Vec<HostSample>)],
    v: &mut Verdict,
) {
    let windows = leader_windows(history);
    for (idx, r) in history.records.iter().enumerate() {
        let Entry::Fault(Fault::Crash {
            target: Target::Host(host),
            ..
        }) = r.what
        else {
            continue;
        };
        let crashed = r.at_ms;
        let restarted = history.records[idx..]
            .iter()
            .find(|x| matches!(x.what, Entry::Restarted { host: h } if h == host))
            .map_or(u64::MAX, |x| x.at_ms);
        let ttl = case.ttls.get(host).copied().unwrap_or(2).max(2) * 1000;
        let deadline = expiry_deadline(crashed, ttl, &windows);
        let gone = samples
            .iter()
            .find(|(at, s)| *at >= crashed && *at < restarted && s[host].key_lease.is_none())
            .map(|(at, _)| *at);
        if let Some(g) = gone {
            v.detection_ms.push(g - crashed);
        }
        if deadline >= restarted {
            continue;
        }
        for (at, s) in samples
            .iter()
            .filter(|(at, _)| *at >= deadline && *at < restarted)
        {
            v.checks += 1;
            if let Some(lease) = s[host].key_lease {
                v.violate(
                    Invariant::CrashedKeyExpires,
                    *at,
                    Some(host),
                    format!(
                        "crashed at {crashed} ms, key still attached to lease {lease:x} at {at} ms"
                    ),
                );
            }
        }
    }
}

pub(super) fn no_ghost(
    case: &Case,
    history: &History,
    samples: &[(u64, &Vec<HostSample>)],
    v: &mut Verdict,
) {
    let stop_all_at = history
        .records
        .iter()
        .find(|r| matches!(r.what, Entry::StopAll))
        .map(|r| r.at_ms);
    let windows = leader_windows(history);
    // Per host: from when its key must be absent for good.
    let mut gone_from: Vec<Option<u64>> = vec![None; case.ttls.len()];
    let mut returned = vec![false; case.ttls.len()];
    // Per host: the last crash. A stopping process can only revoke its own
    // lease; a key left by an earlier, crashed incarnation lives until that
    // lease expires.
    let mut crashed_at: Vec<Option<u64>> = vec![None; case.ttls.len()];
    for r in &history.records {
        match &r.what {
            Entry::Fault(Fault::Crash {
                target: Target::Host(host),
                ..
            }) => {
                if let Some(c) = crashed_at.get_mut(*host) {
                    *c = Some(r.at_ms);
                }
            }
            Entry::Stopped { host, result } => {
                v.checks += 1;
                if let Some(flag) = returned.get_mut(*host) {
                    *flag = true;
                }
                let ttl = case.ttls.get(*host).copied().unwrap_or(2).max(2) * 1000;
                let earlier = crashed_at
                    .get(*host)
                    .copied()
                    .flatten()
                    .map_or(0, |c| expiry_deadline(c, ttl, &windows));
                let from = match result {
                    // etcd confirmed the revoke: gone at once.
                    Ok(()) => r.at_ms,
                    // Unconfirmed: the lease expires by itself.
                    Err(coord::Error::RevokeNotConfirmed { .. }) => {
                        expiry_deadline(r.at_ms, ttl, &windows)
                    }
                    Err(e) => {
                        v.violate(
                            Invariant::StopEndsTask,
                            r.at_ms,
                            Some(*host),
                            format!("stop failed: {e}"),
                        );
                        expiry_deadline(r.at_ms, ttl, &windows)
                    }
                };
                if stop_all_at.is_some_and(|s| r.at_ms >= s) && result.is_err() {
                    v.violate(
                        Invariant::StopEndsTask,
                        r.at_ms,
                        Some(*host),
                        format!("stop with every fault healed did not confirm: {result:?}"),
                    );
                }
                if let Some(slot) = gone_from.get_mut(*host) {
                    *slot = Some(from.max(earlier));
                }
            }
            Entry::TaskEnded { host, ended } => {
                v.checks += 1;
                if !ended {
                    v.violate(
                        Invariant::StopEndsTask,
                        r.at_ms,
                        Some(*host),
                        "the handle's task kept running after stop".into(),
                    );
                }
            }
            _ => {}
        }
    }
    if let Some(s) = stop_all_at {
        for (i, done) in returned.iter().enumerate() {
            if !done {
                v.violate(
                    Invariant::StopEndsTask,
                    s,
                    Some(i),
                    "stop never returned".into(),
                );
            }
        }
    }
    for (at, hosts) in samples {
        for (i, s) in hosts.iter().enumerate() {
            if let Some(from) = gone_from.get(i).copied().flatten() {
                if *at > from {
                    v.checks += 1;
                    if let Some(lease) = s.key_lease {
                        v.violate(
                            Invariant::NoGhost,
                            *at,
                            Some(i),
                            format!(
                                "key present (lease {lease:x}) after stop (due gone at {from} ms)"
                            ),
                        );
                    }
                }
            }
        }
    }
}
