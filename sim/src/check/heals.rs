//! How fast hosts and sessions heal, along each path, against their
//! bounds; and how a returning fleet spreads its grants (the herd).

use std::collections::BTreeSet;

use super::bounds::{ms, HealPath, Nominal};
use super::hosts::healthy;
use super::leases::{fleet_outages, lease_log};
use super::verdict::{Invariant, Verdict};
use crate::faults::schedule::{Case, Direction, Fault, Target};
use crate::history::{Entry, History, HostSample};

/// Whose heals [`heal_times`] checks: the hosts' liveness, or the
/// election and lock processes' sessions. One lease engine heals both,
/// along the same paths.
pub(super) struct Healers {
    /// Each sample: when, and per subject whether it is registered with a
    /// lease etcd has (and, for a host, its key attached to it).
    samples: Vec<(u64, Vec<bool>)>,
    /// Each subject's lease TTL, seconds.
    ttls: Vec<u64>,
    /// The options they are configured with.
    nominal: Nominal,
    /// The subject and path of a record that begins one of a subject's own
    /// faults (partition, pause, crash).
    begins: fn(&Entry) -> Option<(usize, HealPath)>,
    /// The subject and path of a record that ends one.
    ends: fn(&Entry) -> Option<(usize, HealPath)>,
    /// The subject of a record that begins a partition losing etcd's
    /// messages to it (a stream it stalls stays stalled after).
    mutes: fn(&Entry) -> Option<usize>,
    /// Each revoke of a subject's lease from outside (a heal is timed from
    /// it): (when, subject).
    revokes: Vec<(u64, usize)>,
    /// Hosts (else sessions): where heals are reported, what a late one
    /// violates.
    hosts: bool,
}

impl Healers {
    /// The hosts' liveness.
    pub(super) fn hosts(
        case: &Case,
        history: &History,
        samples: &[(u64, &Vec<HostSample>)],
    ) -> Healers {
        Healers {
            samples: samples
                .iter()
                .map(|(t, s)| (*t, s.iter().map(healthy).collect()))
                .collect(),
            ttls: case.ttls.clone(),
            nominal: Nominal {
                fleet: case.ttls.len(),
                ..Nominal::default()
            },
            begins: |w| match w {
                Entry::Fault(Fault::Partition {
                    target: Target::Host(host),
                    ..
                }) => Some((*host, HealPath::Partition)),
                Entry::Fault(Fault::Pause {
                    target: Target::Host(host),
                    ..
                }) => Some((*host, HealPath::Pause)),
                Entry::Fault(Fault::Crash {
                    target: Target::Host(host),
                    ..
                }) => Some((*host, HealPath::Restart)),
                _ => None,
            },
            ends: |w| match w {
                Entry::PartitionEnded { host } => Some((*host, HealPath::Partition)),
                Entry::Resumed { host } => Some((*host, HealPath::Pause)),
                Entry::Restarted { host } => Some((*host, HealPath::Restart)),
                _ => None,
            },
            mutes: |w| match w {
                Entry::Fault(Fault::Partition {
                    target: Target::Host(host),
                    direction: Direction::FromEtcd | Direction::Both | Direction::Late { .. },
                    ..
                }) => Some(*host),
                _ => None,
            },
            revokes: history
                .records
                .iter()
                .filter_map(|r| match r.what {
                    Entry::Fault(Fault::RevokeLease { host }) => Some((r.at_ms, host)),
                    _ => None,
                })
                .collect(),
            hosts: true,
        }
    }

    /// The election and lock processes' sessions.
    pub(super) fn sessions(case: &Case, history: &History) -> Healers {
        let leases = lease_log(history);
        Healers {
            samples: history
                .records
                .iter()
                .filter_map(|r| match &r.what {
                    Entry::ContenderSample(s) => Some((
                        r.at_ms,
                        s.iter()
                            .map(|c| c.session_lease.is_some_and(|(_, live)| live))
                            .collect(),
                    )),
                    _ => None,
                })
                .collect(),
            ttls: case.contenders.iter().map(|c| c.ttl).collect(),
            nominal: Nominal::sessions(),
            begins: |w| match w {
                Entry::Fault(Fault::Partition {
                    target: Target::Contender(contender),
                    ..
                }) => Some((*contender, HealPath::Partition)),
                Entry::Fault(Fault::Pause {
                    target: Target::Contender(contender),
                    ..
                }) => Some((*contender, HealPath::Pause)),
                Entry::Fault(Fault::Crash {
                    target: Target::Contender(contender),
                    ..
                }) => Some((*contender, HealPath::Restart)),
                _ => None,
            },
            ends: |w| match w {
                Entry::ContenderPartitionEnded { contender } => {
                    Some((*contender, HealPath::Partition))
                }
                Entry::ContenderResumed { contender } => Some((*contender, HealPath::Pause)),
                Entry::ContenderRestarted { contender } => Some((*contender, HealPath::Restart)),
                _ => None,
            },
            mutes: |w| match w {
                Entry::Fault(Fault::Partition {
                    target: Target::Contender(contender),
                    direction: Direction::FromEtcd | Direction::Both | Direction::Late { .. },
                    ..
                }) => Some(*contender),
                _ => None,
            },
            // A leader's lease revoked from outside: the lease is recorded
            // with the fault, its owner in etcd's lease log.
            revokes: history
                .records
                .iter()
                .filter(|r| matches!(r.what, Entry::Fault(Fault::RevokeLeaderLease { .. })))
                .filter_map(|r| {
                    let (_, lease) = history.removed_outside_at(r.at_ms)?;
                    let client = leases?.get(&lease)?.client;
                    Some((r.at_ms, crate::history::contender_of(client)?))
                })
                .collect(),
            hosts: false,
        }
    }
}

/// From each moment a subject's path to etcd clears (partition ended,
/// pause ended, restart, etcd answering again after a leader change,
/// unanswered requests or a wipe, the global heal, its lease revoked from
/// outside) while it is not registered, to the first sample where it is,
/// unless a new fault touches it first. Kept by what cleared, and checked
/// against that path's bound ([`Nominal::heal_ms`]).
pub(super) fn heal_times(healers: &Healers, history: &History, v: &mut Verdict) {
    let nominal = &healers.nominal;
    let samples = &healers.samples;
    let request_ms = ms(nominal.liveness.request_timeout);
    // When etcd began answering again after leaving requests unanswered.
    let drops: Vec<u64> = history
        .records
        .iter()
        .filter_map(|r| match r.what {
            Entry::Fault(Fault::DropReplies { ms }) => Some(r.at_ms + ms),
            _ => None,
        })
        .collect();
    let n = samples.first().map_or(0, |(_, s)| s.len());
    let mut clears: Vec<(usize, u64, HealPath)> = healers
        .revokes
        .iter()
        .map(|(at, subject)| (*subject, *at, HealPath::Revoked))
        .collect();
    for r in &history.records {
        let everyone = |kind, at: u64| (0..n).map(move |h| (h, at, kind));
        if let Some((subject, path)) = (healers.ends)(&r.what) {
            clears.push((subject, r.at_ms, path));
        }
        match r.what {
            Entry::Fault(Fault::LeaderChange { unavailable_ms }) => {
                clears.extend(everyone(HealPath::LeaderChange, r.at_ms + unavailable_ms));
            }
            Entry::Fault(Fault::DropReplies { ms }) => {
                let path = if ms < request_ms {
                    HealPath::UnansweredBlip
                } else {
                    HealPath::Unanswered
                };
                clears.extend(everyone(path, r.at_ms + ms));
            }
            Entry::Fault(Fault::Wipe { down_ms, .. }) => {
                clears.extend(everyone(HealPath::Wiped, r.at_ms + down_ms));
            }
            Entry::HealAll => clears.extend(everyone(HealPath::GlobalHeal, r.at_ms)),
            _ => {}
        }
    }
    clears.sort_by_key(|c| c.1);
    let disturbs = |subject: usize, from: u64, to: u64| {
        history.records.iter().any(|r| {
            r.at_ms > from
                && r.at_ms <= to
                && ((healers.begins)(&r.what).is_some_and(|(s, _)| s == subject)
                    || healers.revokes.contains(&(r.at_ms, subject))
                    || matches!(
                        r.what,
                        Entry::Fault(
                            Fault::LeaderChange { .. }
                                | Fault::DropReplies { .. }
                                | Fault::Wipe { .. }
                        ) | Entry::StopAll
                    ))
        })
    };
    // An outage still on at a clear (another fault's) is not cleared.
    let outages = fleet_outages(history);
    // Each subject's own faults (partition, pause, crash) as intervals: a
    // clear for everyone does not clear a subject still cut off itself.
    let mut own: Vec<(usize, u64, u64, HealPath)> = Vec::new();
    let mut open: Vec<(usize, u64, HealPath)> = Vec::new();
    // (subject, start) of each partition that lost etcd's messages to it.
    let mut muting: BTreeSet<(usize, u64)> = BTreeSet::new();
    for r in &history.records {
        if let Some((subject, path)) = (healers.begins)(&r.what) {
            open.push((subject, r.at_ms, path));
        }
        if let Some(subject) = (healers.mutes)(&r.what) {
            muting.insert((subject, r.at_ms));
        }
        if let Some((subject, path)) = (healers.ends)(&r.what) {
            open.retain(|(h, s, k)| {
                let ends = *h == subject && *k == path;
                if ends {
                    own.push((*h, *s, r.at_ms, path));
                }
                !ends
            });
        }
    }
    own.extend(open.iter().map(|(h, s, k)| (*h, *s, u64::MAX, *k)));
    // Each subject's own partitions that lost etcd's messages to it, as
    // (subject, start, end): a keep-alive stream they stalled stays
    // stalled after.
    let muted: Vec<(usize, u64, u64)> = own
        .iter()
        .filter(|(h, s, _, k)| *k == HealPath::Partition && muting.contains(&(*h, *s)))
        .map(|(h, s, e, _)| (*h, *s, *e))
        .collect();
    // Each etcd-wide outage with the path a subject whose own partition or
    // pause hid it heals along.
    let hidden: Vec<(u64, u64, HealPath)> = history
        .records
        .iter()
        .filter_map(|r| match r.what {
            Entry::Fault(Fault::LeaderChange { unavailable_ms: d }) => {
                Some((r.at_ms, r.at_ms + d, HealPath::LeaderChange))
            }
            Entry::Fault(Fault::DropReplies { ms: d }) => {
                Some((r.at_ms, r.at_ms + d, HealPath::UnansweredBlip))
            }
            Entry::Fault(Fault::Wipe { down_ms: d, .. }) => {
                Some((r.at_ms, r.at_ms + d, HealPath::Wiped))
            }
            _ => None,
        })
        .collect();
    let probe_ms = ms(nominal.probe.interval);
    let healthy_at = |s: &Vec<bool>, subject: usize| s.get(subject).copied().unwrap_or(false);
    for (subject, at, mut kind) in clears {
        // A partition that left the process less than a probe interval
        // awake (since it began, or since the process last restarted or
        // resumed within it) may hold no probe.
        let awake = own
            .iter()
            .filter(|(h, _, e, k)| {
                *h == subject && *e <= at && matches!(k, HealPath::Restart | HealPath::Pause)
            })
            .map(|(_, _, e, _)| *e)
            .max()
            .unwrap_or(0);
        let blip = own.iter().any(|(h, s, e, k)| {
            *h == subject
                && *e == at
                && *k == HealPath::Partition
                && at - (*s).max(awake).min(at) < probe_ms
        });
        if kind == HealPath::Partition && blip {
            kind = HealPath::PartitionBlip;
        }
        // An outage still on at a clear, one that began at that very
        // instant included (a wipe straight after another), holds it.
        if kind != HealPath::GlobalHeal && outages.iter().any(|(s, e)| *s <= at && at < *e) {
            continue;
        }
        // Still cut off by a fault of its own, one that began at this very
        // clear included (a restart straight into a partition).
        if own
            .iter()
            .any(|(h, s, e, _)| *h == subject && *s <= at && at < *e)
        {
            continue;
        }
        let Some((_, first)) = samples.iter().find(|(t, _)| *t >= at) else {
            continue;
        };
        if healthy_at(first, subject) {
            continue;
        }
        let Some((t, _)) = samples
            .iter()
            .find(|(t, s)| *t >= at && healthy_at(s, subject))
        else {
            continue;
        };
        if disturbs(subject, at, *t) {
            continue;
        }
        let took = t - at;
        let ttl = healers.ttls.get(subject).copied().unwrap_or(2).max(2);
        // A subject whose own fault ended while etcd was out for everyone
        // heals along the slower of the two paths.
        let began = outages
            .iter()
            .filter(|(_, e)| *e == at)
            .map(|(s, _)| *s)
            .min()
            .unwrap_or(at);
        let mut bound = own
            .iter()
            .filter(|(h, _, e, _)| *h == subject && began <= *e && *e <= at)
            .map(|(_, _, _, k)| nominal.heal_ms(*k, ttl))
            .fold(nominal.heal_ms(kind, ttl), u64::max);
        // A partition or pause of its own hides what etcd did meanwhile
        // (an outage that broke its stream, a revoke of its lease): the
        // subject learns of it only after, along that path.
        if let Some((_, since, _, _)) = own.iter().find(|(h, _, e, k)| {
            *h == subject && *e == at && matches!(k, HealPath::Partition | HealPath::Pause)
        }) {
            // A revoke is learnt at the next keep-alive's reply, up to a
            // keep-alive interval after it: one just before the fault
            // began may be unlearnt when it begins.
            let unlearnt = since.saturating_sub(nominal.refresh_ms(ttl));
            let revoked = healers
                .revokes
                .iter()
                .filter(|(t, h)| *h == subject && unlearnt <= *t && *t <= at)
                .map(|(t, _)| (*t, *t, HealPath::Revoked));
            bound = hidden
                .iter()
                .copied()
                .filter(|(s, e, _)| *s < at && *e > *since)
                .chain(revoked)
                .map(|(_, _, path)| nominal.heal_ms(path, ttl))
                .fold(bound, u64::max);
        }
        // A partition of its own that lost etcd's messages and ended before
        // this clear may have stalled its keep-alive stream: what etcd did
        // since (a close, a TTL-0 reply) waits behind the lost message
        // until the stream counts as unanswered.
        // One that ends at this very clear stalled it too when etcd acted
        // while it lasted (an outage that closed the stream, a revoke up
        // to a keep-alive interval before it): the close or the TTL-0
        // reply was lost with the rest.
        let acted_during = |s: u64, e: u64| {
            hidden.iter().any(|(hs, he, _)| *hs < e && *he > s)
                || healers.revokes.iter().any(|(t, h)| {
                    *h == subject && s.saturating_sub(nominal.refresh_ms(ttl)) <= *t && *t <= e
                })
        };
        bound = muted
            .iter()
            .filter(|(h, s, e)| *h == subject && (*e < at || (*e == at && acted_during(*s, *e))))
            .map(|(_, _, e)| {
                e.saturating_add(nominal.stalled_heal_ms(ttl))
                    .saturating_sub(at)
            })
            .fold(bound, u64::max);
        // Within a request timeout of etcd leaving requests unanswered, the
        // subject may still wait out a request whose reply was lost,
        // whatever cleared since.
        if drops.iter().any(|e| *e <= at && at < e + request_ms) {
            bound = bound.max(nominal.heal_ms(HealPath::UnansweredBlip, ttl));
        }
        v.heal_permille_of_bound.push(took * 1000 / bound.max(1));
        v.checks += 1;
        let (invariant, who, what) = if healers.hosts {
            v.heal_ms.push(took);
            v.heal_by_kind.push((kind.label(), took));
            (
                Invariant::HealOnTime,
                Some(subject),
                "registered again".to_string(),
            )
        } else {
            v.session_heal_by_kind.push((kind.label(), took));
            (
                Invariant::SessionHealOnTime,
                None,
                format!("contender {subject}'s session registered again"),
            )
        };
        if took > bound {
            v.violate(
                invariant,
                *t,
                who,
                format!(
                    "{what} {took} ms after {} at {at} ms (bound {bound} ms)",
                    kind.label()
                ),
            );
        }
    }
}

/// Most grants served within any one second, after the fleet's first
/// second (when every host registers for the first time).
pub(super) fn peak_grants(history: &History) -> Option<u64> {
    let times = history.records.iter().find_map(|r| match &r.what {
        Entry::GrantTimes(t) => Some(t),
        _ => None,
    })?;
    peak_in(times, 1000)
}

/// How long after etcd answers again its returning fleet is watched for a
/// herd.
pub const RETURN_WINDOW_MS: u64 = 10_000;

/// The window a herd is measured over.
pub const HERD_WINDOW_MS: u64 = 10;

/// Fleets this large or larger are checked for herds.
pub const HERD_FLEET: usize = 100;

/// Most of a returning fleet's heal requests any [`HERD_WINDOW_MS`] may
/// hold, per mille. Equal jitter spreads a fleet that failed together over
/// at least half the first backoff ceiling (50 ms by default), so 10 ms
/// hold about a fifth of it; 30% leaves room for chance in a fleet of 100.
pub const HERD_BOUND_PERMILLE: u64 = 300;

/// Checks each return of a large fleet for a herd (see [`herd_share`]).
pub(super) fn herd(history: &History, fleet: usize, v: &mut Verdict) {
    let Some((share, at)) = herd_share(history, fleet) else {
        return;
    };
    v.herd_permille = Some(share);
    v.checks += 1;
    if share > HERD_BOUND_PERMILLE {
        v.violate(
            Invariant::HerdSpread,
            at,
            None,
            format!(
                "{share}‰ of the fleet's grants and keep-alive opens after etcd's return at {at} ms were sent within {HERD_WINDOW_MS} ms (bound {HERD_BOUND_PERMILLE}‰)"
            ),
        );
    }
}

/// The herd a returning fleet makes: for each time etcd answers the whole
/// fleet again (a leader change, a wipe or unanswered requests ending)
/// that brings at least half the fleet's worth of grants and keep-alive
/// opens (as sent, before etcd's queueing spreads them) in the
/// [`RETURN_WINDOW_MS`] after it, the share of those requests sent in its
/// busiest [`HERD_WINDOW_MS`], per mille.
/// The largest such share of the run, with its return's time: (share,
/// at).
pub(super) fn herd_share(history: &History, fleet: usize) -> Option<(u64, u64)> {
    let times = history.records.iter().find_map(|r| match &r.what {
        Entry::HealRequests(t) => Some(t),
        _ => None,
    })?;
    let outages = fleet_outages(history);
    outages
        .iter()
        .filter_map(|(_, at)| {
            // Not a return while another outage goes on; watched until the
            // next outage begins.
            if outages.iter().any(|(s, e)| s < at && at < e) {
                return None;
            }
            let until = outages
                .iter()
                .map(|(s, _)| *s)
                .filter(|s| s > at)
                .fold(at + RETURN_WINDOW_MS, u64::min);
            let mut after: Vec<u64> = times
                .iter()
                .copied()
                .filter(|t| t >= at && *t < until)
                .collect();
            if after.len() * 2 < fleet {
                return None;
            }
            after.sort_unstable();
            let total = u64::try_from(after.len()).ok()?;
            peak_in(&after, HERD_WINDOW_MS).map(|peak| (peak * 1000 / total, *at))
        })
        .max()
}

/// Most of `times` (sorted, virtual ms) within any `window_ms`, ignoring
/// the first second.
pub(super) fn peak_in(times: &[u64], window_ms: u64) -> Option<u64> {
    let times: Vec<u64> = times.iter().copied().filter(|t| *t >= 1000).collect();
    let mut peak = 0;
    let mut start = 0;
    for (end, t) in times.iter().enumerate() {
        while times[start] + window_ms <= *t {
            start += 1;
        }
        peak = peak.max(end - start + 1);
    }
    u64::try_from(peak).ok()
}
