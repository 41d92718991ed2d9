//! Runs a case on a fresh thread with a fresh seeded madsim runtime (the
//! only way `HashMap` order and every other source of nondeterminism stay
//! fixed), catching panics.

use crate::check::{check, Invariant, Verdict, Violation};
use crate::faults::schedule::Case;
use crate::history::History;
use crate::run::case::run;
use crate::world::{Shipped, Variant};

/// The outcome of one case.
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// The case.
    pub case: Case,
    /// What was recorded (empty if the run panicked).
    pub history: History,
    /// What the checker found.
    pub verdict: Verdict,
    /// Virtual ms covered.
    pub virtual_ms: u64,
}

impl CaseResult {
    /// True if no invariant was violated.
    pub fn passed(&self) -> bool {
        self.verdict.violations.is_empty()
    }
}

/// Runs `case` with the real driver.
pub fn run_case(case: &Case) -> CaseResult {
    run_case_with(case, Shipped)
}

/// Runs `case` with hosts talking through `wrap`.
pub fn run_case_with<W: Variant>(case: &Case, wrap: W) -> CaseResult {
    let c = case.clone();
    let joined = std::thread::Builder::new()
        .name(format!("sim-{}", case.seed))
        .spawn(move || {
            let rt =
                madsim::runtime::Runtime::with_seed_and_config(c.seed, madsim::Config::default());
            rt.block_on(run(&c, wrap))
        })
        .map_err(|e| e.to_string())
        .and_then(|h| h.join().map_err(panic_message));
    match joined {
        Ok(history) => {
            let verdict = check(case, &history);
            let virtual_ms = history.records.last().map_or(0, |r| r.at_ms);
            CaseResult {
                case: case.clone(),
                history,
                verdict,
                virtual_ms,
            }
        }
        Err(msg) => CaseResult {
            case: case.clone(),
            history: History::default(),
            verdict: Verdict {
                violations: vec![Violation {
                    invariant: Invariant::NoPanic,
                    at_ms: 0,
                    host: None,
                    detail: msg,
                }],
                ..Verdict::default()
            },
            virtual_ms: 0,
        },
    }
}

/// What a panic said, as "panic: MESSAGE".
pub(crate) fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        format!("panic: {s}")
    } else if let Some(s) = p.downcast_ref::<String>() {
        format!("panic: {s}")
    } else {
        "panic".to_string()
    }
}

/// A fingerprint of a history (its full debug text, hashed with FNV-1a):
/// equal for equal histories.
pub fn fingerprint(history: &History) -> u64 {
    let text = format!("{history:?}");
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
