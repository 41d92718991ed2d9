//! A session's client with its type erased: what the handles made from a
//! session (which are not generic over the client) reach etcd through,
//! one-shot reads (`leader()`) and observers.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use coord_core::io::{Listing, RangeRequest};
use coord_core::Key;

use crate::election::{Observe, ObserveSettings};
use crate::error::Error;
use crate::etcd::EtcdApi;

/// A boxed future, as the object-safe side of `EtcdApi` returns them.
pub(crate) type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The client of a session, behind a trait object.
pub(crate) trait SessionClient: Send + Sync + std::fmt::Debug {
    /// One read with a deadline.
    fn range(&self, request: RangeRequest, timeout: Duration) -> Boxed<'_, Result<Listing, Error>>;

    /// An observer of the queue under `prefix`, on a loop of its own.
    fn observe(&self, prefix: Key, settings: ObserveSettings) -> Observe;
}

/// A client as a [`SessionClient`].
pub(crate) struct Erased<A>(pub(crate) A);

impl<A> std::fmt::Debug for Erased<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionClient")
    }
}

impl<A: EtcdApi> SessionClient for Erased<A> {
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

    fn observe(&self, prefix: Key, settings: ObserveSettings) -> Observe {
        Observe::spawn(self.0.clone(), prefix, settings)
    }
}
