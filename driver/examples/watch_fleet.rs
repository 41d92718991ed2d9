//! Follows the fleet: every host registered under `/coord/hosts/` (go-coord's
//! prefix), then every change, until ctrl-c. The watcher is a
//! `futures::Stream`, so stream combinators work on it.
//!
//! ```sh
//! cargo run --example watch_fleet
//! # in another shell: cargo run --example agent
//! ```

use coord::{ConnectOptions, HostEvent, HostWatcher, ViewStatus};
use futures::StreamExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = coord::connect(&endpoints(), ConnectOptions::default()).await?;
    let watcher: HostWatcher = HostWatcher::new(client, Default::default()).await?;
    let status = watcher.status();
    // Only what a dashboard shows: hosts coming and going, and re-lists.
    let mut changes =
        watcher.filter(|e| std::future::ready(!matches!(e, HostEvent::Retrying { .. })));
    loop {
        tokio::select! {
            biased;
            _ = tokio::signal::ctrl_c() => break,
            event = changes.next() => match event {
                Some(HostEvent::Up { host, record, revision }) => match record.meta {
                    Ok(meta) => println!("@{} {host} up: {} {}", revision.0, meta.hostname, meta.version),
                    Err(e) => println!("@{} {host} up, metadata unreadable: {e}", revision.0),
                },
                Some(HostEvent::Updated { host, revision, .. }) => println!("@{} {host} updated", revision.0),
                Some(HostEvent::Down { host, revision, .. }) => println!("@{} {host} down", revision.0),
                Some(HostEvent::Synced { revision }) => println!("@{} snapshot complete", revision.0),
                Some(HostEvent::Resynced { reason, .. }) => println!("re-listed: {reason:?}"),
                Some(_) => {}
                None => break, // closed
            },
        }
        // A view that may be stale says so (the watcher retries by itself).
        if let ViewStatus::Failing { attempt, .. } = &*status.borrow() {
            eprintln!("etcd not answering (attempt {attempt}); the view may be stale");
        }
    }
    Ok(())
}

fn endpoints() -> Vec<String> {
    std::env::var("ETCD_ENDPOINTS")
        .unwrap_or_else(|_| "http://127.0.0.1:2379".into())
        .split(',')
        .map(str::to_owned)
        .collect()
}
