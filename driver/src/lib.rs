//! # coord: coordinate a fleet of agents on etcd v3
//!
//! Host liveness with self-healing TTL leases, wire-compatible with the Go
//! library go-coord: a host's JSON metadata lives at
//! `<prefix><host id>` (default prefix `/coord/hosts/`) under a lease that
//! a background task keeps alive and heals when it is lost
//! ([`HostLiveness`]); a watcher of those hosts whose view converges to
//! etcd's truth through compactions and broken streams ([`HostWatcher`]);
//! and leader election, election pools and locks with fencing tokens,
//! key-compatible with etcd's Go `concurrency` package ([`Election`],
//! [`ElectionPool`], [`Mutex`], on a [`Session`]), plus one lock API over
//! other backends ([`lock`]).
//!
//! Every handle takes the [`Client`] that [`connect`] opens: one probe of
//! etcd shared by every handle made from it, and a move to another member
//! when one goes silent.
//!
//! ```no_run
//! # async fn demo() -> Result<(), coord::Error> {
//! let client = coord::connect(&["http://127.0.0.1:2379"], coord::ConnectOptions::default()).await?;
//! let meta = coord::HostMetadata::new("6b1f0c1e-3a52-4c47-9a37-0a4c5f1c2d3e", "node-7");
//! let host = coord::HostLiveness::register(client.clone(), meta, Default::default()).await?;
//! println!("registered at {} under lease {:?}", host.key(), host.lease_id());
//!
//! let election = coord::Election::new(client, "scheduler", Default::default()).await?;
//! let leader = election.campaign("node-7").await?;
//! println!("leading with fencing token {:?}", leader.token());
//! leader.resign().await?;
//! election.close().await?;
//! host.stop().await
//! # }
//! ```
//!
//! Watching the fleet, as events or as a [`Stream`](futures_core::Stream):
//!
//! ```no_run
//! # async fn demo(client: coord::Client) -> Result<(), coord::Error> {
//! use coord::{HostEvent, HostWatcher};
//! let mut watcher: HostWatcher = HostWatcher::new(client, Default::default()).await?;
//! while let Some(event) = watcher.next().await {
//!     if let HostEvent::Down { host, last_seen, .. } = event {
//!         println!("{host} went down; it last said {:?}", last_seen.meta);
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! Connecting with TLS and authentication, and checking the connection
//! once (so a wrong CA, certificate or password fails at start):
//!
//! ```no_run
//! # async fn demo() -> Result<(), coord::Error> {
//! use std::path::Path;
//! let tls = coord::TlsOptions::from_files(
//!     Some(Path::new("ca.pem")),
//!     Some(Path::new("client.pem")),
//!     Some(Path::new("client-key.pem")),
//! )?; // Error::Tls naming the file that does not load
//! let options = coord::ConnectOptions::default()
//!     .with_tls(tls)
//!     .with_user("ops", "secret"); // Error::Auth if refused
//! let client = coord::connect(&["https://10.0.0.1:2379"], options).await?;
//! // connect does not dial (a service may start while etcd is down); check
//! // asks once: Error::Tls, Error::Auth or Error::Unreachable, never a hang.
//! client.check(std::time::Duration::from_secs(2)).await?;
//! # Ok(()) }
//! ```
//!
//! ## Guides
//!
//! In the repository's `docs/`: the failure model and its bounds, choosing a
//! lock backend, the wire format, sizing, and operating `coordctl`.
//!
//! ## Feature flags
#![doc = document_features::document_features!()]
//!
//! The state machines live in `etcd-coord-core` (sans-IO); this crate runs
//! them on tokio against etcd through the [`EtcdApi`] trait.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

/// Every Rust example of the README and of the guides in `docs/`,
/// compiled as doctests (only in the repository: the guides are not in the
/// published package).
#[cfg(all(doctest, not(madsim)))]
pub mod guide_examples {
    #[doc = include_str!("../../README.md")]
    pub struct Readme;
    #[doc = include_str!("../../docs/failure-model.md")]
    pub struct FailureModel;
    #[doc = include_str!("../../docs/lock-backends.md")]
    pub struct LockBackends;
    #[doc = include_str!("../../docs/wire-format.md")]
    pub struct WireFormat;
    #[doc = include_str!("../../docs/sizing.md")]
    pub struct Sizing;
    #[doc = include_str!("../../docs/coordctl.md")]
    pub struct Coordctl;
}

// The layers, each built only on the ones above it in this list:
// the etcd layer (the `EtcdApi` trait, its real adapter and the client),
// the runtime every handle runs on (the run loop, the executor, the clock,
// the prober, status and telemetry), then the capabilities: liveness, the
// watcher, sessions, elections (with pools, mutexes and observers) and the
// lock family. ARCHITECTURE.md draws them.
mod cause;
mod error;
pub mod metadata;

pub mod etcd;
mod runtime;

pub mod election;
pub mod liveness;
pub mod lock;
pub mod session;
pub mod watcher;

pub use runtime::telemetry;

pub use cause::Cause;
pub use coord_core::kv::KeyValue;
pub use coord_core::liveness::{Event as LivenessEvent, LostReason, OnLoss, RevokeOutcome};
pub use coord_core::probe::ProbeConfig;
pub use coord_core::watcher::ResyncReason;
pub use coord_core::Revision;
pub use coord_core::{AttemptFailure, Retry};
pub use coord_core::{BackoffConfig, LeaseId, Pacing};
pub use error::Error;
#[cfg(not(madsim))]
pub use etcd::{connect, Client, ConnectOptions, TlsOptions};
pub use etcd::{
    EtcdApi, EtcdError, Granted, KeepAliveReplies, KeepAliveSender, ProbeHub, WatchControl,
    WatchEvents, WatchMessage,
};
/// The etcd client coord runs on, for requests of your own
/// ([`Client::etcd`]) and to name its types. Its version is part of
/// coord's API: a coord release that moves to an incompatible etcd-client
/// is a breaking release.
#[cfg(not(madsim))]
pub use etcd_client;
pub use liveness::{HostLiveness, LivenessOptions, LivenessStatus, DEFAULT_PREFIX};
pub use metadata::{
    validate_host_id, HostIdError, HostMetadata, MAX_HOST_ID_LEN, MAX_METADATA_LEN,
};
pub use runtime::{LeaseStatus, ViewStatus};
pub use watcher::{
    DecodeError, Driving, HostEvent, HostRecord, HostWatcher, WatcherCloser, WatcherOptions,
};

pub use coord_core::election::Loss;
pub use coord_core::io::{
    Compare, CompareOp, CompareTarget, Get, Sort, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
pub use coord_core::observer::Leader;
pub use coord_core::{FencingToken, Key};
pub use election::{
    validate_name, validate_value, Election, ElectionPool, LeaderProbe, Leadership, Mutex,
    MutexGuard, Observe, Observed, PoolStats,
};
pub use session::{Session, SessionOptions};
