//! One wrapper for every client that edits or observes coord's etcd
//! traffic: an [`Intercept`] overrides only the calls it changes, and
//! [`Intercepted`] passes everything else through to the client it wraps.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use coord_core::io::{Listing, RangeRequest, Txn, TxnResponse};
use coord_core::{LeaseId, Revision};

use crate::etcd::api::{
    EtcdApi, EtcdError, Granted, KeepAliveReplies, KeepAliveSender, WatchEvents, WatchMessage,
};

/// A keep-alive stream as an [`Intercept`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepAliveStream {
    /// The lease it keeps alive.
    pub lease: LeaseId,
    /// Which stream of its [`Intercepted`] client (and of the clones and
    /// probe copies made of it) it is: numbered from 0 in the order they
    /// were asked for, shared with watch streams.
    pub id: u64,
}

/// A watch stream as an [`Intercept`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchStream {
    /// The key watched (every key under it, with `prefix`).
    pub key: Vec<u8>,
    /// Whether `key` is a prefix.
    pub prefix: bool,
    /// The revision the watch starts at.
    pub start_revision: Revision,
    /// Which stream of its [`Intercepted`] client it is (as
    /// [`KeepAliveStream::id`]).
    pub id: u64,
}

/// What an [`Intercepted`] client does to the traffic of the client `A` it
/// wraps: fail, delay, edit or record requests, replies and stream
/// messages. Every method defaults to passing its call through unchanged,
/// so an interceptor writes only what it changes. A stream's control side
/// (progress requests, cancel) always passes through.
///
/// Each method is given the wrapped client (or the stream's own half) and
/// must keep the [`EtcdApi`] contract that the call it stands for states;
/// what it returns is what coord sees. A returned future is cancel-safe
/// when the one it wraps is and it holds nothing of its own across an
/// `.await`.
pub trait Intercept: Clone + Send + Sync + 'static {
    /// Stands for [`EtcdApi::range`].
    fn range<A: EtcdApi>(
        &self,
        api: &A,
        request: RangeRequest,
    ) -> impl Future<Output = Result<Listing, EtcdError>> + Send {
        api.range(request)
    }

    /// Stands for [`EtcdApi::txn`].
    fn txn<A: EtcdApi>(
        &self,
        api: &A,
        txn: Txn,
    ) -> impl Future<Output = Result<TxnResponse, EtcdError>> + Send {
        api.txn(txn)
    }

    /// Stands for [`EtcdApi::lease_grant`].
    fn lease_grant<A: EtcdApi>(
        &self,
        api: &A,
        ttl_secs: i64,
    ) -> impl Future<Output = Result<Granted, EtcdError>> + Send {
        api.lease_grant(ttl_secs)
    }

    /// Stands for [`EtcdApi::lease_revoke`].
    fn lease_revoke<A: EtcdApi>(
        &self,
        api: &A,
        lease: LeaseId,
    ) -> impl Future<Output = Result<(), EtcdError>> + Send {
        api.lease_revoke(lease)
    }

    /// Stands for [`EtcdApi::lease_keep_alive`]: opens `stream` (and sends
    /// its first keep-alive).
    fn lease_keep_alive<A: EtcdApi>(
        &self,
        api: &A,
        stream: &KeepAliveStream,
    ) -> impl Future<Output = Result<(A::Keeper, A::Replies), EtcdError>> + Send {
        api.lease_keep_alive(stream.lease)
    }

    /// Stands for [`KeepAliveSender::send`] on `stream`.
    fn keep_alive_send<K: KeepAliveSender>(
        &self,
        stream: &KeepAliveStream,
        keeper: &mut K,
    ) -> impl Future<Output = Result<(), EtcdError>> + Send {
        let _ = stream;
        keeper.send()
    }

    /// Stands for [`KeepAliveReplies::next`] on `stream`.
    fn keep_alive_next<R: KeepAliveReplies>(
        &self,
        stream: &KeepAliveStream,
        replies: &mut R,
    ) -> impl Future<Output = Option<Result<i64, EtcdError>>> + Send {
        let _ = stream;
        replies.next()
    }

    /// Stands for [`EtcdApi::watch`]: opens `stream`.
    fn watch<A: EtcdApi>(
        &self,
        api: &A,
        stream: &WatchStream,
    ) -> impl Future<Output = Result<(A::WatchControl, A::WatchEvents), EtcdError>> + Send {
        api.watch(stream.key.clone(), stream.prefix, stream.start_revision)
    }

    /// Stands for [`WatchEvents::next`] on `stream`.
    fn watch_next<E: WatchEvents>(
        &self,
        stream: &WatchStream,
        events: &mut E,
    ) -> impl Future<Output = Option<Result<WatchMessage, EtcdError>>> + Send {
        let _ = stream;
        events.next()
    }
}

/// A client of etcd whose traffic passes through an [`Intercept`]: for
/// fault-injection tests, recording what coord asks, or measuring its
/// streams. The prober, the probe hub and the re-dial on silence are the
/// wrapped client's.
///
/// ```
/// use coord::etcd::{EtcdApi, EtcdError, Intercept, Intercepted};
/// use coord::LeaseId;
///
/// /// Claims every revoke succeeded without sending it.
/// #[derive(Clone)]
/// struct SwallowRevokes;
///
/// impl Intercept for SwallowRevokes {
///     async fn lease_revoke<A: EtcdApi>(&self, _api: &A, _lease: LeaseId) -> Result<(), EtcdError> {
///         Ok(())
///     }
/// }
///
/// fn wrap<A: EtcdApi>(client: A) -> Intercepted<A, SwallowRevokes> {
///     Intercepted::new(client, SwallowRevokes)
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Intercepted<A, I> {
    inner: A,
    intercept: I,
    streams: Arc<AtomicU64>,
}

impl<A: EtcdApi, I: Intercept> Intercepted<A, I> {
    /// `inner`, its traffic passed through `intercept`.
    pub fn new(inner: A, intercept: I) -> Self {
        Intercepted {
            inner,
            intercept,
            streams: Arc::default(),
        }
    }

    /// The wrapped client.
    pub fn inner(&self) -> &A {
        &self.inner
    }

    /// The interceptor.
    pub fn intercept(&self) -> &I {
        &self.intercept
    }

    fn next_stream(&self) -> u64 {
        self.streams.fetch_add(1, Ordering::Relaxed)
    }
}

impl<A: EtcdApi, I: Intercept> EtcdApi for Intercepted<A, I> {
    type Keeper = InterceptedKeeper<A::Keeper, I>;
    type Replies = InterceptedReplies<A::Replies, I>;
    type WatchControl = A::WatchControl;
    type WatchEvents = InterceptedEvents<A::WatchEvents, I>;

    async fn range(&self, request: RangeRequest) -> Result<Listing, EtcdError> {
        self.intercept.range(&self.inner, request).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, EtcdError> {
        self.intercept.txn(&self.inner, txn).await
    }

    async fn watch(
        &self,
        key: Vec<u8>,
        prefix: bool,
        start_revision: Revision,
    ) -> Result<(Self::WatchControl, Self::WatchEvents), EtcdError> {
        let stream = WatchStream {
            key,
            prefix,
            start_revision,
            id: self.next_stream(),
        };
        let (control, events) = self.intercept.watch(&self.inner, &stream).await?;
        let events = InterceptedEvents {
            inner: events,
            intercept: self.intercept.clone(),
            stream,
        };
        Ok((control, events))
    }

    async fn lease_grant(&self, ttl_secs: i64) -> Result<Granted, EtcdError> {
        self.intercept.lease_grant(&self.inner, ttl_secs).await
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), EtcdError> {
        self.intercept.lease_revoke(&self.inner, lease).await
    }

    fn probe_hub(&self) -> Option<crate::ProbeHub> {
        self.inner.probe_hub()
    }

    fn for_probe(&self) -> Self {
        Intercepted {
            inner: self.inner.for_probe(),
            intercept: self.intercept.clone(),
            streams: Arc::clone(&self.streams),
        }
    }

    async fn silent(&self) {
        self.inner.silent().await;
    }

    async fn lease_keep_alive(
        &self,
        lease: LeaseId,
    ) -> Result<(Self::Keeper, Self::Replies), EtcdError> {
        let stream = KeepAliveStream {
            lease,
            id: self.next_stream(),
        };
        let (keeper, replies) = self
            .intercept
            .lease_keep_alive(&self.inner, &stream)
            .await?;
        Ok((
            InterceptedKeeper {
                inner: keeper,
                intercept: self.intercept.clone(),
                stream,
            },
            InterceptedReplies {
                inner: replies,
                intercept: self.intercept.clone(),
                stream,
            },
        ))
    }
}

/// The sending half of an [`Intercepted`] keep-alive stream.
#[derive(Debug)]
pub struct InterceptedKeeper<K, I> {
    inner: K,
    intercept: I,
    stream: KeepAliveStream,
}

impl<K: KeepAliveSender, I: Intercept> KeepAliveSender for InterceptedKeeper<K, I> {
    async fn send(&mut self) -> Result<(), EtcdError> {
        self.intercept
            .keep_alive_send(&self.stream, &mut self.inner)
            .await
    }
}

/// The replies of an [`Intercepted`] keep-alive stream.
#[derive(Debug)]
pub struct InterceptedReplies<R, I> {
    inner: R,
    intercept: I,
    stream: KeepAliveStream,
}

impl<R: KeepAliveReplies, I: Intercept> KeepAliveReplies for InterceptedReplies<R, I> {
    async fn next(&mut self) -> Option<Result<i64, EtcdError>> {
        self.intercept
            .keep_alive_next(&self.stream, &mut self.inner)
            .await
    }
}

/// The messages of an [`Intercepted`] watch stream.
#[derive(Debug)]
pub struct InterceptedEvents<E, I> {
    inner: E,
    intercept: I,
    stream: WatchStream,
}

impl<E: WatchEvents, I: Intercept> WatchEvents for InterceptedEvents<E, I> {
    async fn next(&mut self) -> Option<Result<WatchMessage, EtcdError>> {
        self.intercept
            .watch_next(&self.stream, &mut self.inner)
            .await
    }
}
