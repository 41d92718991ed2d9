//! What the election and lock scenarios share: session options for tests,
//! and reading a queue straight from etcd.

use std::time::Duration;

use coord::{BackoffConfig, SessionOptions};
use etcd_client::{Client, GetOptions, SortOrder, SortTarget};

/// Generous bound for anything that should take a round trip or two, on a
/// loaded 2-core machine.
pub const SOON: Duration = Duration::from_secs(10);

/// Session options for tests: the TTL given, 1 s request deadline, backoff
/// capped at 2 s, fixed seed.
pub fn session_opts(ttl_secs: u64) -> SessionOptions {
    SessionOptions::default()
        .with_ttl(Duration::from_secs(ttl_secs))
        .with_request_timeout(Duration::from_secs(1))
        .with_backoff(BackoffConfig::default().with_cap(Duration::from_secs(2)))
        .with_seed(11)
}

/// One key of a queue as etcd has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    /// The key.
    pub key: String,
    /// Its create revision (the fencing token if it leads).
    pub create_revision: i64,
    /// Its lease.
    pub lease: i64,
}

/// The keys under `prefix`, oldest create revision first.
pub async fn queue(client: &Client, prefix: &str) -> Vec<Queued> {
    let opts = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let resp = client.clone().get(prefix, Some(opts)).await.expect("get");
    resp.kvs()
        .iter()
        .map(|kv| Queued {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            create_revision: kv.create_revision(),
            lease: kv.lease(),
        })
        .collect()
}

/// Waits until `prefix` holds `n` keys; returns them.
pub async fn queued(client: &Client, prefix: &str, n: usize) -> Vec<Queued> {
    crate::eventually(SOON, "the queue to fill", || async {
        let q = queue(client, prefix).await;
        (q.len() == n).then_some(q)
    })
    .await
}
