//! A model of etcd for the simulator: the store (revisions, leases with
//! expiry, transactions, watch history, compaction) in [`model`], served
//! over madsim's network by [`server`] in the [`wire`] format, and the
//! [`client`] that implements coord's `EtcdApi` over it.

pub mod client;
mod convert;
pub mod hooks;
pub mod model;
pub mod server;
pub mod wire;
