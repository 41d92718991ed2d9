//! Connecting to an etcd with TLS and authentication, and checking it once
//! (so a wrong CA, certificate or password fails at start, never as a hang).
//!
//! ```sh
//! ETCD_ENDPOINTS=https://10.0.0.1:2379 ETCD_CACERT=ca.pem ETCD_CERT=client.pem \
//!   ETCD_KEY=client-key.pem ETCD_USER=ops ETCD_PASSWORD=secret cargo run --example tls
//! ```

use std::path::PathBuf;
use std::time::Duration;

use coord::{ConnectOptions, TlsOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = |var: &str| std::env::var_os(var).map(PathBuf::from);
    let (ca, cert, key) = (path("ETCD_CACERT"), path("ETCD_CERT"), path("ETCD_KEY"));
    // Error::Tls names the file that does not load.
    let tls = TlsOptions::from_files(ca.as_deref(), cert.as_deref(), key.as_deref())?;
    let mut options = ConnectOptions::default().with_tls(tls);
    if let Ok(user) = std::env::var("ETCD_USER") {
        options = options.with_user(user, std::env::var("ETCD_PASSWORD").unwrap_or_default());
    }
    let endpoints: Vec<String> = std::env::var("ETCD_ENDPOINTS")
        .unwrap_or_else(|_| "https://127.0.0.1:2379".into())
        .split(',')
        .map(str::to_owned)
        .collect();
    let client = coord::connect(&endpoints, options).await?;
    // connect does not dial (a service may start while etcd is down); check
    // asks once: Error::Tls, Error::Auth or Error::Unreachable.
    client.check(Duration::from_secs(2)).await?;
    println!("connected to {} with TLS", endpoints.join(","));
    Ok(())
}
