//! What handles made from a session reach etcd through without being
//! generic over the client: one-shot reads (`leader()`) and observers.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use coord_core::io::{Listing, RangeRequest};
use coord_core::observer::Observer;
use tokio::sync::mpsc;

use crate::api::EtcdApi;
use crate::clock::Clock;
use crate::error::Error;
use crate::observe::ObserveHost;
use crate::runner::run;

/// A boxed future, as the object-safe side of `EtcdApi` returns them.
pub(crate) type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The client of a session, behind a trait object.
pub(crate) trait Backend: Send + Sync + std::fmt::Debug {
    /// One read with a deadline.
    fn range(&self, request: RangeRequest, timeout: Duration) -> Boxed<'_, Result<Listing, Error>>;

    /// Runs `observer` on a loop of its own until `close` says so or it is
    /// dropped.
    fn observe(&self, observer: Observer, host: ObserveHost, close: mpsc::UnboundedReceiver<()>);
}

/// A client as a [`Backend`].
pub(crate) struct Shared<A>(pub(crate) A);

impl<A> std::fmt::Debug for Shared<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Backend")
    }
}

impl<A: EtcdApi> Backend for Shared<A> {
    fn range(&self, request: RangeRequest, timeout: Duration) -> Boxed<'_, Result<Listing, Error>> {
        Box::pin(async move {
            match tokio::time::timeout(timeout, self.0.range(request)).await {
                Ok(Ok(listing)) => Ok(listing),
                Ok(Err(e)) => Err(Error::Request(
                    coord_core::AttemptFailure::of(&e.into_outcome::<()>())
                        .unwrap_or(coord_core::AttemptFailure::Timeout),
                )),
                Err(_) => Err(Error::Request(coord_core::AttemptFailure::Timeout)),
            }
        })
    }

    fn observe(&self, observer: Observer, host: ObserveHost, close: mpsc::UnboundedReceiver<()>) {
        tokio::spawn(run(self.0.clone(), observer, host, Clock::start(), close));
    }
}
