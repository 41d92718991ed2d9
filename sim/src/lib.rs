//! # coord-sim: deterministic simulation of coord under faults
//!
//! Runs the real `coord-core` machines and the real `coord` driver under
//! madsim against a model of etcd, with proptest-generated fault schedules
//! (etcd leader changes, compactions, partitions, GC pauses, crashes,
//! unanswered requests), and checks invariants over the recorded history.
//!
//! Everything here needs `--cfg madsim`; without it the crate is empty and
//! the `coord-sim` binary re-runs itself under madsim (see `main.rs`).

#![forbid(unsafe_code)]

// The layers, each built on the ones listed before it: the etcd model and
// its server and client; the fault schedule; the history a run records;
// the checks, which read only the history, the schedule and their bounds;
// the world of processes under test and the fault injector; the runs; the
// report. ARCHITECTURE.md draws them.
#[cfg(madsim)]
pub mod etcd;
#[cfg(madsim)]
pub mod faults;
#[cfg(madsim)]
pub mod history;

#[cfg(madsim)]
pub mod check;
#[cfg(madsim)]
pub mod world;

#[cfg(madsim)]
pub mod report;
#[cfg(madsim)]
pub mod run;

// Built on the etcd model alone: the simulator offered to users' own tests.
#[cfg(madsim)]
pub mod testkit;

#[cfg(all(madsim, test))]
mod driver_tests;
