//! What handles made from a session reach etcd through without being
//! generic over the client: one-shot reads (`leader()`) and observers.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use coord_core::io::{Listing, RangeRequest};
use coord_core::{BackoffConfig, Key};

use crate::api::EtcdApi;
use crate::error::Error;
use crate::observe::Observe;

/// A boxed future, as the object-safe side of `EtcdApi` returns them.
pub(crate) type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The client of a session, behind a trait object.
pub(crate) trait Backend: Send + Sync + std::fmt::Debug {
    /// One read with a deadline.
    fn range(&self, request: RangeRequest, timeout: Duration) -> Boxed<'_, Result<Listing, Error>>;

    /// An observer of the queue under `prefix`, on a loop of its own.
    fn observe(&self, prefix: Key, settings: (Duration, Duration, BackoffConfig, u64)) -> Observe;
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

    fn observe(&self, prefix: Key, settings: (Duration, Duration, BackoffConfig, u64)) -> Observe {
        Observe::spawn(self.0.clone(), prefix, settings)
    }
}
