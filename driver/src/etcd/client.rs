//! The client [`connect`](crate::connect) opens: etcd-client's client,
//! re-dialled when etcd goes silent, and the one probe that every handle
//! made from it shares.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use coord_core::io::{Listing, RangeRequest, Txn, TxnResponse};
use coord_core::{LeaseId, Revision};
use tracing::{debug, warn};

use crate::etcd::{EtcdApi, EtcdError, Granted};
use crate::ProbeHub;

/// Least time between two moves to another member.
const MOVE_EVERY: Duration = Duration::from_secs(1);

/// The member coord's handles should use after the one at `from` went
/// silent, on a fresh connection: every member (the silent one last) is
/// dialled at once and asked a cheap read that needs a leader, and the
/// first to answer is taken, so a member restarted since is used again
/// as soon as it answers. Each has twice the connect timeout to be dialled
/// (and, with a user set, to authenticate) and answer. When none does,
/// the next member in the list, on the connection just dialled to it, so
/// that a silent connection is left all the same; `None` when it could not
/// be dialled either.
async fn answering(
    endpoints: &[String],
    dialer: &super::dial::Dialer,
    from: usize,
) -> Option<(usize, etcd_client::Client)> {
    let n = endpoints.len();
    let next = (from + 1) % n.max(1);
    let mut asked = tokio::task::JoinSet::new();
    for i in (1..=n).map(|k| (from + k) % n) {
        let (endpoint, dialer) = (endpoints[i].clone(), dialer.clone());
        asked.spawn(async move {
            let deadline = tokio::time::Instant::now() + dialer.dial_bound();
            // The dial is bounded by the same time.
            let client = dialer.dial(std::slice::from_ref(&endpoint)).await.ok()?;
            let read = EtcdApi::range(&client, coord_core::probe::probe_request());
            let answered = matches!(tokio::time::timeout_at(deadline, read).await, Ok(Ok(_)));
            Some((i, client, answered))
        });
    }
    let mut dialled_next = None;
    // Dropping the set aborts the reads still waiting.
    while let Some(done) = asked.join_next().await {
        match done {
            Ok(Some((i, client, true))) => return Some((i, client)),
            Ok(Some((i, client, false))) if i == next => dialled_next = Some((i, client)),
            _ => {}
        }
    }
    if dialled_next.is_none() {
        let endpoint = endpoints.get(next).map_or("", String::as_str);
        warn!(%endpoint, "no etcd member answers, and the next could not be dialled");
    }
    dialled_next
}

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
/// - **Where they move:** every member is dialled afresh and asked a cheap
///   read that needs a leader, and handles move to the first that answers.
///   A handle that found etcd silent waits for the move before it sends
///   again (its reopened stream goes to the new member). So after the
///   member in use goes silent, handles are on a member that answers
///   within twice the
///   [connect timeout](crate::ConnectOptions::connect_timeout) (if any
///   does), and a member that was down and has restarted is used again as
///   soon as it answers: no member is skipped for having failed before.
///   When none answers, they move to the next member in the list
///   and the search is repeated at the next silence.
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
    /// When handles last moved; held while they move, so that a handle
    /// that finds etcd silent meanwhile waits for the move and then uses
    /// the member moved to.
    moved_at: tokio::sync::Mutex<Option<tokio::time::Instant>>,
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
                moved_at: tokio::sync::Mutex::new(None),
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
        let mut moved_at = self.inner.moved_at.lock().await;
        let now = tokio::time::Instant::now();
        if moved_at.is_some_and(|t| now < t + MOVE_EVERY) {
            return;
        }
        *moved_at = Some(now);
        let from = self.current_index();
        let Some((to, fresh)) = answering(endpoints, dialer, from).await else {
            return;
        };
        match endpoints.get(to) {
            Some(endpoint) if to != from => {
                debug!(%endpoint, "etcd went silent: moving to a member that answers");
            }
            _ => debug!("etcd went silent: a fresh connection to the same member"),
        }
        match self.inner.current.write() {
            Ok(mut c) => *c = (to, fresh),
            Err(poisoned) => *poisoned.into_inner() = (to, fresh),
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
