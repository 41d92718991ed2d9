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
