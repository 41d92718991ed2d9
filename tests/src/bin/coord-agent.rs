//! A minimal agent for tests: registers a host and keeps it alive until
//! killed. Usage: `coord-agent ENDPOINT HOST_ID TTL_SECS`. Prints
//! `registered <lease hex>` once registered.

#![forbid(unsafe_code)]

use std::time::Duration;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: coord-agent ENDPOINT HOST_ID TTL_SECS");
        std::process::exit(2);
    }
    let Ok(ttl) = args[3].parse::<u64>() else {
        eprintln!("TTL_SECS must be a number");
        std::process::exit(2);
    };
    let client = match coord::connect(&[args[1].as_str()], coord::ConnectOptions::default()).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let opts = coord::LivenessOptions {
        ttl: Duration::from_secs(ttl),
        ..Default::default()
    };
    let meta = coord::HostMetadata::new(args[2].as_str(), "agent");
    match coord::HostLiveness::register(client, meta, opts).await {
        Ok(host) => {
            if let Some(lease) = host.lease_id() {
                println!("registered {lease}");
            }
            std::future::pending::<()>().await;
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
