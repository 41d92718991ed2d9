//! A lock shared with `etcdctl lock migrations`: hold it, write under its
//! fencing token, release it; then a `try_lock` that does not wait.
//!
//! ```sh
//! cargo run --example mutex
//! # meanwhile, in another shell: etcdctl lock migrations   (queues behind it)
//! ```

use std::time::Duration;

use coord::{ConnectOptions, Mutex, TxnOp};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = coord::connect(&endpoints(), ConnectOptions::default()).await?;
    let lock = Mutex::new(client, "migrations", Default::default()).await?;

    // Waits in the queue for at most 30 s (`Error::Timeout` withdraws).
    let guard = lock.lock_timeout(Duration::from_secs(30)).await?;
    println!(
        "holding {} with fencing token {}",
        guard.key(),
        guard.token().0
    );
    // Applied by etcd only while this guard still holds the lock.
    let put =
        coord::Txn::new().and_then([TxnOp::put("/migrations/last", guard.token().0.to_string())]);
    guard.txn(put).await?;
    guard.unlock().await?;

    match lock.try_lock().await {
        Ok(guard) => {
            println!("free again: taken with token {}", guard.token().0);
            guard.unlock().await?;
        }
        Err(coord::Error::Locked) => println!("held by someone else; nothing was left behind"),
        Err(e) => return Err(e.into()),
    }
    lock.close().await?;
    Ok(())
}

fn endpoints() -> Vec<String> {
    std::env::var("ETCD_ENDPOINTS")
        .unwrap_or_else(|_| "http://127.0.0.1:2379".into())
        .split(',')
        .map(str::to_owned)
        .collect()
}
