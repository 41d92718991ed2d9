//! The fast test command of `scripts/mutants` (cargo-mutants): with the
//! unit tests of core, driver and simulator, these two decide whether a
//! planted mutant is caught. Both are ignored in the normal suite, which
//! runs the same checks at full length elsewhere (`scripts/test`).

#![cfg(madsim)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use coord_sim::faults::schedule::{Case, Shape};
use coord_sim::run::runner::run_case;

/// Seeds in the short campaign: every planted bug the default campaign
/// caught in the measurement that opened issue 9 failed within its first
/// second (a few dozen seeds).
const SEEDS: u64 = 300;

/// A short campaign of the default generator, on every core.
#[test]
#[ignore = "run by scripts/mutants"]
fn short_campaign() {
    let next = Arc::new(AtomicU64::new(1));
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let failed: Vec<String> = (0..workers)
        .map(|_| {
            let next = Arc::clone(&next);
            std::thread::spawn(move || {
                let mut failed = Vec::new();
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed > SEEDS {
                        return failed;
                    }
                    let r = run_case(&Case::generate(seed, Shape::default()));
                    if let Some(v) = r.verdict.violations.first() {
                        failed.push(format!("seed {seed}: {v:?}"));
                        // One failure decides; stop the others early.
                        next.store(SEEDS + 1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The fuzz targets' corpus replay and seeded random smoke (the `fuzz`
/// workspace's own tests, on stable), against this tree's core.
#[test]
#[ignore = "run by scripts/mutants"]
fn fuzz_corpus_replay() {
    let fuzz = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let status = std::process::Command::new(env!("CARGO"))
        .args(["test", "--release", "--locked", "--manifest-path"])
        .arg(fuzz.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", fuzz.join("target"))
        .status()
        .unwrap();
    assert!(status.success(), "fuzz replay failed: {status}");
}
