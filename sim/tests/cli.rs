//! `coord-sim`'s command line: help on stdout with exit 0, bad flags
//! refused with exit 2 and nothing run.

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
        &["--generator", "7"],
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
