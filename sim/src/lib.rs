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

#[cfg(madsim)]
pub mod api_checker;
#[cfg(madsim)]
pub mod bounds;
#[cfg(all(madsim, test))]
mod busy_loop_tests;
#[cfg(all(madsim, test))]
mod catch_up_tests;
#[cfg(madsim)]
pub mod checker;
#[cfg(madsim)]
pub mod client;
#[cfg(madsim)]
pub mod compare;
#[cfg(madsim)]
pub mod contenders;
#[cfg(madsim)]
pub mod election_checker;
#[cfg(all(madsim, test))]
mod fleet_slot_tests;
#[cfg(madsim)]
pub mod harness;
#[cfg(madsim)]
pub mod history;
#[cfg(all(madsim, test))]
mod metrics_tests;
pub mod model;
#[cfg(madsim)]
pub mod observe_checker;
#[cfg(all(madsim, test))]
mod observe_options_tests;
#[cfg(madsim)]
pub mod pinned;
#[cfg(all(madsim, test))]
mod pool_tests;
#[cfg(all(madsim, test))]
mod probe_hub_tests;
#[cfg(madsim)]
pub mod process;
#[cfg(all(madsim, test))]
mod quiet_streams_tests;
#[cfg(all(madsim, test))]
mod register_tests;
#[cfg(madsim)]
pub mod report;
#[cfg(madsim)]
pub mod runner;
#[cfg(madsim)]
pub mod schedule;
#[cfg(madsim)]
pub mod server;
#[cfg(all(madsim, test))]
mod task_leak_tests;
#[cfg(all(madsim, test))]
mod test_fakes;
#[cfg(all(madsim, test))]
mod watcher_backpressure_tests;
#[cfg(madsim)]
pub mod watcher_checker;
#[cfg(all(madsim, test))]
mod watcher_close_tests;
#[cfg(madsim)]
pub mod wire;
