//! coord's policy side by side with the go-coord-style baseline: the same
//! seeds (the same fleets, faults and timings) run twice, once as they are
//! and once with every process on
//! [`Pacing::Plain`](coord::Pacing::Plain) backoff (pure doubling from
//! 100 ms to 30 s, no jitter, no fast class, blind to etcd's return)
//! and hosts replacing a lost lease instead of resuming it. Only the
//! policy differs; the summary shows what users would see of each, and
//! the ratio of each pair.
//!
//! The baseline is expected to break coord's timing bounds (that is what
//! it is compared for); its violations are counted, not failed on.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use coord::{BackoffConfig, LivenessOptions, OnLoss, SessionOptions, WatcherOptions};

use crate::etcd::client::SimEtcd;
use crate::faults::schedule::{Fault, Target};
use crate::history::{host_index, Entry, History, WatcherEventKind};
use crate::run::runner::CaseResult;
use crate::world::Variant;

/// The go-coord-style policy for every process of a run.
#[derive(Debug, Clone, Copy, Default)]
pub struct GoCoordStyle;

impl Variant for GoCoordStyle {
    type Api = SimEtcd;

    fn wrap(&self, etcd: SimEtcd) -> SimEtcd {
        etcd
    }

    fn host_options(&self, nominal: LivenessOptions) -> LivenessOptions {
        let backoff = plain(&nominal.backoff);
        nominal
            .with_backoff(backoff)
            .with_on_loss(OnLoss::Replace)
            // go-coord counts no fleet.
            .with_fleet_spacing(None)
    }

    fn watcher_options(&self, nominal: WatcherOptions) -> WatcherOptions {
        let backoff = plain(&nominal.backoff);
        nominal.with_backoff(backoff)
    }

    fn session_options(&self, nominal: SessionOptions) -> SessionOptions {
        let backoff = plain(&nominal.backoff);
        nominal.with_backoff(backoff)
    }
}

/// `b` with plain pacing (its initial delay, growth and cap kept).
fn plain(b: &BackoffConfig) -> BackoffConfig {
    b.clone().with_pacing(coord::Pacing::Plain)
}

/// Watchers' `Down` events for a host whose process was running (not
/// crashed, not stopped): its lease expired while it was cut off, was
/// revoked from outside, or was replaced (its key deleted, then written
/// again). The first two happen to both policies alike; replacing is the
/// baseline's own. Counted once per host and revision, however many
/// watchers saw it.
pub fn flaps(history: &History) -> u64 {
    let mut dead: BTreeSet<usize> = BTreeSet::new();
    let mut stopping = false;
    let mut seen: BTreeSet<(usize, i64)> = BTreeSet::new();
    for r in &history.records {
        match &r.what {
            Entry::Fault(Fault::Crash {
                target: Target::Host(host),
                ..
            }) => {
                dead.insert(*host);
            }
            Entry::Restarted { host } => {
                dead.remove(host);
            }
            Entry::StopAll => stopping = true,
            Entry::WatcherEvent { event, .. } if event.kind == WatcherEventKind::Down => {
                let Some(h) = event.host.as_deref().and_then(host_index) else {
                    continue;
                };
                if !stopping && !dead.contains(&h) {
                    seen.insert((h, event.revision));
                }
            }
            _ => {}
        }
    }
    u64::try_from(seen.len()).unwrap_or(u64::MAX)
}

/// What one policy's runs showed, over a campaign.
#[derive(Debug, Clone, Default)]
pub struct Side {
    /// Runs.
    pub seeds: u64,
    /// Runs with a violation.
    pub failed: u64,
    /// Violations by invariant.
    pub violations: BTreeMap<String, u64>,
    /// Crash to key gone, ms.
    pub detection_ms: Vec<u64>,
    /// Hosts' heals, by what cleared the path, ms.
    pub heal_by_kind: BTreeMap<&'static str, Vec<u64>>,
    /// Sessions' heals, by what cleared the path, ms.
    pub session_heal_by_kind: BTreeMap<&'static str, Vec<u64>>,
    /// Each run's densest herd, per mille of the returning fleet within
    /// the herd window (fleets of 100 hosts or more).
    pub herd_permille: Vec<u64>,
    /// Flaps per run ([`flaps`]).
    pub flaps: Vec<u64>,
    /// A leader crashed to its successor leading, minus the TTL, ms.
    pub failover_ms: Vec<u64>,
}

impl Side {
    /// Adds one run.
    pub fn add(&mut self, r: &CaseResult) {
        let v = &r.verdict;
        self.seeds += 1;
        if !v.violations.is_empty() {
            self.failed += 1;
        }
        for x in &v.violations {
            *self
                .violations
                .entry(format!("{:?}", x.invariant))
                .or_default() += 1;
        }
        self.detection_ms.extend(&v.detection_ms);
        for (kind, ms) in &v.heal_by_kind {
            self.heal_by_kind.entry(kind).or_default().push(*ms);
        }
        for (kind, ms) in &v.session_heal_by_kind {
            self.session_heal_by_kind.entry(kind).or_default().push(*ms);
        }
        self.herd_permille.extend(v.herd_permille);
        self.flaps.push(flaps(&r.history));
        self.failover_ms.extend(&v.failover_ms);
    }
}

/// The `q`-th percentile (0-100) of `xs`, `None` when empty.
fn percentile(xs: &[u64], q: usize) -> Option<u64> {
    let mut v = xs.to_vec();
    v.sort_unstable();
    let last = v.len().checked_sub(1)?;
    v.get(last * q / 100).copied()
}

/// One row: p50 and p99 of each side, and the ratio of the p99s.
fn row(out: &mut String, label: &str, unit: &str, coord: &[u64], base: &[u64]) {
    let cell = |xs: &[u64]| match (percentile(xs, 50), percentile(xs, 99)) {
        (Some(a), Some(b)) => format!("{a}/{b} {unit} (n {})", xs.len()),
        _ => "-".into(),
    };
    let ratio = match (percentile(coord, 99), percentile(base, 99)) {
        (Some(c), Some(b)) if b > 0 => format!("{:.3}", c as f64 / b as f64),
        _ => "-".into(),
    };
    let _ = writeln!(
        out,
        "  {label:<40} {:>26} {:>26} {ratio:>8}",
        cell(coord),
        cell(base)
    );
}

/// A row per kind either side has, labelled `<label> <kind>`, in ms.
fn by_kind_rows(
    out: &mut String,
    label: &str,
    coord: &BTreeMap<&'static str, Vec<u64>>,
    base: &BTreeMap<&'static str, Vec<u64>>,
) {
    let kinds: BTreeSet<&str> = coord.keys().chain(base.keys()).copied().collect();
    for kind in kinds {
        row(
            out,
            &format!("{label} {kind}"),
            "ms",
            coord.get(kind).map_or(&[], Vec::as_slice),
            base.get(kind).map_or(&[], Vec::as_slice),
        );
    }
}

/// The side-by-side summary: p50/p99 of each measure per policy, and the
/// ratio of p99s (coord over the baseline; under 1 is better for coord).
pub fn table(coord: &Side, base: &Side) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "side by side over {} seeds: coord's policy against the go-coord-style one",
        coord.seeds
    );
    let _ = writeln!(
        out,
        "  {:<40} {:>26} {:>26} {:>8}",
        "measure (p50/p99)", "coord", "go-coord-style", "p99 ratio"
    );
    row(
        &mut out,
        "detection (crash to key gone)",
        "ms",
        &coord.detection_ms,
        &base.detection_ms,
    );
    by_kind_rows(
        &mut out,
        "host heal after",
        &coord.heal_by_kind,
        &base.heal_by_kind,
    );
    by_kind_rows(
        &mut out,
        "session heal after",
        &coord.session_heal_by_kind,
        &base.session_heal_by_kind,
    );
    row(
        &mut out,
        "herd (densest window, per mille of fleet)",
        "‰",
        &coord.herd_permille,
        &base.herd_permille,
    );
    row(
        &mut out,
        "flaps per run (Down of a running host)",
        "",
        &coord.flaps,
        &base.flaps,
    );
    row(
        &mut out,
        "failover (leader crash to successor - TTL)",
        "ms",
        &coord.failover_ms,
        &base.failover_ms,
    );
    let total = |s: &Side| s.flaps.iter().sum::<u64>();
    let _ = writeln!(
        out,
        "  flaps in all: coord {}, go-coord-style {}",
        total(coord),
        total(base)
    );
    let _ = writeln!(
        out,
        "  runs breaking coord's bounds: coord {}, go-coord-style {} {:?}",
        coord.failed, base.failed, base.violations
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_ratios_of_the_rows() {
        assert_eq!(percentile(&[], 50), None);
        assert_eq!(percentile(&[5, 1, 3], 50), Some(3));
        assert_eq!(percentile(&[5, 1, 3], 99), Some(3));
        assert_eq!(percentile(&[5, 1, 3], 100), Some(5));
        let mut out = String::new();
        row(&mut out, "x", "ms", &[10, 20], &[40, 80]);
        assert!(out.contains("10/10 ms (n 2)"), "{out}");
        assert!(out.contains("40/40 ms (n 2)"), "{out}");
        assert!(out.trim_end().ends_with("0.250"), "{out}");
    }
}
