//! What every handle runs on: one generic run loop ([`runner`]) that feeds
//! a core machine its inputs, executes its commands through the
//! [`EtcdApi`](crate::EtcdApi) ([`exec`]) and sleeps until its next
//! deadline; the clock that maps core time to the runtime's; the one
//! prober per client; the status handles publish; telemetry; and the loop
//! that the watchers of one client share.

pub(crate) mod clock;
pub(crate) mod exec;
pub(crate) mod probe;
pub(crate) mod runner;
pub(crate) mod shared_loop;
pub(crate) mod status;
pub mod telemetry;

pub use status::{LeaseStatus, ViewStatus};
