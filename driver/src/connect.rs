//! Dialling etcd with the options coord needs.

use std::time::Duration;

use crate::error::Error;

/// Options of [`connect`]. The defaults are what coord's failure handling
/// assumes; a client opened another way should set the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectOptions {
    /// HTTP/2 keep-alive ping interval and timeout. Without them a paused
    /// or blackholed etcd makes streams go silent forever. Default 1 s, 1 s.
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
            keep_alive: (Duration::from_secs(1), Duration::from_secs(1)),
            connect_timeout: Duration::from_secs(2),
            require_leader: true,
            user: None,
        }
    }
}

/// Opens an `etcd-client` client to `endpoints` with HTTP/2 keep-alive
/// (also while idle), a connect timeout and require-leader set. The client
/// connects lazily: an unreachable etcd shows up as `Unavailable` on the
/// first request, not here. Per-request deadlines are set by coord's
/// machines, so no global request timeout is applied (it would cut the
/// long-lived keep-alive streams).
pub async fn connect<E: AsRef<str>>(
    endpoints: &[E],
    options: ConnectOptions,
) -> Result<etcd_client::Client, Error> {
    if endpoints.is_empty() {
        return Err(Error::Connect("no endpoints given".into()));
    }
    let mut opts = etcd_client::ConnectOptions::new()
        .with_keep_alive(options.keep_alive.0, options.keep_alive.1)
        .with_keep_alive_while_idle(true)
        .with_connect_timeout(options.connect_timeout)
        .with_require_leader(options.require_leader);
    if let Some((user, password)) = options.user {
        opts = opts.with_user(user, password);
    }
    etcd_client::Client::connect(endpoints, Some(opts))
        .await
        .map_err(|e| Error::Connect(e.to_string()))
}
