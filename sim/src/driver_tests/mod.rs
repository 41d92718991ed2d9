//! Tests of the driver that run under madsim against the etcd model, with
//! the fakes they share.

mod busy_loop_tests;
mod catch_up_tests;
mod fleet_slot_tests;
mod intercept_tests;
mod metrics_tests;
mod observe_options_tests;
mod pool_tests;
mod probe_hub_tests;
mod quiet_streams_tests;
mod register_tests;
mod task_leak_tests;
mod test_fakes;
mod watcher_backpressure_tests;
mod watcher_close_tests;
