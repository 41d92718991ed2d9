//! Campaign summary and a readable timeline of one run.

use std::collections::BTreeMap;
use std::fmt::Write;

use coord::{LivenessEvent, LivenessStatus};

use crate::history::{Entry, History, SAMPLE_EVERY};
use crate::run::runner::CaseResult;

/// Totals over a campaign.
#[derive(Debug, Default)]
pub struct Summary {
    /// Cases run.
    pub seeds: u64,
    /// Virtual time covered, ms.
    pub virtual_ms: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Invariant checks made.
    pub checks: u64,
    /// Failed cases: seed and violations.
    pub failures: Vec<CaseResult>,
    /// Crash to key gone, ms.
    pub detection_ms: Vec<u64>,
    /// Path clear to registered again, ms.
    pub heal_ms: Vec<u64>,
    /// The same, by what cleared the path.
    pub heal_by_kind: BTreeMap<&'static str, Vec<u64>>,
    /// The sessions' heals (election and lock processes), by what cleared
    /// the path.
    pub session_heal_by_kind: BTreeMap<&'static str, Vec<u64>>,
    /// Each heal (hosts' and sessions') as a share of its path's bound,
    /// per mille.
    pub heal_permille_of_bound: Vec<u64>,
    /// The slowest heal: ms, seed, what cleared the path (to replay it).
    pub slowest_heal: Option<(u64, u64, &'static str)>,
    /// `stop` calls that etcd confirmed / could not confirm.
    pub stops: (u64, u64),
    /// etcd change to watcher event, ms.
    pub lag_ms: Vec<u64>,
    /// A watcher's disturbance ended to its view complete, by what
    /// disturbed it, ms.
    pub catch_up_by_kind: BTreeMap<&'static str, Vec<u64>>,
    /// Each catch-up as a share of its path's bound, per mille.
    pub catch_up_permille_of_bound: Vec<u64>,
    /// The slowest catch-up: ms, seed, what disturbed the watcher.
    pub slowest_catch_up: Option<(u64, u64, &'static str)>,
    /// Per run: most grants in one second, % of the fleet.
    pub peak_grant_pct: Vec<u64>,
    /// Densest herd per run, per mille (fleets of 100+ hosts).
    pub herd_permille: Vec<u64>,
    /// Leader crash to successor leading, minus the TTL, ms.
    pub failover_ms: Vec<u64>,
    /// Resign to successor elected, ms.
    pub handover_ms: Vec<u64>,
    /// Names whose lock history was found linearizable, or undecided.
    pub lock_histories: crate::check::LockHistories,
}

/// What a campaign's summary takes from a run's history: its faults by
/// kind and its stops, confirmed and not. Taken where the case ran, so
/// that its history can be dropped there.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HistoryTally {
    faults: BTreeMap<&'static str, u64>,
    stops: (u64, u64),
}

impl HistoryTally {
    /// The tally of `history`.
    pub fn of(history: &History) -> Self {
        let mut tally = HistoryTally::default();
        for rec in &history.records {
            match &rec.what {
                Entry::Fault(f) => *tally.faults.entry(f.kind()).or_default() += 1,
                Entry::Stopped { result: Ok(()), .. } => tally.stops.0 += 1,
                Entry::Stopped { result: Err(_), .. } => tally.stops.1 += 1,
                _ => {}
            }
        }
        tally
    }
}

impl Summary {
    /// Adds one case, with the tally of its history (the history itself
    /// may be gone). Returns the violations of a failed one.
    pub fn add(
        &mut self,
        mut r: CaseResult,
        tally: &HistoryTally,
    ) -> Option<Vec<crate::check::Violation>> {
        self.seeds += 1;
        self.virtual_ms += r.virtual_ms;
        for (kind, n) in &tally.faults {
            *self.faults.entry(kind).or_default() += n;
        }
        self.stops.0 += tally.stops.0;
        self.stops.1 += tally.stops.1;
        self.checks += r.verdict.checks;
        self.detection_ms.extend(&r.verdict.detection_ms);
        self.heal_ms.extend(&r.verdict.heal_ms);
        let seed = r.case.seed;
        add_by_kind(
            &mut self.heal_by_kind,
            Some(&mut self.slowest_heal),
            &r.verdict.heal_by_kind,
            seed,
        );
        add_by_kind(
            &mut self.session_heal_by_kind,
            None,
            &r.verdict.session_heal_by_kind,
            seed,
        );
        self.heal_permille_of_bound
            .extend(&r.verdict.heal_permille_of_bound);
        self.lag_ms.extend(&r.verdict.lag_ms);
        add_by_kind(
            &mut self.catch_up_by_kind,
            Some(&mut self.slowest_catch_up),
            &r.verdict.catch_up_by_kind,
            seed,
        );
        self.catch_up_permille_of_bound
            .extend(&r.verdict.catch_up_permille_of_bound);
        self.peak_grant_pct.extend(r.verdict.peak_grant_pct);
        self.herd_permille.extend(r.verdict.herd_permille);
        self.failover_ms.extend(&r.verdict.failover_ms);
        self.handover_ms.extend(&r.verdict.handover_ms);
        self.lock_histories.linearizable += r.verdict.lock_histories.linearizable;
        self.lock_histories.undecided += r.verdict.lock_histories.undecided;
        if r.passed() {
            return None;
        }
        // The table needs the seed and violations, not the whole history.
        r.history = crate::history::History::default();
        let violations = r.verdict.violations.clone();
        self.failures.push(r);
        Some(violations)
    }

    /// The table printed at the end of a campaign.
    pub fn table(&self, replay: &dyn Fn(u64) -> String) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "\n{:<34} {:>14}", "seeds run", self.seeds);
        let secs = self.virtual_ms / 1000;
        let _ = writeln!(
            out,
            "{:<34} {:>14}",
            "virtual time covered",
            format!("{}h {:02}m {:02}s", secs / 3600, secs / 60 % 60, secs % 60)
        );
        for (kind, n) in &self.faults {
            let _ = writeln!(out, "{:<34} {:>14}", format!("faults: {kind}"), n);
        }
        let _ = writeln!(
            out,
            "{:<34} {:>14}",
            "stops confirmed / unconfirmed",
            format!("{} / {}", self.stops.0, self.stops.1)
        );
        let _ = writeln!(out, "{:<34} {:>14}", "invariant checks", self.checks);
        let _ = writeln!(
            out,
            "{:<34} {:>14}",
            "lock histories linear / undecided",
            format!(
                "{} / {}",
                self.lock_histories.linearizable, self.lock_histories.undecided
            )
        );
        let _ = writeln!(
            out,
            "{:<34} {:>14}",
            "violations (failed seeds)",
            self.failures.len()
        );
        let _ = writeln!(
            out,
            "{:<34} {:>14}",
            "detection latency p50/p99/max",
            percentiles(&self.detection_ms)
        );
        let _ = writeln!(
            out,
            "{:<34} {:>14}",
            "heal latency p50/p99/max",
            percentiles(&self.heal_ms)
        );
        by_kind(&mut out, "  after", &self.heal_by_kind);
        if let Some((ms, seed, kind)) = self.slowest_heal {
            let _ = writeln!(out, "  slowest: {ms} ms after {kind}, seed {seed}");
        }
        by_kind(&mut out, "  session after", &self.session_heal_by_kind);
        let _ = writeln!(
            out,
            "{:<34} {:>14}",
            "  ‰ of its path's bound p50/p99/max",
            percentiles(&self.heal_permille_of_bound).replace(" ms", " ‰")
        );
        let _ = writeln!(
            out,
            "{:<34} {:>14}",
            "watcher lag p50/p99/max",
            percentiles(&self.lag_ms)
        );
        by_kind(&mut out, "watcher caught up after", &self.catch_up_by_kind);
        if let Some((ms, seed, kind)) = self.slowest_catch_up {
            let _ = writeln!(out, "  slowest: {ms} ms after {kind}, seed {seed}");
        }
        let _ = writeln!(
            out,
            "{:<34} {:>14}",
            "  ‰ of its path's bound p50/p99/max",
            percentiles(&self.catch_up_permille_of_bound).replace(" ms", " ‰")
        );
        let _ = writeln!(
            out,
            "{:<34} {:>14}",
            "failover (minus TTL) p50/p99/max",
            percentiles(&self.failover_ms)
        );
        let _ = writeln!(
            out,
            "{:<34} {:>14}",
            "handover p50/p99/max",
            percentiles(&self.handover_ms)
        );
        let _ = writeln!(
            out,
            "{:<34} {:>14}",
            "peak grants/s, % of fleet p50/p99/max",
            percentiles(&self.peak_grant_pct).replace(" ms", " %")
        );
        if !self.herd_permille.is_empty() {
            let _ = writeln!(
                out,
                "{:<34} {:>14}",
                "herd: densest 10 ms, ‰ of a return p50/p99/max",
                percentiles(&self.herd_permille).replace(" ms", " ‰")
            );
        }
        let _ = writeln!(
            out,
            "(detection, heal and failover are sampled every {} ms: detection = crash to key gone, heal = path to etcd clear to registered; watcher lag = etcd change to event, undisturbed watchers; failover = a leader's crash to a successor already queued leading, minus the crashed leader's TTL, where every queued successor was undisturbed; handover = resign to the next leader elected)",
            SAMPLE_EVERY.as_millis()
        );
        for f in &self.failures {
            let _ = writeln!(out, "\nFAILED seed {}:", f.case.seed);
            for v in &f.verdict.violations {
                let _ = writeln!(
                    out,
                    "  {:?} at {} ms host {:?}: {}",
                    v.invariant, v.at_ms, v.host, v.detail
                );
            }
            let _ = writeln!(out, "  replay: {}", replay(f.case.seed));
        }
        out
    }
}

fn percentiles(xs: &[u64]) -> String {
    if xs.is_empty() {
        return "-".into();
    }
    let mut v = xs.to_vec();
    v.sort_unstable();
    let at = |p: usize| v[((v.len() - 1) * p) / 100];
    format!("{}/{}/{} ms", at(50), at(99), v[v.len() - 1])
}

/// A readable timeline: faults, host events, and changes of each host's key
/// in etcd (derived from the samples).
pub fn timeline(r: &CaseResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "seed {}: {} hosts, TTLs {:?} s, {} faults, phase 1 {} ms",
        r.case.seed,
        r.case.ttls.len(),
        r.case.ttls,
        r.case.faults.len(),
        r.case.phase1_ms
    );
    let mut keys: Vec<Option<i64>> = vec![None; r.case.ttls.len()];
    let mut states: Vec<Option<LivenessStatus>> = vec![None; r.case.ttls.len()];
    for rec in &r.history.records {
        let t = format!("{:>6}.{:03}s", rec.at_ms / 1000, rec.at_ms % 1000);
        match &rec.what {
            Entry::Sample(hosts) => {
                for (i, s) in hosts.iter().enumerate() {
                    if keys[i] != s.key_lease {
                        let what = match s.key_lease {
                            Some(l) => format!("key attached to lease {l:x}"),
                            None => "key gone".into(),
                        };
                        let _ = writeln!(out, "{t}  etcd    host-{i}: {what}");
                        keys[i] = s.key_lease;
                    }
                    if states[i] != s.status {
                        states[i] = s.status.clone();
                    }
                }
            }
            Entry::Event {
                host,
                incarnation,
                event,
            } => {
                let e = match event {
                    LivenessEvent::Retrying(r) => format!(
                        "Retrying attempt {}, next at {}, after {:?}",
                        r.attempt, r.next_at, r.failure
                    ),
                    other => format!("{other:?}"),
                };
                let _ = writeln!(out, "{t}  host-{host}#{incarnation}  {e}");
            }
            Entry::Fault(f) => {
                let _ = writeln!(out, "{t}  FAULT   {f:?}");
            }
            Entry::WatcherEvent { watcher, event } => {
                let _ = writeln!(
                    out,
                    "{t}  watcher-{watcher}  {:?} {} rev {}",
                    event.kind,
                    event.host.as_deref().unwrap_or(""),
                    event.revision
                );
            }
            Entry::Contender {
                contender,
                incarnation,
                name,
                event,
            } => {
                let _ = writeln!(
                    out,
                    "{t}  contender-{contender}#{incarnation} {name}: {event:?}"
                );
            }
            Entry::WatcherSample(_)
            | Entry::RevisionTimes(_)
            | Entry::ContenderSample(_)
            | Entry::ElectionLog(_)
            | Entry::JoinsUnanswered(_)
            | Entry::LeaseLog(_)
            | Entry::HealRequests(_) => {}
            Entry::Observed {
                watcher,
                name,
                leader,
                revision,
                reset,
            } => {
                let who = leader
                    .as_ref()
                    .map_or("nobody".to_string(), |l| l.0.clone());
                let reset = if *reset { ", after a reset" } else { "" };
                let _ = writeln!(
                    out,
                    "{t}  watcher-{watcher}  observes {name}: {who} (rev {revision}{reset})"
                );
            }
            other => {
                let _ = writeln!(out, "{t}  harness {other:?}");
            }
        }
    }
    for v in &r.verdict.violations {
        let _ = writeln!(
            out,
            "VIOLATION {:?} at {} ms host {:?}: {}",
            v.invariant, v.at_ms, v.host, v.detail
        );
    }
    if r.passed() {
        let _ = writeln!(out, "all invariants held ({} checks)", r.verdict.checks);
    }
    out
}

/// Adds one run's times by kind (`from`, of seed `seed`) to `into`, and
/// keeps the slowest with its seed and kind in `slowest`, if given.
fn add_by_kind(
    into: &mut BTreeMap<&'static str, Vec<u64>>,
    mut slowest: Option<&mut Option<(u64, u64, &'static str)>>,
    from: &[(&'static str, u64)],
    seed: u64,
) {
    for (kind, ms) in from {
        into.entry(kind).or_default().push(*ms);
        if let Some(slowest) = slowest.as_deref_mut() {
            if slowest.is_none_or(|(s, _, _)| *ms > s) {
                *slowest = Some((*ms, seed, kind));
            }
        }
    }
}

/// One line per kind: `{label} {kind} ({count})` and its percentiles.
fn by_kind(out: &mut String, label: &str, by_kind: &BTreeMap<&'static str, Vec<u64>>) {
    for (kind, ms) in by_kind {
        let _ = writeln!(
            out,
            "{:<34} {:>14}",
            format!("{label} {kind} ({})", ms.len()),
            percentiles(ms)
        );
    }
}
