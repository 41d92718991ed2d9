//! Invariants, checked over a recorded [`History`] by an outside observer,
//! never by the code under test. Liveness invariants:
//!
//! - **lease matches**: whenever a running host reports `Registered{L}`,
//!   its key exists in etcd attached to `L`;
//! - **back after heal**: once everything heals, every host is registered
//!   (and its key attached to the lease it reports) within
//!   [`heal_bound`](crate::harness::heal_bound);
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
//!   [`watcher_bound`](crate::harness::watcher_bound), both the replayed
//!   view and the watcher's `view()` equal the hosts in etcd (with their
//!   mod revisions);
//! - **complete**: whenever a watcher has been undisturbed for that bound,
//!   its replayed view agrees with every host whose key has been stably
//!   present or absent for the last second.
//!
//! It also measures detection latency (crash to key gone), heal latency
//! (path to etcd clear to registered again) and watcher lag (etcd change
//! to event delivered, while undisturbed).

use std::time::Duration;

use std::collections::{BTreeMap, BTreeSet};

use coord::{LivenessEvent, LivenessStatus, LostReason, RevokeOutcome};

use crate::bounds::{HealPath, Nominal};
use crate::harness::{heal_bound, EXPIRY_SLACK};
use crate::history::{Condition, History, HostSample, What, SAMPLE_EVERY};
use crate::schedule::{Case, Direction, Fault};

/// Which invariant failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Invariant {
    /// A host reported a lease its key is not attached to.
    LeaseMatches,
    /// A host's `lease_id()` disagreed with its `state()`: it names the
    /// lease while `Registered`, and nothing otherwise.
    LeaseIdAgrees,
    /// A host's `state()` showed it `Registered` under a lease that none
    /// of its `Registered` or `Reregistered` events named.
    StatesAnnounced,
    /// A host was not registered within the bound after the heal.
    BackAfterHeal,
    /// A host took longer to register again than the path that cleared
    /// its way to etcd allows (see [`crate::bounds`]).
    HealOnTime,
    /// An election or lock process's session registered again later than
    /// its heal path's bound.
    SessionHealOnTime,
    /// A crashed host's key outlived its TTL plus slack.
    CrashedKeyExpires,
    /// A key was present after its host stopped.
    NoGhost,
    /// `stop` failed or the task kept running.
    StopEndsTask,
    /// The simulation panicked.
    NoPanic,
    /// The simulator's own plumbing delivered a message of the wrong type.
    SimulatorSound,
    /// A watcher's events do not replay soundly.
    WatcherSound,
    /// A watcher's view did not converge to etcd's after the heal.
    WatcherConverges,
    /// An undisturbed watcher missed a change.
    WatcherComplete,
    /// A watcher's view stayed stale while its `status()` said `Watching`.
    WatcherSaysStale,
    /// A watcher retried because its consumer stalled.
    StallBreaksNothing,
    /// A watcher's event reported a record etcd never wrote, or a previous
    /// or last-seen record its own events never gave.
    WatcherRecords,
    /// A host's event named a lease etcd never granted it, a TTL etcd did
    /// not grant, a lease it did not hold, a resume that was not, or a
    /// lease "expired" or "revoked" that etcd still had.
    LivenessRecords,
    /// An `Elected` disagreed with etcd: its key is not the name's queue
    /// prefix and its lease in hex, etcd never put that key with that lease
    /// and that create revision as its token, or an older key of the name
    /// was still in etcd.
    ElectionRecords,
    /// A waiter whose key became its name's oldest, undisturbed, did not
    /// report itself elected within [`SUCCESSION_MS`](crate::election_checker::SUCCESSION_MS).
    PromptSuccession,
    /// A campaign failed with an error that is not a loss (its key or
    /// lease gone): etcd answered or the process was cut off, so only a
    /// loss may end a campaign.
    CampaignFailsOnlyWhenLost,
    /// Two handles of one name believed they lead while both keys existed.
    OneLeader,
    /// A leader's belief outlived its key (beyond the bound).
    BeliefEnds,
    /// A write landed on a fenced resource under a token that did not hold
    /// the name.
    Fenced,
    /// A name had no leader long after the heal.
    LeaderAfterHeal,
    /// A waiter whose key was deleted was elected, or failed late.
    NoZombie,
    /// A withdrawn campaign's key outlived the bound.
    WithdrawnLeavesNoKey,
    /// A try that lost created its key.
    TryWritesNothing,
    /// An undisturbed session held more than one lease.
    OneLeasePerSession,
    /// A leadership on a lease its session no longer holds was not ended.
    LossReported,
    /// A session reported a lease etcd did not have.
    SessionLeaseLives,
    /// An observation disagreed with etcd's leader at its revision.
    ObserverSound,
    /// An observer skipped a leader without a compaction to excuse it.
    ObserverComplete,
    /// An observer's last report was not etcd's settled leader.
    ObserverConverges,
    /// An undisturbed observer reported a change of leader later than
    /// [`SUCCESSION_MS`](crate::election_checker::SUCCESSION_MS).
    ObserverPrompt,
    /// A leadership's `is_leader()` or `has_ended()` contradicted its state:
    /// not leading when just elected undisturbed, ended when just elected,
    /// leading after `lost()` fired or `resign()` returned, leading and
    /// ended at once, or not leading just before etcd applied its guarded
    /// write (undisturbed).
    IsLeaderTruth,
    /// `lost()` completed before the leadership ended, or with a loss that
    /// did not happen (resigned without a resign, session closed before a
    /// close, key deleted while etcd had it).
    LostTruth,
    /// An undisturbed `resign()`/`unlock()` returned `Ok` with the key still
    /// in etcd (or `lost()` then not "resigned"), or a dropped leadership's
    /// key outlived a request timeout + 1 s.
    ResignReleases,
    /// A `proclaim` returned `Ok` that etcd never applied.
    ProclaimApplied,
    /// `Election::leader` returned a leader etcd never had during the call.
    LeaderReadTrue,
    /// An undisturbed try lost on a queue that was empty throughout.
    TryWinsEmptyQueue,
    /// An undisturbed `close()` returned `Ok` with the session's lease alive.
    CloseRevokes,
    /// A returning fleet of 100 or more hosts sent more than
    /// [`HERD_BOUND_PERMILLE`] of its heal requests within
    /// [`HERD_WINDOW_MS`]: a thundering herd.
    HerdSpread,
}

/// One violation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant.
    pub invariant: Invariant,
    /// Virtual ms.
    pub at_ms: u64,
    /// The host, if one.
    pub host: Option<usize>,
    /// What was seen.
    pub detail: String,
}

/// What the checker found and measured.
#[derive(Debug, Clone, Default)]
pub struct Verdict {
    /// Violations (at most one per invariant and host).
    pub violations: Vec<Violation>,
    /// Individual checks made.
    pub checks: u64,
    /// Crash to key gone, ms.
    pub detection_ms: Vec<u64>,
    /// Path clear to registered again, ms.
    pub heal_ms: Vec<u64>,
    /// The same, by what cleared: (kind, ms).
    pub heal_by_kind: Vec<(&'static str, u64)>,
    /// The sessions' heals (election and lock processes), by what cleared:
    /// (kind, ms).
    pub session_heal_by_kind: Vec<(&'static str, u64)>,
    /// Each heal (hosts' and sessions') as a share of its path's bound,
    /// per mille: how close the run came to its bounds.
    pub heal_permille_of_bound: Vec<u64>,
    /// etcd change to watcher event, ms (undisturbed watchers only).
    pub lag_ms: Vec<u64>,
    /// A disturbance of a host watcher ended to its view complete again,
    /// by what disturbed it: (kind, ms).
    pub catch_up_by_kind: Vec<(&'static str, u64)>,
    /// Each catch-up as a share of its path's bound, per mille.
    pub catch_up_permille_of_bound: Vec<u64>,
    /// Most lease grants etcd served in any one second after the first,
    /// as a percentage of the fleet (fleets of 5 or more hosts): the
    /// re-registration peak, where a thundering herd would show.
    pub peak_grant_pct: Option<u64>,
    /// The densest herd of the run (fleets of 100 or more hosts): the
    /// largest share, per mille, of a returning fleet's grants and
    /// keep-alive opens sent within [`HERD_WINDOW_MS`].
    pub herd_permille: Option<u64>,
    /// A leader's process crashed to a successor leading, minus its TTL, ms.
    pub failover_ms: Vec<u64>,
    /// Resign to the successor elected, ms.
    pub handover_ms: Vec<u64>,
}

impl Verdict {
    /// Records a violation (at most one per invariant and host).
    pub(crate) fn violate(
        &mut self,
        invariant: Invariant,
        at_ms: u64,
        host: Option<usize>,
        detail: String,
    ) {
        let dup = self
            .violations
            .iter()
            .any(|v| v.invariant == invariant && v.host == host);
        if !dup {
            self.violations.push(Violation {
                invariant,
                at_ms,
                host,
                detail,
            });
        }
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Registered, with its key attached to the lease it reports.
fn healthy(s: &HostSample) -> bool {
    match (&s.status, s.key_lease) {
        (Some(LivenessStatus::Registered { lease }), Some(k)) => lease.0 == k,
        _ => false,
    }
}

/// Every sample of the hosts in `history`, with its time.
fn host_samples(history: &History) -> Vec<(u64, &Vec<HostSample>)> {
    history
        .records
        .iter()
        .filter_map(|r| match &r.what {
            What::Sample(s) => Some((r.at_ms, s)),
            _ => None,
        })
        .collect()
}

/// Checks every invariant over `history` of `case`.
pub fn check(case: &Case, history: &History) -> Verdict {
    let mut v = Verdict::default();
    let samples = host_samples(history);
    let at_of = |pred: &dyn Fn(&What) -> bool| {
        history
            .records
            .iter()
            .find(|r| pred(&r.what))
            .map(|r| r.at_ms)
    };
    let heal_at = at_of(&|w| matches!(w, What::HealAll));
    let stop_all_at = at_of(&|w| matches!(w, What::StopAll));

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
    crate::watcher_checker::watchers(history, case.ttls.len(), heal_at, stop_all_at, &mut v);
    if !case.contenders.is_empty() {
        crate::election_checker::check(case, history, &mut v);
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
        if let What::SimulatorAnomalies(n) = r.what {
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

/// Whenever a running host reports `Registered{L}`, its key is attached to
/// `L`. Hosts just resumed from a pause get two sampling periods to run
/// their due timers. After its lease is revoked from outside, a host may
/// claim it until its next keep-alive is answered "gone"
/// ([`Nominal::learns_revoke_ms`]); when something else disturbs it near
/// the revoke, until its own deadline passes (one TTL).
fn lease_matches(
    case: &Case,
    history: &History,
    samples: &[(u64, &Vec<HostSample>)],
    v: &mut Verdict,
) {
    let resumed: Vec<(usize, u64)> = history
        .records
        .iter()
        .filter_map(|r| match r.what {
            What::Resumed { host } => Some((host, r.at_ms)),
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
            What::Fault(Fault::RevokeLease { host }) => Some((host, r.at_ms)),
            // A wipe revokes every lease, with etcd down meanwhile.
            What::Fault(Fault::Wipe { .. }) => Some((usize::MAX, r.at_ms)),
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
fn disturbed_near(history: &History, host: usize, at: u64, span_ms: u64) -> bool {
    history.records.iter().any(|r| {
        r.at_ms + span_ms >= at
            && r.at_ms <= at + span_ms
            && match &r.what {
                What::Fault(
                    Fault::Partition { host: h, .. }
                    | Fault::Pause { host: h, .. }
                    | Fault::Crash { host: h, .. }
                    | Fault::Stop { host: h },
                ) => *h == host,
                What::PartitionEnded { host: h }
                | What::Resumed { host: h }
                | What::Restarted { host: h } => *h == host,
                What::Fault(
                    Fault::LeaderChange { .. }
                    | Fault::DropReplies { .. }
                    | Fault::Wipe { .. }
                    | Fault::StaleReads { .. },
                ) => true,
                _ => false,
            }
    })
}

/// etcd's lease log: every lease granted, to whom, and when it ended.
pub(crate) fn lease_log(history: &History) -> Option<&BTreeMap<i64, crate::history::LeaseLife>> {
    history.records.iter().find_map(|r| match &r.what {
        What::LeaseLog(log) => Some(log),
        _ => None,
    })
}

/// Every `lease_id()` read names the lease of the `state()` read with it.
/// (`state()` is held to etcd's truth by the lease-match invariant.)
fn lease_id_agrees(history: &History, v: &mut Verdict) {
    for r in &history.records {
        let What::LeaseIdRead {
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
fn states_announced(history: &History, samples: &[(u64, &Vec<HostSample>)], v: &mut Verdict) {
    let mut announced: BTreeSet<(usize, i64)> = BTreeSet::new();
    let mut lagged: BTreeSet<usize> = BTreeSet::new();
    // Per host: its crashes, and its pauses as [start, resumed).
    let mut crashes: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    let mut paused_at: BTreeMap<usize, u64> = BTreeMap::new();
    let mut pauses: BTreeMap<usize, Vec<(u64, u64)>> = BTreeMap::new();
    for r in &history.records {
        match &r.what {
            What::Event {
                host,
                event:
                    LivenessEvent::Registered { lease, .. } | LivenessEvent::Reregistered { lease, .. },
                ..
            } => {
                announced.insert((*host, lease.0));
            }
            What::EventsLagged { host } => {
                lagged.insert(*host);
            }
            What::Fault(Fault::Crash { host, .. }) => {
                crashes.entry(*host).or_default().push(r.at_ms);
            }
            What::Fault(Fault::Pause { host, .. }) => {
                paused_at.insert(*host, r.at_ms);
            }
            What::Resumed { host } => {
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
fn liveness_records(history: &History, v: &mut Verdict) {
    let Some(log) = lease_log(history) else {
        return;
    };
    // Per (host, incarnation): the lease held, the lease last lost.
    let mut held: BTreeMap<(usize, u64), (Option<i64>, Option<i64>)> = BTreeMap::new();
    let mut lagged: BTreeSet<usize> = BTreeSet::new();
    for r in &history.records {
        let (host, incarnation, event) = match &r.what {
            What::Event {
                host,
                incarnation,
                event,
            } => (*host, *incarnation, event),
            What::EventsLagged { host } => {
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

fn back_after_heal(
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
            What::Fault(Fault::Stop { host }) => Some(host),
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

fn crashed_keys_expire(
    case: &Case,
    history: &History,
    samples: &[(u64, &Vec<HostSample>)],
    v: &mut Verdict,
) {
    let windows = leader_windows(history);
    for (idx, r) in history.records.iter().enumerate() {
        let What::Fault(Fault::Crash { host, .. }) = r.what else {
            continue;
        };
        let crashed = r.at_ms;
        let restarted = history.records[idx..]
            .iter()
            .find(|x| matches!(x.what, What::Restarted { host: h } if h == host))
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

fn no_ghost(case: &Case, history: &History, samples: &[(u64, &Vec<HostSample>)], v: &mut Verdict) {
    let stop_all_at = history
        .records
        .iter()
        .find(|r| matches!(r.what, What::StopAll))
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
            What::Fault(Fault::Crash { host, .. }) => {
                if let Some(c) = crashed_at.get_mut(*host) {
                    *c = Some(r.at_ms);
                }
            }
            What::Stopped { host, result } => {
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
            What::TaskEnded { host, ended } => {
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

/// Every outage of etcd for the whole fleet (a leader change, unanswered
/// requests, a wipe) as (start, end), virtual ms.
fn fleet_outages(history: &History) -> Vec<(u64, u64)> {
    history
        .records
        .iter()
        .filter_map(|r| match r.what {
            What::Fault(Fault::LeaderChange { unavailable_ms: d })
            | What::Fault(Fault::DropReplies { ms: d })
            | What::Fault(Fault::Wipe { down_ms: d, .. }) => Some((r.at_ms, r.at_ms + d)),
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
            What::Fault(Fault::LeaderChange { unavailable_ms }) => {
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

/// Whose heals [`heal_times`] checks: the hosts' liveness, or the
/// election and lock processes' sessions. One lease engine heals both,
/// along the same paths.
struct Healers {
    /// Each sample: when, and per subject whether it is registered with a
    /// lease etcd has (and, for a host, its key attached to it).
    samples: Vec<(u64, Vec<bool>)>,
    /// Each subject's lease TTL, seconds.
    ttls: Vec<u64>,
    /// The options they are configured with.
    nominal: Nominal,
    /// The subject and path of a record that begins one of a subject's own
    /// faults (partition, pause, crash).
    begins: fn(&What) -> Option<(usize, HealPath)>,
    /// The subject and path of a record that ends one.
    ends: fn(&What) -> Option<(usize, HealPath)>,
    /// The subject of a record that begins a partition losing etcd's
    /// messages to it (a stream it stalls stays stalled after).
    mutes: fn(&What) -> Option<usize>,
    /// Each revoke of a subject's lease from outside (a heal is timed from
    /// it): (when, subject).
    revokes: Vec<(u64, usize)>,
    /// Hosts (else sessions): where heals are reported, what a late one
    /// violates.
    hosts: bool,
}

impl Healers {
    /// The hosts' liveness.
    fn hosts(case: &Case, history: &History, samples: &[(u64, &Vec<HostSample>)]) -> Healers {
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
                What::Fault(Fault::Partition { host, .. }) => Some((*host, HealPath::Partition)),
                What::Fault(Fault::Pause { host, .. }) => Some((*host, HealPath::Pause)),
                What::Fault(Fault::Crash { host, .. }) => Some((*host, HealPath::Restart)),
                _ => None,
            },
            ends: |w| match w {
                What::PartitionEnded { host } => Some((*host, HealPath::Partition)),
                What::Resumed { host } => Some((*host, HealPath::Pause)),
                What::Restarted { host } => Some((*host, HealPath::Restart)),
                _ => None,
            },
            mutes: |w| match w {
                What::Fault(Fault::Partition {
                    host,
                    direction: Direction::FromEtcd | Direction::Both,
                    ..
                }) => Some(*host),
                _ => None,
            },
            revokes: history
                .records
                .iter()
                .filter_map(|r| match r.what {
                    What::Fault(Fault::RevokeLease { host }) => Some((r.at_ms, host)),
                    _ => None,
                })
                .collect(),
            hosts: true,
        }
    }

    /// The election and lock processes' sessions.
    fn sessions(case: &Case, history: &History) -> Healers {
        let leases = lease_log(history);
        Healers {
            samples: history
                .records
                .iter()
                .filter_map(|r| match &r.what {
                    What::ContenderSample(s) => Some((
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
                What::Fault(Fault::ContenderPartition { contender, .. }) => {
                    Some((*contender, HealPath::Partition))
                }
                What::Fault(Fault::ContenderPause { contender, .. }) => {
                    Some((*contender, HealPath::Pause))
                }
                What::Fault(Fault::ContenderCrash { contender, .. }) => {
                    Some((*contender, HealPath::Restart))
                }
                _ => None,
            },
            ends: |w| match w {
                What::ContenderPartitionEnded { contender } => {
                    Some((*contender, HealPath::Partition))
                }
                What::ContenderResumed { contender } => Some((*contender, HealPath::Pause)),
                What::ContenderRestarted { contender } => Some((*contender, HealPath::Restart)),
                _ => None,
            },
            mutes: |w| match w {
                What::Fault(Fault::ContenderPartition {
                    contender,
                    direction: Direction::FromEtcd | Direction::Both,
                    ..
                }) => Some(*contender),
                _ => None,
            },
            // A leader's lease revoked from outside: the lease is recorded
            // with the fault, its owner in etcd's lease log.
            revokes: history
                .records
                .iter()
                .filter(|r| matches!(r.what, What::Fault(Fault::RevokeLeaderLease { .. })))
                .filter_map(|r| {
                    let (_, lease) = history.removed_outside_at(r.at_ms)?;
                    let client = leases?.get(&lease)?.client;
                    Some((r.at_ms, crate::contenders::contender_of(client)?))
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
fn heal_times(healers: &Healers, history: &History, v: &mut Verdict) {
    let nominal = &healers.nominal;
    let samples = &healers.samples;
    let request_ms = ms(nominal.liveness.request_timeout);
    // When etcd began answering again after leaving requests unanswered.
    let drops: Vec<u64> = history
        .records
        .iter()
        .filter_map(|r| match r.what {
            What::Fault(Fault::DropReplies { ms }) => Some(r.at_ms + ms),
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
            What::Fault(Fault::LeaderChange { unavailable_ms }) => {
                clears.extend(everyone(HealPath::LeaderChange, r.at_ms + unavailable_ms));
            }
            What::Fault(Fault::DropReplies { ms }) => {
                let path = if ms < request_ms {
                    HealPath::UnansweredBlip
                } else {
                    HealPath::Unanswered
                };
                clears.extend(everyone(path, r.at_ms + ms));
            }
            What::Fault(Fault::Wipe { down_ms, .. }) => {
                clears.extend(everyone(HealPath::Wiped, r.at_ms + down_ms));
            }
            What::HealAll => clears.extend(everyone(HealPath::GlobalHeal, r.at_ms)),
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
                        What::Fault(
                            Fault::LeaderChange { .. }
                                | Fault::DropReplies { .. }
                                | Fault::Wipe { .. }
                        ) | What::StopAll
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
            What::Fault(Fault::LeaderChange { unavailable_ms: d }) => {
                Some((r.at_ms, r.at_ms + d, HealPath::LeaderChange))
            }
            What::Fault(Fault::DropReplies { ms: d }) => {
                Some((r.at_ms, r.at_ms + d, HealPath::UnansweredBlip))
            }
            What::Fault(Fault::Wipe { down_ms: d, .. }) => {
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
fn peak_grants(history: &History) -> Option<u64> {
    let times = history.records.iter().find_map(|r| match &r.what {
        What::GrantTimes(t) => Some(t),
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
fn herd(history: &History, fleet: usize, v: &mut Verdict) {
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
fn herd_share(history: &History, fleet: usize) -> Option<(u64, u64)> {
    let times = history.records.iter().find_map(|r| match &r.what {
        What::HealRequests(t) => Some(t),
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
fn peak_in(times: &[u64], window_ms: u64) -> Option<u64> {
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

#[cfg(test)]
#[path = "checker_tests.rs"]
mod tests;
