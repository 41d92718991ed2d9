//! Postgres locks (feature `postgres`): each holder has a connection of
//! its own, on which it takes `pg_try_advisory_lock(k)`, `k` a 64-bit
//! hash of the name and slot. Postgres drops a session's advisory locks
//! when the session ends, so a holder that dies releases at once, as soon
//! as the server notices the disconnect; `lost()` fires when the
//! holder's own connection ends.
//!
//! The token is a row of `coord_lock_tokens` (created if missing),
//! incremented in the holder's session right after it takes the lock: it
//! is as durable as the database, so it grows across server restarts.

use std::time::Duration;

use coord_core::lock::{Released, Slots};
use coord_core::FencingToken;
use tokio_postgres::NoTls;

use super::watchdog::Watchdog;
use super::{Hold, Holder, LockError, LockLost};

/// Where and how: the server and the slots.
#[derive(Debug, Clone)]
pub struct PostgresConfig {
    /// The connection string (`postgres://user@host:port/db` or
    /// `host=... user=...`).
    pub url: String,
    /// Holders per name at once (1: a mutex).
    pub slots: Slots,
    /// How long an acquire (connecting, locking and counting the token)
    /// or a release may wait for the server before it fails with
    /// [`LockError::Backend`]; an acquire that fails so holds nothing.
    /// Default 5 s; 10 ms to 5 min.
    pub request_timeout: Duration,
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

fn backend(e: impl std::fmt::Display) -> LockError {
    LockError::Backend {
        backend: "postgres",
        message: e.to_string(),
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
        let parsed = config
            .url
            .parse::<tokio_postgres::Config>()
            .map_err(|e| LockError::BadOptions(format!("postgres url: {e}")))?;
        super::check_request_timeout("postgres", config.request_timeout)?;
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
    pub(super) async fn try_acquire(&self, name: &str) -> Result<Holder, LockError> {
        tokio::time::timeout(self.request_timeout, self.acquire(name))
            .await
            .unwrap_or(Err(super::no_answer("postgres", self.request_timeout)))
    }

    async fn acquire(&self, name: &str) -> Result<Holder, LockError> {
        let (client, connection) = self.config.connect(NoTls).await.map_err(backend)?;
        let connection = Watchdog::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "postgres lock connection ended");
            }
        });
        let hold = PostgresHold {
            client,
            connection,
            key: 0,
            released: false,
            request_timeout: self.request_timeout,
        };
        hold.take(name, self.slots).await
    }
}

/// A held advisory lock, on its own connection.
#[derive(Debug)]
pub(super) struct PostgresHold {
    client: tokio_postgres::Client,
    /// The connection's task: fires when the connection ends (and with it
    /// the session's advisory locks); dropping it ends the connection.
    connection: Watchdog,
    key: i64,
    released: bool,
    request_timeout: Duration,
}

impl PostgresHold {
    /// Takes the first free slot of `name` on this connection, then the
    /// next token; closes the connection if none is free.
    async fn take(mut self, name: &str, slots: Slots) -> Result<Holder, LockError> {
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
            return Ok(Holder {
                name: name.to_string(),
                slot,
                token: FencingToken(token),
                hold: Hold::Postgres(Box::new(self)),
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
            return Err(super::no_answer("postgres", self.request_timeout));
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
        self.connection.fired().await;
        LockLost::Disconnected
    }
}

// Dropping the hold drops its connection's watchdog, which ends the
// connection: that releases its advisory locks.

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
}
