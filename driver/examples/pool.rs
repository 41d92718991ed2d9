//! Many elections on one lease: a pool leads a shard per name, and its
//! keep-alive load is one lease whatever the number of names (go-coord's
//! pool holds a session per name).
//!
//! ```sh
//! cargo run --example pool
//! ```

use coord::{ConnectOptions, ElectionPool};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = coord::connect(&endpoints(), ConnectOptions::default()).await?;
    let pool = ElectionPool::new(client, Default::default()).await?;
    let mut leading = Vec::new();
    for shard in 0..8 {
        let election = pool.election(&format!("shards/{shard}"))?;
        leading.push(election.campaign("node-7").await?);
    }
    let stats = pool.stats();
    println!(
        "{} names led on {} lease(s)",
        stats.names, stats.leases_held
    );
    for leader in leading {
        leader.resign().await?;
    }
    pool.close().await?; // revokes the lease: every leadership left ends at once
    Ok(())
}

fn endpoints() -> Vec<String> {
    std::env::var("ETCD_ENDPOINTS")
        .unwrap_or_else(|_| "http://127.0.0.1:2379".into())
        .split(',')
        .map(str::to_owned)
        .collect()
}
