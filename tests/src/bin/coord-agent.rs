//! A minimal agent for tests, run as a separate process so tests can kill
//! it with -9:
//! - `coord-agent ENDPOINT HOST_ID TTL_SECS`: registers a host and keeps it
//!   alive; prints `registered <lease hex>`.
//! - `coord-agent elect ENDPOINT NAME VALUE TTL_SECS`: campaigns; prints
//!   `elected <key> <fence>` once leading.
//! - `coord-agent lock ENDPOINT NAME TTL_SECS`: locks; prints
//!   `locked <key> <fence>` once held.
//!
//! Each then stays until killed; an elected or locking agent resigns or
//! unlocks on SIGINT and exits, as `etcdctl elect` and `etcdctl lock` do.

#![forbid(unsafe_code)]

use std::time::Duration;

fn usage() -> ! {
    eprintln!(
        "usage: coord-agent ENDPOINT HOST_ID TTL_SECS\n       coord-agent elect ENDPOINT NAME VALUE TTL_SECS\n       coord-agent lock ENDPOINT NAME TTL_SECS"
    );
    std::process::exit(2);
}

fn ttl(arg: &str) -> Duration {
    match arg.parse::<u64>() {
        Ok(s) => Duration::from_secs(s),
        Err(_) => usage(),
    }
}

async fn client(endpoint: &str) -> coord::Client {
    match coord::connect(&[endpoint], coord::ConnectOptions::default()).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}

fn fail(e: coord::Error) -> ! {
    eprintln!("{e}");
    std::process::exit(1);
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let session = |t: &str| coord::SessionOptions::default().with_ttl(ttl(t));
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["elect", endpoint, name, value, t] => {
            let election = coord::Election::new(client(endpoint).await, name, session(t))
                .await
                .unwrap_or_else(|e| fail(e));
            let leader = election.campaign(value).await.unwrap_or_else(|e| fail(e));
            println!("elected {} {}", leader.key(), leader.token().0);
            // On SIGINT, resign (as etcdctl elect does) and exit.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
            leader.resign().await.unwrap_or_else(|e| fail(e));
            println!("resigned");
        }
        ["lock", endpoint, name, t] => {
            let mutex = coord::Mutex::new(client(endpoint).await, name, session(t))
                .await
                .unwrap_or_else(|e| fail(e));
            let guard = mutex.lock().await.unwrap_or_else(|e| fail(e));
            println!("locked {} {}", guard.key(), guard.token().0);
            // On SIGINT, unlock (as etcdctl lock does) and exit.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
            guard.unlock().await.unwrap_or_else(|e| fail(e));
            println!("unlocked");
        }
        [endpoint, host, t] => {
            let opts = coord::LivenessOptions::default().with_ttl(ttl(t));
            let meta = coord::HostMetadata::new(host, "agent");
            let host = coord::HostLiveness::register(client(endpoint).await, meta, opts)
                .await
                .unwrap_or_else(|e| fail(e));
            if let Some(lease) = host.lease_id() {
                println!("registered {lease}");
            }
            std::future::pending::<()>().await;
        }
        _ => usage(),
    }
}
