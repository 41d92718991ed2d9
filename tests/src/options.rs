//! Options the real-server tests share: short TTLs and timeouts, and
//! retries capped at 2 s, so that faults heal within a test's deadlines.

use std::time::Duration;

use coord::{BackoffConfig, LivenessOptions, WatcherOptions};

/// A host with a 5 s TTL, `request_timeout` per request.
pub fn liveness(request_timeout: Duration) -> LivenessOptions {
    LivenessOptions::default()
        .with_ttl(Duration::from_secs(5))
        .with_request_timeout(request_timeout)
        .with_backoff(BackoffConfig::default().with_cap(Duration::from_secs(2)))
        .with_seed(5)
}

/// A watcher probing a quiet stream every second, with room for 1,024
/// events.
pub fn watcher() -> WatcherOptions {
    WatcherOptions::default()
        .with_request_timeout(Duration::from_secs(2))
        .with_probe_interval(Duration::from_secs(1))
        .with_backoff(BackoffConfig::default().with_cap(Duration::from_secs(2)))
        .with_seed(11)
        .with_buffer(1024)
}
