//! A watcher's options, and where its loop runs.

use std::time::Duration;

use coord_core::BackoffConfig;

use crate::liveness::DEFAULT_PREFIX;

/// Options of [`HostWatcher::new`](crate::HostWatcher::new).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatcherOptions {
    /// The prefix watched. Default `/coord/hosts/`.
    pub prefix: String,
    /// A host id never reported (typically this host's own). go-coord's
    /// `IncludeSelf = false`.
    pub exclude_host: Option<String>,
    /// Read the snapshot serializably (from any member, maybe stale; the
    /// watch catches up). Default false: linearizable.
    pub serializable: bool,
    /// Deadline of each request. Default 5 s.
    pub request_timeout: Duration,
    /// A stream quiet this long is probed with a progress request; no
    /// answer within the request timeout means it is broken. Default 10 s.
    pub probe_interval: Duration,
    /// Pacing of retries.
    pub backoff: BackoffConfig,
    /// Seed of the retry jitter. Default: from the prefix and the time.
    pub seed: Option<u64>,
    /// Events buffered for the consumer. Default 32.
    pub buffer: usize,
    /// Keep retrying a failing first snapshot in the background instead of
    /// failing `new`. Default false.
    pub retry_first_snapshot: bool,
    /// Keys per page of a listing: every listing is read in pages at one
    /// revision, so no prefix is too large for one response. Default 1,000
    /// (halved for a page too large to receive).
    pub page_size: u32,
    /// Where the watcher's loop runs. Default [`Driving::Adaptive`].
    pub driving: Driving,
}

/// Builder-style setters: the struct is `#[non_exhaustive]`, so that a
/// new option is not a breaking change; start from `WatcherOptions::default()`
/// (or its constructor) and set what differs.
impl WatcherOptions {
    /// These options with [`prefix`](Self::prefix) set.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
    /// These options with [`exclude_host`](Self::exclude_host) set.
    pub fn with_exclude_host(mut self, exclude_host: impl Into<String>) -> Self {
        self.exclude_host = Some(exclude_host.into());
        self
    }
    /// These options with [`serializable`](Self::serializable) set.
    pub fn with_serializable(mut self, serializable: bool) -> Self {
        self.serializable = serializable;
        self
    }
    /// These options with [`request_timeout`](Self::request_timeout) set.
    pub fn with_request_timeout(mut self, request_timeout: Duration) -> Self {
        self.request_timeout = request_timeout;
        self
    }
    /// These options with [`probe_interval`](Self::probe_interval) set.
    pub fn with_probe_interval(mut self, probe_interval: Duration) -> Self {
        self.probe_interval = probe_interval;
        self
    }
    /// These options with [`backoff`](Self::backoff) set.
    pub fn with_backoff(mut self, backoff: BackoffConfig) -> Self {
        self.backoff = backoff;
        self
    }
    /// These options with [`seed`](Self::seed) set.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }
    /// These options with [`buffer`](Self::buffer) set.
    pub fn with_buffer(mut self, buffer: usize) -> Self {
        self.buffer = buffer;
        self
    }
    /// These options with [`retry_first_snapshot`](Self::retry_first_snapshot) set.
    pub fn with_retry_first_snapshot(mut self, retry_first_snapshot: bool) -> Self {
        self.retry_first_snapshot = retry_first_snapshot;
        self
    }
    /// These options with [`page_size`](Self::page_size) set.
    pub fn with_page_size(mut self, page_size: u32) -> Self {
        self.page_size = page_size;
        self
    }
    /// These options with [`driving`](Self::driving) set.
    pub fn with_driving(mut self, driving: Driving) -> Self {
        self.driving = driving;
        self
    }
}

/// Where a [`HostWatcher`](crate::HostWatcher)'s loop (reading etcd, retrying, keeping the
/// view) runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Driving {
    /// Always, wherever is cheaper: whatever the consumer does, the view,
    /// `status()` and retries go on (until `buffer` events wait untaken,
    /// when etcd's stream is no longer read). While the consumer waits in
    /// `next()` (on a Tokio runtime), the loop runs in that call, so an
    /// event need not cross from another task; at any other time it runs
    /// on a task of its own (and so does it when a wake finds the last one
    /// not yet acted on: a `next()` kept but not polled, held across other
    /// awaits).
    #[default]
    Adaptive,
    /// On a task of its own, always: `next()` only takes what that task
    /// handed over, so it may be awaited anywhere (another runtime, another
    /// executor). Each event crosses from that task to the consumer's,
    /// which costs a wake per event that [`Driving::Adaptive`] mostly
    /// saves.
    OwnTask,
    /// Inside the consumer's own calls: `next()` (and `close()`, `wait()`)
    /// run the loop until an event is ready, so nothing moves between
    /// tasks and an event costs less CPU. Between calls nothing happens:
    /// etcd's stream is not read, retries and stream probes wait, and
    /// `view()` and `status()` stay as of the last call. For a consumer
    /// that awaits `next()` in a loop of its own.
    InNext,
}

impl Default for WatcherOptions {
    fn default() -> Self {
        WatcherOptions {
            prefix: DEFAULT_PREFIX.to_string(),
            exclude_host: None,
            serializable: false,
            request_timeout: Duration::from_secs(5),
            probe_interval: Duration::from_secs(10),
            backoff: BackoffConfig::default(),
            seed: None,
            buffer: 32,
            retry_first_snapshot: false,
            page_size: coord_core::mirror::DEFAULT_PAGE_SIZE,
            driving: Driving::Adaptive,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_setter_sets_its_own_option() {
        let backoff = BackoffConfig::default().with_cap(Duration::from_secs(3));
        let set = WatcherOptions::default()
            .with_prefix("/fleet/")
            .with_exclude_host("h1")
            .with_serializable(true)
            .with_request_timeout(Duration::from_secs(2))
            .with_probe_interval(Duration::from_secs(4))
            .with_backoff(backoff.clone())
            .with_seed(9)
            .with_buffer(7)
            .with_retry_first_snapshot(true)
            .with_page_size(11)
            .with_driving(Driving::InNext);
        assert_eq!(
            set,
            WatcherOptions {
                prefix: "/fleet/".to_string(),
                exclude_host: Some("h1".to_string()),
                serializable: true,
                request_timeout: Duration::from_secs(2),
                probe_interval: Duration::from_secs(4),
                backoff,
                seed: Some(9),
                buffer: 7,
                retry_first_snapshot: true,
                page_size: 11,
                driving: Driving::InNext,
            }
        );
    }
}
