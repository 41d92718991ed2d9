//! An agent: registers this host, follows the fleet, and leads `scheduler`
//! when its turn comes, until ctrl-c or SIGTERM. Then it steps down, stops
//! watching and revokes its lease, so nothing it wrote stays behind.
//!
//! ```sh
//! cargo run --example agent                        # etcd at http://127.0.0.1:2379
//! ETCD_ENDPOINTS=http://10.0.0.1:2379 AGENT_ID=node-7 cargo run --example agent
//! ```

use coord::{ConnectOptions, Election, HostEvent, HostLiveness, HostMetadata, HostWatcher};
use tokio::signal::unix::{signal, SignalKind};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoints = endpoints();
    let id = std::env::var("AGENT_ID").unwrap_or_else(|_| format!("agent-{}", std::process::id()));
    // ctrl-c and SIGTERM end the agent gracefully, even while it waits for
    // its turn to lead.
    let mut sigterm = signal(SignalKind::terminate())?;

    let client = coord::connect(&endpoints, ConnectOptions::default()).await?;
    let host = HostLiveness::register(
        client.clone(),
        HostMetadata::new(&id, &id),
        Default::default(),
    )
    .await?;
    let lease = host
        .lease_id()
        .map_or_else(|| "none".into(), |l| l.to_string());
    println!("registered {} under lease {lease}", host.key());

    let mut fleet: HostWatcher = HostWatcher::new(client.clone(), Default::default()).await?;
    let election = Election::new(client, "scheduler", Default::default()).await?;
    let leader = tokio::select! {
        biased;
        _ = tokio::signal::ctrl_c() => None,
        _ = sigterm.recv() => None,
        leader = election.campaign(id.clone()) => Some(leader?),
    };
    if let Some(leader) = &leader {
        println!("leading scheduler with fencing token {}", leader.token().0);
    }

    loop {
        tokio::select! {
            biased;
            _ = tokio::signal::ctrl_c() => break,
            _ = sigterm.recv() => break,
            loss = async { leader.as_ref()?.lost().await }, if leader.is_some() => {
                eprintln!("lost the lead: {loss:?}");
                break;
            }
            Some(event) = fleet.next() => match event {
                HostEvent::Up { host, .. } => println!("{host} is up"),
                HostEvent::Down { host, .. } => println!("{host} is down"),
                _ => {} // Updated, Synced, Resynced, Retrying, and kinds to come
            },
        }
    }

    if let Some(leader) = leader {
        leader.resign().await?; // the next candidate leads at once
    }
    election.close().await?;
    fleet.close().await;
    host.stop().await?; // revokes the lease: this host's key is gone
    println!("stopped");
    Ok(())
}

/// `ETCD_ENDPOINTS` (comma-separated), or a local etcd.
fn endpoints() -> Vec<String> {
    std::env::var("ETCD_ENDPOINTS")
        .unwrap_or_else(|_| "http://127.0.0.1:2379".into())
        .split(',')
        .map(str::to_owned)
        .collect()
}
