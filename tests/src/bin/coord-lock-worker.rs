//! A lock-family holder for tests, run as a separate process:
//!
//! - `coord-lock-worker BACKEND WHERE NAME rounds N COUNTER LOG`: N
//!   times, acquires NAME, increments the number in file COUNTER without
//!   any atomicity of its own (read, pause, write: only the lock keeps two
//!   workers apart), appends the hold's token to LOG, releases.
//! - `coord-lock-worker BACKEND WHERE NAME fenced N STORE LOG`: N rounds
//!   that ride out a backend restart: an acquire the backend fails is
//!   tried again (for up to 120 s), and each hold writes to STORE, a
//!   stand-in for a fencing storage service: under a flock of its own, it
//!   keeps `<count> <highest token>` and accepts a write only with a token
//!   above the highest it has seen. LOG gets `accepted <token>` or
//!   `rejected <token>` per round. A release that fails is not an error
//!   (the restart may have taken the hold).
//! - `coord-lock-worker BACKEND WHERE NAME hold`: acquires NAME, prints
//!   `held <token>`, and stays until killed.
//! - `coord-lock-worker BACKEND WHERE NAME try`: tries NAME once; prints
//!   `acquired <token>` (exit 0) or `locked` (exit 3), and releases.
//!
//! BACKEND is `flock` or `file` (WHERE: the directory), `etcd` (WHERE:
//! the endpoint), `redis` (WHERE: the URL; TTL 2 s) or `postgres` (WHERE:
//! the connection string).

#![forbid(unsafe_code)]

use std::io::Write;
use std::time::Duration;

use coord::lock::{FileConfig, FlockConfig, Locker, Slots};

fn usage() -> ! {
    eprintln!(
        "usage: coord-lock-worker flock|file|etcd|redis|postgres WHERE NAME rounds|fenced N COUNTER LOG\n       coord-lock-worker flock|file|etcd|redis|postgres WHERE NAME hold|try"
    );
    std::process::exit(2);
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("{what}: {e}");
    std::process::exit(1);
}

async fn locker(backend: &str, place: &str) -> Locker {
    match backend {
        "flock" => Locker::flock(FlockConfig::new(place)).unwrap_or_else(|e| fail("flock", e)),
        "file" => Locker::file(FileConfig::new(place)).unwrap_or_else(|e| fail("file", e)),
        "etcd" => {
            let client = coord::connect(&[place], coord::ConnectOptions::default())
                .await
                .unwrap_or_else(|e| fail("connect", e));
            let opts = coord::SessionOptions::default().with_ttl(Duration::from_secs(5));
            let session = coord::Session::new(client, opts)
                .await
                .unwrap_or_else(|e| fail("session", e));
            Locker::etcd(&session, coord::lock::DEFAULT_ETCD_PREFIX, Slots::ONE)
        }
        "redis" => {
            Locker::redis(coord::lock::RedisConfig::new(place).with_ttl(Duration::from_secs(2)))
                .unwrap_or_else(|e| fail("redis", e))
        }
        "postgres" => Locker::postgres(coord::lock::PostgresConfig::new(place))
            .unwrap_or_else(|e| fail("postgres", e)),
        _ => usage(),
    }
}

/// Acquires `name`, trying again while the backend fails (a server
/// restarting); gives up after 120 s.
async fn acquire_through_outages(locker: &Locker, name: &str) -> coord::lock::Holder {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match locker.acquire(name, Some(left)).await {
            Ok(held) => return held,
            Err(coord::lock::LockError::Backend { .. }) if !left.is_zero() => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => fail("acquire", e),
        }
    }
}

/// The fencing storage: under an exclusive flock on `store`, accepts the
/// write (count + 1, highest token = `token`) only if `token` is above
/// the highest token it has accepted. Returns `accepted` or `rejected`.
fn fenced_write(store: &str, token: i64) -> &'static str {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(store)
        .unwrap_or_else(|e| fail("open store", e));
    let mut file = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .unwrap_or_else(|(_, e)| fail("flock store", e));
    let mut text = String::new();
    std::io::Read::read_to_string(&mut *file, &mut text).unwrap_or_else(|e| fail("read store", e));
    let mut fields = text
        .split_whitespace()
        .map(|f| f.parse::<i64>().unwrap_or(0));
    let (count, highest) = (
        fields.next().unwrap_or(0),
        fields.next().unwrap_or(i64::MIN),
    );
    if token <= highest {
        return "rejected";
    }
    let record = format!("{} {token}\n", count + 1);
    std::io::Seek::rewind(&mut *file).unwrap_or_else(|e| fail("seek store", e));
    file.set_len(0)
        .unwrap_or_else(|e| fail("truncate store", e));
    file.write_all(record.as_bytes())
        .unwrap_or_else(|e| fail("write store", e));
    "accepted"
}

fn append(log: &str, line: &str) {
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| fail("open log", e));
    writeln!(log, "{line}").unwrap_or_else(|e| fail("write log", e));
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        [backend, place, name, "rounds", n, counter, log] => {
            let n: u32 = n.parse().unwrap_or_else(|_| usage());
            let locker = locker(backend, place).await;
            for _ in 0..n {
                let mut held = locker
                    .acquire(name, Some(Duration::from_secs(120)))
                    .await
                    .unwrap_or_else(|e| fail("acquire", e));
                let text = std::fs::read_to_string(counter).unwrap_or_default();
                let value: u64 = text.trim().parse().unwrap_or(0);
                // Widen the window a missing exclusion would show in.
                tokio::time::sleep(Duration::from_millis(1)).await;
                std::fs::write(counter, format!("{}\n", value + 1))
                    .unwrap_or_else(|e| fail("write counter", e));
                append(log, &held.token().0.to_string());
                held.release().await.unwrap_or_else(|e| fail("release", e));
            }
        }
        [backend, place, name, "fenced", n, store, log] => {
            let n: u32 = n.parse().unwrap_or_else(|_| usage());
            let locker = locker(backend, place).await;
            for _ in 0..n {
                let mut held = acquire_through_outages(&locker, name).await;
                let verdict = fenced_write(store, held.token().0);
                append(log, &format!("{verdict} {}", held.token().0));
                let _ = held.release().await;
            }
        }
        [backend, place, name, "try"] => {
            let locker = locker(backend, place).await;
            match locker.try_acquire(name).await {
                Ok(mut held) => {
                    println!("acquired {}", held.token().0);
                    held.release().await.unwrap_or_else(|e| fail("release", e));
                }
                Err(coord::lock::LockError::Locked) => {
                    println!("locked");
                    std::process::exit(3);
                }
                Err(e) => fail("try", e),
            }
        }
        [backend, place, name, "hold"] => {
            let locker = locker(backend, place).await;
            let held = locker
                .acquire(name, None)
                .await
                .unwrap_or_else(|e| fail("acquire", e));
            println!("held {}", held.token().0);
            let _ = std::io::stdout().flush();
            std::future::pending::<()>().await;
        }
        _ => usage(),
    }
}
