//! `coord-sim`'s command line: help on stdout with exit 0, bad flags
//! refused with exit 2 and nothing run (by the launcher too, before any
//! build), and the side-by-side comparison.

#![allow(clippy::expect_used)]
use std::process::Command;

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_coord-sim"))
        .args(args)
        .output()
        .expect("run coord-sim")
}

#[test]
fn help_goes_to_stdout_and_exits_zero() {
    let out = sim(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--seeds",
        "--seed",
        "--hosts",
        "--faults",
        "--duration",
        "--generator",
    ] {
        assert!(text.contains(flag), "help lacks {flag}:\n{text}");
    }
    assert!(out.stderr.is_empty());
}

#[test]
fn bad_flags_are_refused_with_usage_and_exit_two() {
    for args in [
        &["--hosts", "0"][..],
        &["--hosts", "1001"],
        &["--seeds", "many"],
        &["--generator", "11"],
        &["--no-such-flag"],
    ] {
        let out = sim(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("error:"),
            "{args:?}"
        );
    }
}

/// `--compare` runs every seed with coord's policy and with the
/// go-coord-style one and prints them side by side; on these seeds coord's
/// heals after a partition and after a wipe are faster at p99 (a ratio
/// under 1), and only coord's runs decide the exit status. Under madsim
/// only (the simulator's own tests in `scripts/test`): outside it,
/// `coord-sim` is the launcher, which would build the simulator again in
/// `target/sim` only to run this a second time.
#[cfg(madsim)]
#[test]
fn the_side_by_side_runs_both_policies_and_coord_heals_faster() {
    let out = sim(&["--compare", "--seeds", "60", "--start", "1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("side by side over 60 seeds"),
        "no side-by-side table:\n{text}"
    );
    for measure in ["host heal after partition", "host heal after etcd wiped"] {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(measure))
            .unwrap_or_else(|| panic!("no row for {measure}:\n{text}"));
        let ratio: f64 = line
            .split_whitespace()
            .last()
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("no ratio in {line:?}"));
        assert!(ratio < 1.0, "{measure}: {line}");
    }
    assert!(
        text.contains("runs breaking coord's bounds: coord 0,"),
        "{text}"
    );
}

/// `--list-pinned` prints every pinned regression as `SEED GENERATOR`, in
/// the table's order, and runs nothing.
#[cfg(madsim)]
#[test]
fn list_pinned_prints_every_pinned_seed_with_its_generator() {
    let out = sim(&["--list-pinned"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let expected: Vec<String> = coord_sim::run::pinned::PINNED
        .iter()
        .map(|p| format!("{} {}", p.seed, p.generator.number()))
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(text.lines().collect::<Vec<_>>(), expected);
}
