//! What the outside observer records: faults, every event each host's
//! handle emitted, stop results, and a sample of every host's reported
//! state against etcd's truth every [`SAMPLE_EVERY`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use coord::{Error, LivenessEvent, LivenessStatus};

use crate::schedule::Fault;

/// Sampling period of the observer.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// What a host's process is doing, as the fault injector set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// Running.
    Alive,
    /// Frozen (GC pause).
    Paused,
    /// Crashed, not restarted yet.
    Crashed,
}

/// One host in a sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSample {
    /// Its process.
    pub condition: Condition,
    /// What its handle reports (`None` before it registered a handle or
    /// while crashed).
    pub status: Option<LivenessStatus>,
    /// The lease its key is attached to in etcd, if the key exists.
    pub key_lease: Option<i64>,
    /// The key's mod revision in etcd, if it exists.
    pub key_mod_revision: Option<i64>,
}

/// Something that happened.
#[derive(Debug, Clone)]
pub enum What {
    /// A fault began.
    Fault(Fault),
    /// A partition of `host` ended (no partition of it remains).
    PartitionEnded {
        /// Host index.
        host: usize,
    },
    /// A pause of `host` ended.
    Resumed {
        /// Host index.
        host: usize,
    },
    /// A crashed host was restarted.
    Restarted {
        /// Host index.
        host: usize,
    },
    /// Phase 2: everything healed.
    HealAll,
    /// A host's handle emitted an event.
    Event {
        /// Host index.
        host: usize,
        /// Process incarnation (restarts count up).
        incarnation: u64,
        /// The event.
        event: LivenessEvent,
    },
    /// The harness asked every host to stop.
    StopAll,
    /// `stop()` returned.
    Stopped {
        /// Host index.
        host: usize,
        /// Its result.
        result: Result<(), Error>,
    },
    /// Whether the handle's background task ended after stop.
    TaskEnded {
        /// Host index.
        host: usize,
        /// True if it ended within the bound.
        ended: bool,
    },
    /// A sample of every host.
    Sample(Vec<HostSample>),
    /// Messages the simulated clients received with the wrong type (the
    /// simulator's own plumbing mixed them up); recorded at the end.
    SimulatorAnomalies(u64),
    /// A partition of a watcher ended.
    WatcherPartitionEnded {
        /// Watcher index.
        watcher: usize,
    },
    /// A pause of a watcher ended.
    WatcherResumed {
        /// Watcher index.
        watcher: usize,
    },
    /// A watcher's handle delivered an event to its consumer.
    WatcherEvent {
        /// Watcher index.
        watcher: usize,
        /// The event.
        event: WatcherEventRecord,
    },
    /// Every watcher's condition and `view()`, taken with each `Sample`.
    WatcherSample(Vec<WatcherSample>),
    /// When each etcd revision was made (virtual ms); recorded at the end.
    RevisionTimes(Vec<(i64, u64)>),
    /// When each lease grant was served (virtual ms); recorded at the end.
    GrantTimes(Vec<u64>),
    /// Every change of a host key: (virtual ms, host index, revision,
    /// present after it); recorded at the end.
    KeyChanges(Vec<(u64, usize, i64, bool)>),
}

/// The kind of a watcher event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatcherEventKind {
    /// A host came up.
    Up,
    /// A host changed.
    Updated,
    /// A host went down.
    Down,
    /// The first snapshot is complete.
    Synced,
    /// The view was rebuilt.
    Resynced,
}

/// Host index to mod revision.
pub type HostView = std::collections::BTreeMap<usize, i64>;

/// The index of a simulated host id (`host-N`), if it is one.
pub fn host_index(host: &str) -> Option<usize> {
    host.strip_prefix("host-")?.parse().ok()
}

/// A watcher event, reduced to what the checker needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatcherEventRecord {
    /// Which kind.
    pub kind: WatcherEventKind,
    /// The host, for Up/Updated/Down.
    pub host: Option<String>,
    /// The host's key's mod revision, for Up/Updated.
    pub mod_revision: Option<i64>,
    /// The revision the event reflects.
    pub revision: i64,
}

/// One watcher in a sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatcherSample {
    /// Its process.
    pub condition: Condition,
    /// Its `view()`: host index to the key's mod revision (`None` until
    /// the watcher exists).
    pub view: Option<std::sync::Arc<HostView>>,
}

/// A record with its virtual time.
#[derive(Debug, Clone)]
pub struct Record {
    /// Virtual ms since the start.
    pub at_ms: u64,
    /// What.
    pub what: What,
}

/// The recorded history of one run.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// In order of time.
    pub records: Vec<Record>,
}

/// A shared recorder that tasks on every node append to.
#[derive(Debug, Clone, Default)]
pub struct Recorder(Arc<Mutex<History>>);

impl Recorder {
    /// Appends a record.
    pub fn record(&self, at_ms: u64, what: What) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .records
            .push(Record { at_ms, what });
    }

    /// A copy of the history so far.
    pub fn snapshot(&self) -> History {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}
