//! The processes under test, as a run builds them: hosts running the real
//! `HostLiveness`, watchers running the real `HostWatcher`, election and
//! lock processes running the real `Election`, `Mutex` and `ElectionPool`,
//! each on a madsim node of its own over [`SimEtcd`](crate::etcd::client::SimEtcd),
//! and the sampler that records what they say beside what etcd holds.

pub mod contenders;
pub mod fleet;
pub mod hosts;
pub mod process;
pub mod sampler;
pub mod watchers;

pub use fleet::{Intercepting, Shipped, Variant};
pub use hosts::{host_key, host_options};
pub use watchers::watcher_options;
