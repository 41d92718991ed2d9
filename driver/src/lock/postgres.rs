//! Postgres locks (feature `postgres`): each holder has a connection of
//! its own, on which it takes `pg_try_advisory_lock(k)`, `k` a 64-bit
//! hash of the name and slot. Postgres drops a session's advisory locks
//! when the session ends, so a holder that dies releases at once, as soon
//! as the server notices the disconnect.
//!
//! Both ends watch the connection, so that neither waits on a silent one:
//! - the holder asks the server a trivial query every `request_timeout`;
//!   one left unanswered that long (a stalled server, a cut network) ends
//!   the connection, and `lost()` fires
//!   ([`LockLost::Unanswered`](super::LockLost::Unanswered)), as it does
//!   when the connection ends by itself;
//! - the session asks the server to probe the holder's connection with TCP
//!   keepalives (first after twice the request timeout, then every request
//!   timeout, given up after two unanswered), and to give up on data left
//!   unacknowledged as long: a holder whose host vanished (powered off, cut
//!   off) is dropped within about four request timeouts of its last check,
//!   where the kernel's defaults would take over two hours. The holder
//!   finds a silence out within two request timeouts, before the server
//!   can drop its session.
//!
//! The token is a row of `coord_lock_tokens` (created if missing),
//! incremented in the holder's session right after it takes the lock: it
//! is as durable as the database, so it grows across server restarts.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use coord_core::lock::{Released, Slots};
use coord_core::FencingToken;
use tokio_postgres::NoTls;

use super::outcome::{check_request_timeout, no_answer, LockError, LockLost, Taken};
use super::watchdog::Watchdog;

/// Where and how: the server and the slots.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PostgresConfig {
    /// The connection string (`postgres://user@host:port/db` or
    /// `host=... user=...`).
    pub url: String,
    /// Holders per name at once (1: a mutex).
    pub slots: Slots,
    /// How long an acquire (connecting, locking and counting the token)
    /// or a release may wait for the server before it fails with
    /// [`LockError::Backend`]; an acquire that fails so holds nothing.
    /// Also the pace of a hold's checks (one every request timeout, lost
    /// when one is unanswered that long) and of the server's keepalives on
    /// the hold's connection (see the module docs). Default 5 s; 10 ms to
    /// 5 min.
    pub request_timeout: Duration,
}

/// Builder-style setters: the struct is `#[non_exhaustive]`, so that a
/// new option is not a breaking change; start from `PostgresConfig::default()`
/// (or its constructor) and set what differs.
impl PostgresConfig {
    /// These options with [`url`](Self::url) set.
    pub fn with_url(mut self, url: impl Into<String>) -> Self {
        self.url = url.into();
        self
    }
    /// These options with [`slots`](Self::slots) set.
    pub fn with_slots(mut self, slots: Slots) -> Self {
        self.slots = slots;
        self
    }
    /// These options with [`request_timeout`](Self::request_timeout) set.
    pub fn with_request_timeout(mut self, request_timeout: Duration) -> Self {
        self.request_timeout = request_timeout;
        self
    }
}

impl PostgresConfig {
    /// Mutexes on the database at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        PostgresConfig {
            url: url.into(),
            slots: Slots::ONE,
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// Postgres locks on one database.
#[derive(Debug, Clone)]
pub struct PostgresLocks {
    config: tokio_postgres::Config,
    slots: Slots,
    request_timeout: Duration,
}

fn backend(e: impl std::error::Error + Send + Sync + 'static) -> LockError {
    LockError::Backend {
        backend: "postgres",
        cause: crate::Cause::new(e),
    }
}

/// The advisory lock key of `slot` of `name`: FNV-1a over both (two
/// names sharing a key, at odds of 2^-64, would exclude each other).
fn advisory_key(name: &str, slot: u32) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes().chain([b'/']).chain(slot.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    i64::from_ne_bytes(h.to_ne_bytes())
}

const TOKEN_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS coord_lock_tokens (name text PRIMARY KEY, token bigint NOT NULL)";
const NEXT_TOKEN: &str = "INSERT INTO coord_lock_tokens (name, token) VALUES ($1, 1) \
     ON CONFLICT (name) DO UPDATE SET token = coord_lock_tokens.token + 1 RETURNING token";

impl PostgresLocks {
    /// Checks `config` (nothing is sent yet).
    pub fn open(config: PostgresConfig) -> Result<PostgresLocks, LockError> {
        let mut parsed = config
            .url
            .parse::<tokio_postgres::Config>()
            .map_err(|e| LockError::BadOptions(format!("postgres url: {e}")))?;
        check_request_timeout("postgres", config.request_timeout)?;
        let options = with_keepalives(parsed.get_options(), config.request_timeout);
        parsed.options(&options);
        Ok(PostgresLocks {
            config: parsed,
            slots: config.slots,
            request_timeout: config.request_timeout,
        })
    }

    /// Connects, takes a free slot and counts its token, within the
    /// request timeout. A server that does not answer in time (stopped, cut
    /// off) fails the acquire; the connection made so far is dropped,
    /// which ends its session and any lock it took.
    pub(super) async fn try_acquire(&self, name: &str) -> Result<Taken<PostgresHold>, LockError> {
        tokio::time::timeout(self.request_timeout, self.acquire(name))
            .await
            .unwrap_or(Err(no_answer("postgres", self.request_timeout)))
    }

    async fn acquire(&self, name: &str) -> Result<Taken<PostgresHold>, LockError> {
        match self.dial().await? {
            Dialled::Tcp(stream) => self.take_on(stream, name).await,
            Dialled::Unix(stream) => self.take_on(stream, name).await,
        }
    }

    /// A connection to the first host of the URL that answers, in order
    /// (each on its port, or the one port given, or 5432; at its
    /// `hostaddr` if one is given): made here rather than by
    /// `tokio-postgres`, so that the hold can keep its socket (see
    /// `Holder::hold_fds`).
    async fn dial(&self) -> Result<Dialled, LockError> {
        let hosts = self.config.get_hosts();
        let ports = self.config.get_ports();
        let addrs = self.config.get_hostaddrs();
        let mut last = None;
        for (i, host) in hosts.iter().enumerate() {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            let dialled = match host {
                tokio_postgres::config::Host::Tcp(name) => {
                    let stream = match addrs.get(i) {
                        Some(ip) => tokio::net::TcpStream::connect((*ip, port)).await,
                        None => tokio::net::TcpStream::connect((name.as_str(), port)).await,
                    };
                    stream.map(|s| {
                        let _ = s.set_nodelay(true);
                        Dialled::Tcp(s)
                    })
                }
                tokio_postgres::config::Host::Unix(dir) => {
                    tokio::net::UnixStream::connect(dir.join(format!(".s.PGSQL.{port}")))
                        .await
                        .map(Dialled::Unix)
                }
            };
            match dialled {
                Ok(d) => return Ok(d),
                Err(e) => last = Some(e),
            }
        }
        Err(match last {
            Some(e) => backend(e),
            None => LockError::BadOptions("postgres url: no host".into()),
        })
    }

    /// Opens a session on `stream`, then takes a slot of `name`.
    async fn take_on<S>(&self, stream: S, name: &str) -> Result<Taken<PostgresHold>, LockError>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + AsFd + Unpin + Send + 'static,
    {
        let socket = stream.as_fd().try_clone_to_owned().map_err(backend)?;
        let ender = socket.try_clone().map_err(backend)?;
        let (client, connection) = self
            .config
            .connect_raw(stream, NoTls)
            .await
            .map_err(backend)?;
        let client = Arc::new(client);
        let checked = Arc::clone(&client);
        let every = self.request_timeout;
        // Ending drops the connection (if still open): the session ends,
        // and its locks with it, once the server reads the close.
        let connection = Watchdog::spawn(async move {
            tokio::select! {
                // The connection first: it reads the answers the checks
                // wait for (after a pause of this process, one may be
                // waiting to be read when its timeout is found passed).
                biased;
                ended = connection => {
                    if let Err(e) = ended {
                        tracing::warn!(error = %e, "postgres lock connection ended");
                    }
                    LockLost::Disconnected
                }
                () = answered_until_silent(&checked, every) => {
                    tracing::warn!(
                        within = ?every,
                        "postgres left a lock's check unanswered: its connection is ended"
                    );
                    end_socket(&ender);
                    LockLost::Unanswered
                }
            }
        });
        // Counts the server's keepalives (`with_keepalives`) from the
        // latest data: at most the kernel's defaults apply before this.
        if let Err(e) = client
            .batch_execute(&format!(
                "SET tcp_user_timeout = {}",
                server_give_up(self.request_timeout).as_millis()
            ))
            .await
        {
            // Before Postgres 12 there is no such setting; the keepalives
            // still drop a vanished holder, as long as nothing is in flight.
            tracing::debug!(error = %e, "postgres: tcp_user_timeout not set");
        }
        let hold = PostgresHold {
            client,
            connection,
            socket,
            key: 0,
            released: false,
            request_timeout: self.request_timeout,
        };
        hold.take(name, self.slots).await
    }
}

/// How long the server waits on a silent holder's connection before it
/// drops the session: the keepalives' first probe after twice `timeout`,
/// then one every `timeout`, two unanswered (four timeouts in all,
/// counted in whole seconds from the connection's last data).
fn server_give_up(timeout: Duration) -> Duration {
    let (idle, interval, count) = keepalive_seconds(timeout);
    Duration::from_secs(idle + interval * count)
}

/// The server's TCP keepalive settings for a holder's session, in whole
/// seconds (Postgres takes no less; 0 would mean the kernel's default):
/// idle, interval and count.
fn keepalive_seconds(timeout: Duration) -> (u64, u64, u64) {
    let interval = timeout.as_millis().div_ceil(1000).max(1);
    let interval = u64::try_from(interval).unwrap_or(u64::MAX);
    (interval.saturating_mul(2), interval, 2)
}

/// `existing` startup options (of the caller's URL, kept) with the
/// server's keepalive settings for the holder's session added.
fn with_keepalives(existing: Option<&str>, timeout: Duration) -> String {
    let (idle, interval, count) = keepalive_seconds(timeout);
    let ours = format!(
        "-c tcp_keepalives_idle={idle} -c tcp_keepalives_interval={interval} \
         -c tcp_keepalives_count={count}"
    );
    match existing {
        Some(e) if !e.trim().is_empty() => format!("{} {ours}", e.trim()),
        _ => ours,
    }
}

/// Asks `client`'s server a trivial query every `every`; completes when
/// one is left unanswered for `every`. Never completes once the
/// connection failed: its own end says so.
async fn answered_until_silent(client: &tokio_postgres::Client, every: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match tokio::time::timeout(every, client.simple_query("SELECT 1")).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return std::future::pending().await,
            Err(_) => return,
        }
    }
}

/// A held advisory lock, on its own connection.
#[derive(Debug)]
pub(super) struct PostgresHold {
    client: Arc<tokio_postgres::Client>,
    /// The connection's task: fires when the connection ends (and with it
    /// the session's advisory locks) or a check of it goes unanswered
    /// (then it ends it); dropping it ends the connection.
    connection: Watchdog,
    /// A duplicate of the connection's socket: handed to another process
    /// (see `Holder::hold_fds`), it keeps the session, and so the lock,
    /// until that process closes it, even if this one dies. An ended
    /// connection is shut down (`end_socket`), which no duplicate
    /// survives.
    socket: OwnedFd,
    key: i64,
    released: bool,
    request_timeout: Duration,
}

impl PostgresHold {
    /// Takes the first free slot of `name` on this connection, then the
    /// next token; closes the connection if none is free.
    async fn take(mut self, name: &str, slots: Slots) -> Result<Taken<PostgresHold>, LockError> {
        for slot in 0..slots.get() {
            let key = advisory_key(name, slot);
            let row = self
                .client
                .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
                .await
                .map_err(backend)?;
            let taken: bool = row.try_get(0).map_err(backend)?;
            if !taken {
                continue;
            }
            self.key = key;
            let token = self.next_token(name).await?;
            return Ok(Taken {
                slot,
                token: FencingToken(token),
                hold: self,
            });
        }
        self.released = true;
        Err(LockError::Locked)
    }

    async fn next_token(&self, name: &str) -> Result<i64, LockError> {
        // Sessions creating the table at once may collide (a unique
        // violation in the catalog): one try more sees it made.
        if self.client.batch_execute(TOKEN_TABLE).await.is_err() {
            self.client
                .batch_execute(TOKEN_TABLE)
                .await
                .map_err(backend)?;
        }
        let row = self
            .client
            .query_one(NEXT_TOKEN, &[&name])
            .await
            .map_err(backend)?;
        row.try_get(0).map_err(backend)
    }

    pub(super) async fn release(&mut self) -> Result<Released, LockError> {
        if std::mem::replace(&mut self.released, true) || self.connection.has_fired() {
            return Ok(Released::AlreadyGone);
        }
        let unlock = tokio::time::timeout(
            self.request_timeout,
            self.client
                .query_one("SELECT pg_advisory_unlock($1)", &[&self.key]),
        )
        .await;
        let Ok(row) = unlock else {
            // Ending the connection ends the session, and with it the lock,
            // once the server notices.
            self.connection.stop();
            end_socket(&self.socket);
            return Err(no_answer("postgres", self.request_timeout));
        };
        let released = match row {
            Ok(r) => r.try_get::<_, bool>(0).unwrap_or(false),
            // The connection is gone: so is the lock.
            Err(_) => false,
        };
        Ok(if released {
            Released::Released
        } else {
            Released::AlreadyGone
        })
    }

    pub(super) async fn lost(&self) -> LockLost {
        if self.released {
            std::future::pending::<()>().await;
        }
        self.connection.fired().await
    }
}

impl PostgresHold {
    /// The connection's socket.
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    /// True once released (or found lost).
    pub(super) fn is_released(&self) -> bool {
        self.released || self.connection.has_fired()
    }
}

/// Shuts the connection's socket down both ways: the server reads the
/// close, whichever process still has the socket open.
fn end_socket(socket: &OwnedFd) {
    use std::os::fd::AsRawFd;
    let _ = nix::sys::socket::shutdown(socket.as_raw_fd(), nix::sys::socket::Shutdown::Both);
}

/// The socket of a new connection.
enum Dialled {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

// Dropping the hold drops its connection's watchdog, which ends the
// connection: that releases its advisory locks (unless another process
// keeps a duplicate of its socket, see `PostgresHold::socket`).

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_name_and_slot_and_are_stable() {
        assert_eq!(advisory_key("a", 0), advisory_key("a", 0));
        assert_ne!(advisory_key("a", 0), advisory_key("a", 1));
        assert_ne!(advisory_key("a", 0), advisory_key("b", 0));
        // Pinned (FNV-1a of "jobs/" and slot 0 as 4 little-endian bytes,
        // computed apart): every process must compute the same key.
        assert_eq!(advisory_key("jobs", 0), -5_837_381_466_052_395_370);
    }

    #[test]
    fn the_server_gives_up_on_a_silent_holder_after_four_request_timeouts() {
        assert_eq!(keepalive_seconds(Duration::from_secs(5)), (10, 5, 2));
        assert_eq!(
            server_give_up(Duration::from_secs(5)),
            Duration::from_secs(20)
        );
        // Whole seconds, never 0 (the kernel's default of two hours).
        assert_eq!(keepalive_seconds(Duration::from_millis(10)), (2, 1, 2));
        assert_eq!(keepalive_seconds(Duration::from_millis(1_001)), (4, 2, 2));
        // The holder finds a silence out within two request timeouts (a
        // check due, then unanswered); the server counts from the last
        // check it read, up to one timeout before the silence: it drops
        // the session no sooner than three timeouts after the silence.
        for ms in [10, 500, 999, 1_000, 5_000, 300_000] {
            let t = Duration::from_millis(ms);
            assert!(server_give_up(t) >= 2 * t + t, "{t:?}");
        }
    }

    #[test]
    fn the_callers_startup_options_are_kept_beside_the_keepalives() {
        let ours =
            "-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=2";
        assert_eq!(with_keepalives(None, Duration::from_secs(5)), ours);
        assert_eq!(with_keepalives(Some("  "), Duration::from_secs(5)), ours);
        assert_eq!(
            with_keepalives(Some("-c search_path=app"), Duration::from_secs(5)),
            format!("-c search_path=app {ours}")
        );
        let locks =
            PostgresLocks::open(PostgresConfig::new("host=h options='-c geqo=off'")).unwrap();
        assert_eq!(
            locks.config.get_options(),
            Some(format!("-c geqo=off {ours}").as_str())
        );
    }
}
