//! The client [`connect`](crate::connect) opens: etcd-client's client,
//! re-dialled when etcd goes silent, and the one probe that every handle
//! made from it shares.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use coord_core::io::{Listing, RangeRequest, Txn, TxnResponse};
use coord_core::{LeaseId, Revision};
use tracing::{debug, warn};

use crate::etcd::{EtcdApi, EtcdError, Granted};
use crate::ProbeHub;

/// Least time between two moves to another member.
const MOVE_EVERY: Duration = Duration::from_secs(1);

/// An etcd client for coord's handles, as [`connect`](crate::connect)
/// opens it.
///
/// - One [`ProbeHub`], shared by its clones: however many handles a
///   process makes from it, at most one cheap probe per second looks for
///   etcd's return while any of them waits on etcd.
/// - Its handles talk to one member at a time, and move to the next one
///   (on a fresh connection) when etcd goes silent: a request, stream or
///   probe unanswered, or a probe refused (a member without a leader). A
///   member that stalls with its connections open (a paused process, a
///   blackholed path) is so left within about a request timeout, whatever
///   the HTTP/2 pings (which must stay slow; see
///   [`ConnectOptions`](crate::ConnectOptions)). At most one move a second.
///
/// [`etcd`](Self::etcd) gives an etcd-client client for requests of your
/// own (etcd-client is re-exported as [`coord::etcd_client`](crate::etcd_client)).
/// Handles also take a bare `etcd_client::Client`; each of them then
/// probes on its own and never moves.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// `None` in the probe task's own copy, so that the task does not keep
    /// the hub (and itself) alive.
    probe: Option<ProbeHub>,
}

/// What every clone of a [`Client`] shares: the members, the one in use,
/// and how to dial another.
struct Inner {
    first: etcd_client::Client,
    /// The member handles use now: its index and client.
    current: RwLock<(usize, etcd_client::Client)>,
    /// How to dial a member (`None`: a client wrapped by [`Client::new`]).
    dial: Option<(Vec<String>, super::dial::Dialer)>,
    moved_at: Mutex<Option<tokio::time::Instant>>,
    /// Whether it dials etcd over TLS (etcd may refuse a client's
    /// certificate, or its lack of one, only after the handshake, by
    /// closing the connection).
    tls: bool,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

impl Client {
    /// Wraps a client opened another way (set what
    /// [`ConnectOptions`](crate::ConnectOptions) sets), with a fresh probe.
    /// It never moves (coord does not know how to dial it).
    pub fn new(etcd: etcd_client::Client) -> Self {
        Self::build(etcd.clone(), (0, etcd), None, false)
    }

    /// `first` to every endpoint, handles on member `current`.
    pub(crate) fn build(
        first: etcd_client::Client,
        current: (usize, etcd_client::Client),
        dial: Option<(Vec<String>, super::dial::Dialer)>,
        tls: bool,
    ) -> Self {
        Client {
            inner: Arc::new(Inner {
                first,
                current: RwLock::new(current),
                dial,
                tls,
                moved_at: Mutex::new(None),
            }),
            probe: Some(ProbeHub::new()),
        }
    }

    /// An etcd-client client for requests of your own: the one first
    /// dialled to every endpoint, which spreads its requests over them as
    /// etcd-client does. Cheap to clone.
    pub fn etcd(&self) -> etcd_client::Client {
        self.inner.first.clone()
    }

    /// The etcd-client client coord's handles use now (one member's).
    fn current(&self) -> etcd_client::Client {
        match self.inner.current.read() {
            Ok(c) => c.1.clone(),
            Err(poisoned) => poisoned.into_inner().1.clone(),
        }
    }

    /// Asks etcd once whether it answers (a maintenance status of the
    /// member first dialled), within `timeout`. Use it to fail fast at
    /// start: [`connect`](crate::connect) itself does not dial.
    ///
    /// Errors: [`Error::Tls`](crate::Error::Tls) when the TLS handshake
    /// fails (a wrong CA, a client certificate etcd does not accept),
    /// [`Error::Auth`](crate::Error::Auth) when etcd refuses the
    /// credentials, [`Error::Unreachable`](crate::Error::Unreachable) when
    /// it refuses the connection or does not answer in time. Over TLS, a
    /// connection etcd closes once it is open (which is how etcd refuses a
    /// missing, expired or foreign client certificate) is reported as
    /// `Error::Tls` saying so.
    ///
    /// Cancel safety: cancel-safe (a read).
    pub async fn check(&self, timeout: Duration) -> Result<(), crate::Error> {
        let mut maintenance = self.inner.first.maintenance_client();
        match tokio::time::timeout(timeout, maintenance.status()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(match (super::adapter::connect_error(e), self.inner.tls) {
                (crate::Error::Unreachable(m), true) if closed_after_connecting(m.text()) => {
                    crate::Error::Tls(m.context(
                        "etcd closed the connection after the TLS handshake: it may want \
                         a client certificate, or refuse this one (expired, or from a CA \
                         it does not trust)",
                    ))
                }
                (other, _) => other,
            }),
            Err(_) => Err(crate::Error::Unreachable(crate::Cause::msg(format!(
                "no answer within {timeout:?}"
            )))),
        }
    }

    fn current_index(&self) -> usize {
        match self.inner.current.read() {
            Ok(c) => c.0,
            Err(poisoned) => poisoned.into_inner().0,
        }
    }
}

/// A failure that happened on a connection once it was open (not a
/// refused or timed-out connect).
fn closed_after_connecting(message: &str) -> bool {
    [
        "broken pipe",
        "connection closed",
        "connection reset",
        "operation was canceled",
    ]
    .iter()
    .any(|w| message.contains(w))
        && !message.contains("tcp connect error")
}

impl From<etcd_client::Client> for Client {
    fn from(etcd: etcd_client::Client) -> Self {
        Client::new(etcd)
    }
}

impl EtcdApi for Client {
    type Keeper = <etcd_client::Client as EtcdApi>::Keeper;
    type Replies = <etcd_client::Client as EtcdApi>::Replies;
    type WatchControl = <etcd_client::Client as EtcdApi>::WatchControl;
    type WatchEvents = <etcd_client::Client as EtcdApi>::WatchEvents;

    fn probe_hub(&self) -> Option<ProbeHub> {
        self.probe.clone()
    }

    fn for_probe(&self) -> Self {
        Client {
            inner: Arc::clone(&self.inner),
            probe: None,
        }
    }

    async fn silent(&self) {
        let Some((endpoints, dialer)) = &self.inner.dial else {
            return;
        };
        {
            let mut at = match self.inner.moved_at.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            let now = tokio::time::Instant::now();
            if at.is_some_and(|t| now < t + MOVE_EVERY) {
                return;
            }
            *at = Some(now);
        }
        let next = (self.current_index() + 1) % endpoints.len().max(1);
        let Some(endpoint) = endpoints.get(next) else {
            return;
        };
        match dialer.dial(std::slice::from_ref(endpoint)).await {
            Ok(fresh) => {
                debug!(%endpoint, "etcd went silent: moving to the next member");
                match self.inner.current.write() {
                    Ok(mut c) => *c = (next, fresh),
                    Err(poisoned) => *poisoned.into_inner() = (next, fresh),
                }
            }
            Err(e) => warn!(%endpoint, error = %e, "dialling the next etcd member failed"),
        }
    }

    async fn range(&self, request: RangeRequest) -> Result<Listing, EtcdError> {
        EtcdApi::range(&self.current(), request).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, EtcdError> {
        EtcdApi::txn(&self.current(), txn).await
    }

    async fn watch(
        &self,
        key: Vec<u8>,
        prefix: bool,
        start_revision: Revision,
    ) -> Result<(Self::WatchControl, Self::WatchEvents), EtcdError> {
        EtcdApi::watch(&self.current(), key, prefix, start_revision).await
    }

    async fn lease_grant(&self, ttl_secs: i64) -> Result<Granted, EtcdError> {
        EtcdApi::lease_grant(&self.current(), ttl_secs).await
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), EtcdError> {
        EtcdApi::lease_revoke(&self.current(), lease).await
    }

    async fn lease_keep_alive(
        &self,
        lease: LeaseId,
    ) -> Result<(Self::Keeper, Self::Replies), EtcdError> {
        EtcdApi::lease_keep_alive(&self.current(), lease).await
    }
}
