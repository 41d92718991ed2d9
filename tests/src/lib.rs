//! Test support for coord: real etcd servers on free loopback ports, a
//! fault-injecting TCP proxy, and polling helpers with deadlines.
//!
//! Every process the harness starts it stops by its own pid when the owning
//! value is dropped, also when a test panics.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

pub mod certs;
pub mod etcd;
pub mod etcdctl;
pub mod grpc_proxy;
pub mod options;
pub mod postgres;
pub mod proxy;
pub mod queue;
pub mod redis;

use std::future::Future;
use std::time::Duration;

/// Polls `check` every 50 ms until it yields `Some`, or panics with `what`
/// after `deadline`.
pub async fn eventually<T, F, Fut>(deadline: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = tokio::time::Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Installs a tracing subscriber honouring `RUST_LOG` (once per process).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
}
