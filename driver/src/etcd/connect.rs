//! Dialling etcd with the options coord needs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::adapter::connect_error;
use super::dial::Dialer;
use super::tls::TlsOptions;
use crate::cause::Cause;
use crate::error::Error;

/// Spreads the clients of one process over the members.
static NEXT_START: AtomicU64 = AtomicU64::new(0);

/// Options of [`connect`]. The defaults are what coord's failure handling
/// assumes; a client opened another way should set the same. Its `Debug`
/// never shows the password.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectOptions {
    /// HTTP/2 keep-alive ping interval and timeout, sent only while a
    /// stream is open: they close a connection that died silently (a
    /// rebooted etcd host, lost NAT state), so that requests reconnect.
    /// Default 10 s, 5 s.
    ///
    /// etcd answers pings that come more often than its
    /// `--grpc-keepalive-min-time` (5 s by default) while it has nothing to
    /// send, for example to a watch whose reader stalled, by closing the
    /// whole connection (GOAWAY `too_many_pings`), and with it every
    /// keep-alive and watch on it. Keep the interval well above that
    /// setting. Fast detection of a silent etcd does not depend on these
    /// pings: every coord request and stream has its own deadline (the
    /// keep-alive's reply, the watch's progress probe).
    pub keep_alive: (Duration, Duration),
    /// TCP connect timeout. Default 2 s.
    pub connect_timeout: Duration,
    /// Fail requests at once when the member has no leader, instead of
    /// hanging until quorum returns. Default true.
    pub require_leader: bool,
    /// User name and password, if etcd has authentication on. With a
    /// user, [`connect`] authenticates at once: a wrong password fails it
    /// with [`Error::Auth`].
    pub user: Option<(String, String)>,
    /// TLS to etcd (CA, client certificate). `None`: plain text, unless an
    /// endpoint is `https://` (then the system's roots are trusted).
    pub tls: Option<TlsOptions>,
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("keep_alive", &self.keep_alive)
            .field("connect_timeout", &self.connect_timeout)
            .field("require_leader", &self.require_leader)
            .field("user", &self.user.as_ref().map(|(name, _)| name))
            .field("tls", &self.tls)
            .finish()
    }
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            keep_alive: (Duration::from_secs(10), Duration::from_secs(5)),
            connect_timeout: Duration::from_secs(2),
            require_leader: true,
            user: None,
            tls: None,
        }
    }
}

impl ConnectOptions {
    /// These options with TLS to etcd.
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// These options with etcd's authentication as `user`.
    pub fn with_user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// These options with HTTP/2 keep-alive pings every `interval`, each
    /// given up after `timeout` (see [`keep_alive`](Self::keep_alive)).
    pub fn with_keep_alive(mut self, interval: Duration, timeout: Duration) -> Self {
        self.keep_alive = (interval, timeout);
        self
    }

    /// These options with a TCP connect timeout of `timeout`.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// These options with require-leader on or off (see
    /// [`require_leader`](Self::require_leader)).
    pub fn with_require_leader(mut self, require: bool) -> Self {
        self.require_leader = require;
        self
    }
}

/// Opens an `etcd-client` client to `endpoints` with HTTP/2 keep-alive
/// (while a stream is open), a connect timeout and require-leader set. The client
/// connects lazily: an unreachable etcd shows up as `Unavailable` on the
/// first request, not here. Per-request deadlines are set by coord's
/// machines, so no global request timeout is applied (it would cut the
/// long-lived keep-alive streams). Every handle made from the client (and
/// its clones) shares one probe for etcd's return.
///
/// Fails with [`Error::Connect`] on no endpoints or a malformed one, with
/// [`Error::Auth`] when a user is given and etcd refuses the password, and
/// with [`Error::Unreachable`] or [`Error::Tls`] when a user is given and
/// etcd cannot be reached (authentication needs a round trip). Call
/// [`Client::check`](crate::Client::check) to learn at once whether etcd
/// answers.
///
/// Cancel safety: cancel-safe (nothing is sent to etcd but the authentication,
/// which a later call repeats).
pub async fn connect<E: AsRef<str>>(
    endpoints: &[E],
    options: ConnectOptions,
) -> Result<crate::Client, Error> {
    if endpoints.is_empty() {
        return Err(Error::Connect(Cause::msg("no endpoints given")));
    }
    let mut opts = etcd_client::ConnectOptions::new()
        .with_keep_alive(options.keep_alive.0, options.keep_alive.1)
        // etcd closes a connection pinged with no stream open (its policy
        // does not permit pings without streams).
        .with_keep_alive_while_idle(false)
        .with_connect_timeout(options.connect_timeout)
        .with_require_leader(options.require_leader);
    if let Some((user, password)) = options.user {
        opts = opts.with_user(user, password);
    }
    if let Some(tls) = &options.tls {
        opts = opts.with_tls(tls.to_etcd());
    }
    let dial: Vec<String> = endpoints.iter().map(|e| e.as_ref().to_string()).collect();
    let dialer = Dialer::new(opts, options.connect_timeout, options.tls.as_ref())?;
    let first = dialer.dial(&dial).await.map_err(connect_error)?;
    // Clients of one process start on different members.
    let start =
        usize::try_from(NEXT_START.fetch_add(1, Ordering::Relaxed) + u64::from(std::process::id()))
            .unwrap_or(0)
            % dial.len();
    // The first member that can be dialled (with a user set, dialling
    // authenticates), from `start` on.
    let mut member = None;
    for i in (0..dial.len()).map(|k| (start + k) % dial.len()) {
        match dialer.dial(&dial[i..=i]).await {
            Ok(client) => {
                member = Some((i, client));
                break;
            }
            Err(e) => tracing::debug!(endpoint = %dial[i], error = %e, "member not dialled"),
        }
    }
    let Some(member) = member else {
        // Only a dial that authenticates can fail here: every member
        // refused it or left it unanswered, though `first` got through.
        return Err(Error::Unreachable(Cause::msg(
            "no etcd member could be dialled",
        )));
    };
    let tls = options.tls.is_some() || dial.iter().any(|e| e.starts_with("https://"));
    Ok(crate::Client::build(
        first,
        member,
        Some((dial, dialer)),
        tls,
    ))
}
