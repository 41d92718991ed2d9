//! Redis locks (feature `redis`): slot 0 of name `n` is the key
//! `<prefix>n` (slot `i` above 0: `<prefix>n/i`), set with `NX` and a TTL
//! to a value only this holder knows. Release and extend are Lua scripts
//! that act only while the key still holds that value. A holder that dies
//! stops extending, so its key expires: recovery within the TTL.
//!
//! The token is `INCR <prefix>n/token`, in the same script as the `SET`,
//! raised to at least the server's clock in microseconds: tokens keep
//! growing even across a restart that lost the counter (Redis without
//! persistence), as long as the server's clock does not step back.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use coord_core::lock::{Released, Slots};
use coord_core::FencingToken;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::OnceCell;

use super::outcome::{check_request_timeout, no_answer, LockError, LockLost, Taken};
use super::watchdog::Watchdog;

/// Where and how: the server, the slots, the TTL and the key prefix.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedisConfig {
    /// The server (`redis://host:port/db`).
    pub url: String,
    /// Holders per name at once (1: a mutex).
    pub slots: Slots,
    /// How long a dead holder's key lives (a live holder extends it every
    /// third of it). Default 10 s; 100 ms to 1 day.
    pub ttl: Duration,
    /// Prefix of every key. Default `coord:lock:`.
    pub prefix: String,
    /// How long one request may wait for the server (connecting
    /// included) before it fails with [`LockError::Backend`]; an extension
    /// waits a third of the TTL at most. Default 2 s; 10 ms to 5 min.
    pub request_timeout: Duration,
}

/// Builder-style setters: the struct is `#[non_exhaustive]`, so that a
/// new option is not a breaking change; start from `RedisConfig::default()`
/// (or its constructor) and set what differs.
impl RedisConfig {
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
    /// These options with [`ttl`](Self::ttl) set.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// These options with [`prefix`](Self::prefix) set.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
    /// These options with [`request_timeout`](Self::request_timeout) set.
    pub fn with_request_timeout(mut self, request_timeout: Duration) -> Self {
        self.request_timeout = request_timeout;
        self
    }
}

impl RedisConfig {
    /// Mutexes on the server at `url`, TTL 10 s.
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            slots: Slots::ONE,
            ttl: Duration::from_secs(10),
            prefix: "coord:lock:".into(),
            request_timeout: Duration::from_secs(2),
        }
    }
}

/// Redis locks on one server.
#[derive(Clone)]
pub struct RedisLocks {
    client: redis::Client,
    /// One connection for every hold of this locker, made at the first
    /// acquire; it reconnects by itself after a failure.
    conn: Arc<OnceCell<ConnectionManager>>,
    slots: Slots,
    ttl: Duration,
    prefix: String,
    request_timeout: Duration,
}

const ACQUIRE: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local t = redis.call('INCR', KEYS[2])
  local now = redis.call('TIME')
  local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
  if t < floor then
    redis.call('SET', KEYS[2], floor)
    t = floor
  end
  return t
end
return 0
";

const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

const EXTEND: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

fn backend(e: impl std::error::Error + Send + Sync + 'static) -> LockError {
    LockError::Backend {
        backend: "redis",
        cause: crate::Cause::new(e),
    }
}

/// Waits for `request` at most `within`: a server that does not answer in
/// time (stopped, cut off, or still being reconnected to) is an error like
/// any other, not a wait without end.
async fn bounded<T>(
    within: Duration,
    request: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, LockError> {
    match tokio::time::timeout(within, request).await {
        Ok(answer) => answer.map_err(backend),
        Err(_) => Err(no_answer("redis", within)),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A value no other holder has: host, pid, time and a counter.
fn unique_value() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}:{}:{nanos}:{}",
        super::pid::this_host(),
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

impl RedisLocks {
    /// Checks `config` (nothing is sent yet).
    pub fn open(config: RedisConfig) -> Result<RedisLocks, LockError> {
        if config.ttl < Duration::from_millis(100) || config.ttl > Duration::from_secs(86_400) {
            return Err(LockError::BadOptions(format!(
                "the redis TTL must be 100 ms to 1 day, got {:?}",
                config.ttl
            )));
        }
        check_request_timeout("redis", config.request_timeout)?;
        let client = redis::Client::open(config.url.as_str())
            .map_err(|e| LockError::BadOptions(format!("redis url: {e}")))?;
        Ok(RedisLocks {
            client,
            conn: Arc::default(),
            slots: config.slots,
            ttl: config.ttl,
            prefix: config.prefix,
            request_timeout: config.request_timeout,
        })
    }

    /// The connection manager's settings. Its defaults retry a lost
    /// connection for minutes (redis 0.27 waits up to a minute between
    /// tries), and every request made meanwhile waits for that: here a
    /// reconnection gives up within seconds, and each try is bounded by
    /// the request timeout.
    fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_number_of_retries(2)
            .set_max_delay(500)
            .set_connection_timeout(self.request_timeout)
            .set_response_timeout(self.request_timeout)
    }

    fn slot_key(&self, name: &str, slot: u32) -> String {
        if slot == 0 {
            format!("{}{name}", self.prefix)
        } else {
            format!("{}{name}/{slot}", self.prefix)
        }
    }

    pub(super) async fn try_acquire(&self, name: &str) -> Result<Taken<RedisHold>, LockError> {
        let connect = self.conn.get_or_try_init(|| {
            ConnectionManager::new_with_config(self.client.clone(), self.manager_config())
        });
        let mut conn = bounded(self.request_timeout, connect).await?.clone();
        let value = unique_value();
        let token_key = format!("{}{name}/token", self.prefix);
        for slot in 0..self.slots.get() {
            let key = self.slot_key(name, slot);
            let script = redis::Script::new(ACQUIRE);
            let mut invocation = script.key(&key);
            invocation.key(&token_key).arg(&value).arg(millis(self.ttl));
            let token: i64 =
                bounded(self.request_timeout, invocation.invoke_async(&mut conn)).await?;
            if token > 0 {
                let hold = RedisHold::start(conn, key, value, self.ttl, self.request_timeout);
                return Ok(Taken {
                    slot,
                    token: FencingToken(token),
                    hold,
                });
            }
        }
        Err(LockError::Locked)
    }
}

impl std::fmt::Debug for RedisLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLocks")
            .field("server", &self.client.get_connection_info().addr)
            .field("slots", &self.slots)
            .field("ttl", &self.ttl)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// A held key: extended every third of the TTL in the background.
pub(super) struct RedisHold {
    conn: ConnectionManager,
    key: String,
    value: String,
    ttl: Duration,
    request_timeout: Duration,
    /// The extender: fires when the key is found gone or changed, or etcd
    /// stayed unreachable past the TTL since the last extension.
    refresher: Watchdog,
    released: bool,
}

impl std::fmt::Debug for RedisHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisHold")
            .field("key", &self.key)
            .field("ttl", &self.ttl)
            .field("released", &self.released)
            .finish_non_exhaustive()
    }
}

/// Extends `key` to `ttl` if it still holds `value`; waits for the answer
/// a third of the TTL at most (the next extension is due then), and the
/// request timeout if that is shorter.
async fn extend(
    conn: &mut ConnectionManager,
    key: &str,
    value: &str,
    ttl: Duration,
    request_timeout: Duration,
) -> Result<bool, LockError> {
    let script = redis::Script::new(EXTEND);
    let mut invocation = script.key(key);
    invocation.arg(value).arg(millis(ttl));
    let within = request_timeout.min(ttl / 3);
    let extended: i64 = bounded(within, invocation.invoke_async(conn)).await?;
    Ok(extended == 1)
}

/// Deletes `key` if it still holds `value`: 1 if it did.
async fn release(
    conn: &mut ConnectionManager,
    key: &str,
    value: &str,
    request_timeout: Duration,
) -> Result<i64, LockError> {
    let script = redis::Script::new(RELEASE);
    let mut invocation = script.key(key);
    invocation.arg(value);
    bounded(request_timeout, invocation.invoke_async(conn)).await
}

impl RedisHold {
    fn start(
        conn: ConnectionManager,
        key: String,
        value: String,
        ttl: Duration,
        request_timeout: Duration,
    ) -> RedisHold {
        let mut c = conn.clone();
        let (k, v) = (key.clone(), value.clone());
        let refresher = Watchdog::spawn(async move {
            let mut confirmed = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(ttl / 3).await;
                match extend(&mut c, &k, &v, ttl, request_timeout).await {
                    Ok(true) => confirmed = tokio::time::Instant::now(),
                    Ok(false) => break,
                    // Unreachable: the key may live on until its TTL
                    // from the last extension has passed.
                    Err(e) if confirmed.elapsed() < ttl => {
                        tracing::warn!(key = %k, error = %e, "cannot extend a redis lock");
                    }
                    Err(_) => break,
                }
            }
            tracing::warn!(key = %k, "redis lock lost");
            LockLost::Expired
        });
        RedisHold {
            conn,
            key,
            value,
            ttl,
            request_timeout,
            refresher,
            released: false,
        }
    }

    pub(super) async fn release(&mut self) -> Result<Released, LockError> {
        if std::mem::replace(&mut self.released, true) {
            return Ok(Released::AlreadyGone);
        }
        self.refresher.stop();
        // Lost: its TTL lapsed since the last extension, the key is gone.
        if self.refresher.has_fired() {
            return Ok(Released::AlreadyGone);
        }
        let deleted = release(&mut self.conn, &self.key, &self.value, self.request_timeout).await?;
        Ok(if deleted == 1 {
            Released::Released
        } else {
            Released::AlreadyGone
        })
    }

    pub(super) async fn extend(&mut self) -> Result<(), LockError> {
        if !self.released
            && extend(
                &mut self.conn,
                &self.key,
                &self.value,
                self.ttl,
                self.request_timeout,
            )
            .await?
        {
            Ok(())
        } else {
            Err(LockError::Lost(LockLost::TakenOver))
        }
    }

    pub(super) async fn lost(&self) -> LockLost {
        self.refresher.fired().await
    }
}

impl Drop for RedisHold {
    fn drop(&mut self) {
        self.refresher.stop();
        if self.released {
            return;
        }
        // Released in the background; else the key expires.
        let mut conn = self.conn.clone();
        let (key, value) = (self.key.clone(), self.value.clone());
        let request_timeout = self.request_timeout;
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = release(&mut conn, &key, &value, request_timeout).await {
                    tracing::warn!(%key, error = %e, "redis lock not released: it expires");
                }
            });
        }
    }
}
