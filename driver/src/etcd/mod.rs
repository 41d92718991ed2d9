//! coord's etcd layer: the `EtcdApi` trait, the few etcd operations coord's
//! handles need, in the driver's own types; its real implementation on
//! `etcd-client`; and the [`Client`] that
//! [`connect`](crate::connect) opens. coord's simulator implements the trait
//! over a model of etcd.
//!
//! # An extension point
//!
//! Every handle takes any `EtcdApi`, so a wrapper of your own can inject
//! faults (delay, drop or fail requests, cut streams), record what coord
//! asks, or carry coord over another transport. Implementations must keep
//! the contracts written on each method: one answer per request, streams
//! that end (rather than hang) when their server is gone, and no panic on
//! anything the server sends. Methods added in later versions come with a
//! default implementation, so implementing the trait is not broken by a
//! minor release. [`Intercepted`] is such a wrapper made for you: its
//! [`Intercept`] overrides only the calls it changes.
//!
//! The real implementation (every item here but the trait, its types, the
//! interceptor and the probe hub) is not built under the simulator (`--cfg madsim`).

#[cfg(not(madsim))]
mod adapter;
mod api;
#[cfg(not(madsim))]
mod client;
#[cfg(not(madsim))]
mod connect;
#[cfg(not(madsim))]
mod dial;
mod intercept;
mod probe_hub;
#[cfg(not(madsim))]
mod tls;

#[cfg(not(madsim))]
pub use adapter::{classify, Keeper, Replies, WatchResponses, Watching, MAX_RESPONSE_BYTES};
pub(crate) use api::outcome;
pub use api::{
    EtcdApi, EtcdError, Granted, KeepAliveReplies, KeepAliveSender, WatchControl, WatchEvents,
    WatchMessage,
};
#[cfg(not(madsim))]
pub use client::Client;
#[cfg(not(madsim))]
pub use connect::{connect, ConnectOptions};
pub use intercept::{
    Intercept, Intercepted, InterceptedEvents, InterceptedKeeper, InterceptedReplies,
    KeepAliveStream, WatchStream,
};
pub use probe_hub::ProbeHub;
pub(crate) use probe_hub::{Hub, News};
#[cfg(not(madsim))]
pub use tls::TlsOptions;
