//! Dialling etcd with the options coord needs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::Error;

/// Spreads the clients of one process over the members.
static NEXT_START: AtomicU64 = AtomicU64::new(0);

/// Options of [`connect`]. The defaults are what coord's failure handling
/// assumes; a client opened another way should set the same.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// User name and password, if etcd has authentication on.
    pub user: Option<(String, String)>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            keep_alive: (Duration::from_secs(10), Duration::from_secs(5)),
            connect_timeout: Duration::from_secs(2),
            require_leader: true,
            user: None,
        }
    }
}

/// Opens an `etcd-client` client to `endpoints` with HTTP/2 keep-alive
/// (while a stream is open), a connect timeout and require-leader set. The client
/// connects lazily: an unreachable etcd shows up as `Unavailable` on the
/// first request, not here. Per-request deadlines are set by coord's
/// machines, so no global request timeout is applied (it would cut the
/// long-lived keep-alive streams). Every handle made from the client (and
/// its clones) shares one probe for etcd's return.
pub async fn connect<E: AsRef<str>>(
    endpoints: &[E],
    options: ConnectOptions,
) -> Result<crate::Client, Error> {
    if endpoints.is_empty() {
        return Err(Error::Connect("no endpoints given".into()));
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
    let dial: Vec<String> = endpoints.iter().map(|e| e.as_ref().to_string()).collect();
    let first = etcd_client::Client::connect(endpoints, Some(opts.clone()))
        .await
        .map_err(|e| Error::Connect(e.to_string()))?;
    // Clients of one process start on different members.
    let start =
        usize::try_from(NEXT_START.fetch_add(1, Ordering::Relaxed) + u64::from(std::process::id()))
            .unwrap_or(0)
            % dial.len();
    let member = etcd_client::Client::connect([&dial[start]], Some(opts.clone()))
        .await
        .map_err(|e| Error::Connect(e.to_string()))?;
    Ok(crate::Client::build(
        first,
        (start, member),
        Some((dial, opts)),
    ))
}
