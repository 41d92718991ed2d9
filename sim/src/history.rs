//! What the outside observer records: faults, every event each host's
//! handle emitted, stop results, and a sample of every host's reported
//! state against etcd's truth every [`SAMPLE_EVERY`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use coord::{Error, LivenessEvent, LivenessStatus};

pub use crate::etcd::model::DeleteCause;
use crate::faults::schedule::{Fault, Target};

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

/// What a [`Record`] holds: something that happened (an event a process
/// reported, a fault), a sample of what each process says beside what etcd
/// holds, or etcd's own log, recorded at the end.
#[derive(Debug, Clone)]
pub enum Entry {
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
    /// What a host's handle said of its lease when it took an event:
    /// `lease_id()`, and the lease of `state()` read at the same instant.
    LeaseIdRead {
        /// Host index.
        host: usize,
        /// `lease_id()`.
        lease_id: Option<i64>,
        /// The lease of `state()` if it is `Registered`.
        state_lease: Option<i64>,
    },
    /// A host's event subscription lagged: some of its events were lost to
    /// the recorder.
    EventsLagged {
        /// Host index.
        host: usize,
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
    /// A watcher's consumer takes events again after a stall.
    ConsumerStallEnded {
        /// Watcher index.
        watcher: usize,
    },
    /// A crashed watcher process started again (a new watcher: its
    /// events start over with a snapshot).
    WatcherRestarted {
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
    /// When each lease grant or keep-alive open was sent by a client
    /// (virtual ms); recorded at the end.
    HealRequests(Vec<u64>),
    /// Every change of a host key, in order; recorded at the end.
    KeyChanges(Vec<KeyChange>),
    /// Every put of a host key: (virtual ms, host index, what it wrote);
    /// recorded at the end.
    HostPuts(Vec<(u64, usize, SeenRecord)>),
    /// An election or lock process did something.
    Contender {
        /// Contender index.
        contender: usize,
        /// Process incarnation.
        incarnation: u64,
        /// The election or lock name.
        name: String,
        /// What.
        event: ContenderEvent,
    },
    /// Every contender's leaderships, judged from outside, with each
    /// `Sample`.
    ContenderSample(Vec<ContenderSample>),
    /// A crashed contender was restarted.
    ContenderRestarted {
        /// Contender index.
        contender: usize,
    },
    /// A partition of a contender ended.
    ContenderPartitionEnded {
        /// Contender index.
        contender: usize,
    },
    /// A pause of a contender ended.
    ContenderResumed {
        /// Contender index.
        contender: usize,
    },
    /// A fault removed a candidate's key from outside (a delete, or its
    /// lease revoked).
    KeyRemovedOutside {
        /// The key.
        key: String,
        /// Its lease.
        lease: i64,
    },
    /// Every change of a key outside the hosts' prefix (election queues,
    /// fenced resources); recorded at the end.
    ElectionLog(Vec<LogEntry>),
    /// Every join etcd applied and left unanswered (an
    /// [`UnansweredJoin`](crate::faults::schedule::Fault::UnansweredJoin)):
    /// (virtual ms, contender); recorded at the end.
    JoinsUnanswered(Vec<(u64, usize)>),
    /// Every lease etcd granted, by id; recorded at the end.
    LeaseLog(std::collections::BTreeMap<i64, LeaseLife>),
    /// A watcher process's observer of an election reported a leader.
    Observed {
        /// Watcher index.
        watcher: usize,
        /// The election name.
        name: String,
        /// The leader's (key, token, value), `None` for nobody.
        leader: Option<(String, i64, Vec<u8>)>,
        /// The revision it reflects.
        revision: i64,
        /// The first observation after etcd's history started over (its
        /// revision may be below the ones before).
        reset: bool,
    },
    /// A compaction was applied, up to this revision.
    Compacted {
        /// The compaction revision.
        revision: i64,
    },
}

impl Entry {
    /// The last partition of `target` ended.
    pub fn partition_ended(target: Target) -> Entry {
        match target {
            Target::Host(host) => Entry::PartitionEnded { host },
            Target::Watcher(watcher) => Entry::WatcherPartitionEnded { watcher },
            Target::Contender(contender) => Entry::ContenderPartitionEnded { contender },
        }
    }

    /// The last pause of `target` ended.
    pub fn resumed(target: Target) -> Entry {
        match target {
            Target::Host(host) => Entry::Resumed { host },
            Target::Watcher(watcher) => Entry::WatcherResumed { watcher },
            Target::Contender(contender) => Entry::ContenderResumed { contender },
        }
    }

    /// The crashed `target` was restarted.
    pub fn restarted(target: Target) -> Entry {
        match target {
            Target::Host(host) => Entry::Restarted { host },
            Target::Watcher(watcher) => Entry::WatcherRestarted { watcher },
            Target::Contender(contender) => Entry::ContenderRestarted { contender },
        }
    }
}

/// How a contender campaigned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CampaignMode {
    /// Until elected.
    Wait,
    /// One round trip.
    Try,
    /// Until elected or this many ms passed (then withdrawn).
    WaitAtMost(u64),
}

/// What a fenced write came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// etcd applied it.
    Applied,
    /// etcd refused the guard.
    NotLeader,
    /// Failed or unknown.
    Failed,
}

/// What the harness records as the loss of a leadership whose `lost()`
/// returned `None` (it resigned).
pub const RESIGNED: &str = "resigned";

/// What an election or lock process did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContenderEvent {
    /// A campaign began.
    Started {
        /// How.
        mode: CampaignMode,
    },
    /// Elected (the lock is held).
    Elected {
        /// The fencing token.
        token: i64,
        /// The session's lease.
        lease: i64,
        /// The key.
        key: String,
        /// The new `Leadership`'s `is_leader()` at once.
        leads: bool,
        /// Its probe's `has_ended()` at once.
        ended: bool,
    },
    /// A try lost.
    TryLost,
    /// A campaign with a time limit was withdrawn.
    Cancelled {
        /// The session's lease then (the withdrawn key's), if known.
        lease: Option<i64>,
    },
    /// A campaign failed.
    Failed {
        /// The error.
        error: String,
        /// It was `Error::Lost` (the key or lease went while waiting).
        lost: bool,
    },
    /// A leadership was lost: `Leadership::lost()` completed.
    Lost {
        /// Why (`lost()`'s loss; "resigned" for `None`).
        reason: String,
        /// What the `Leadership` then says it is.
        after: Aftermath,
    },
    /// It began to resign (or, for a lock, to unlock).
    Resigning,
    /// It resigned (`resign()` or `unlock()` returned).
    Resigned {
        /// It returned `Ok`.
        ok: bool,
        /// What its probe then says.
        after: Aftermath,
    },
    /// It dropped its leadership without resigning (the handle's drop
    /// releases it in the background).
    Dropped {
        /// The fencing token of the leadership dropped.
        token: i64,
        /// Its key.
        key: String,
    },
    /// `Leadership::proclaim` returned.
    Proclaimed {
        /// The token of the leadership that proclaimed.
        token: i64,
        /// Its key.
        key: String,
        /// The value proclaimed.
        value: Vec<u8>,
        /// It returned `Ok`.
        ok: bool,
    },
    /// `Election::leader` returned `Ok`.
    LeaderRead {
        /// When the call began, virtual ms (it returned at the record's
        /// time).
        since_ms: u64,
        /// The leader it read: (key, token, value).
        leader: Option<(String, i64, Vec<u8>)>,
    },
    /// The process closed the handle that owns its session
    /// (`Election::close`, `Mutex::close` or `ElectionPool::close`).
    Closed {
        /// It returned `Ok`.
        ok: bool,
        /// The session's lease just before.
        lease: Option<i64>,
    },
    /// A fenced write.
    Write {
        /// When it was sent, virtual ms (it returned at the record's time).
        since_ms: u64,
        /// The token written.
        token: i64,
        /// Its fate.
        outcome: WriteOutcome,
        /// The `Leadership`'s `is_leader()` just before it was sent.
        leads: bool,
    },
}

/// What a leadership's handle says once it has ended (asked right after
/// `lost()` completed, or `resign()` returned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aftermath {
    /// `is_leader()`.
    pub leads: bool,
    /// `has_ended()` of its probe.
    pub ended: bool,
    /// `lost()` if it has ended ("resigned" for `None`).
    pub loss: Option<String>,
}

/// One contender in a sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContenderSample {
    /// Its process.
    pub condition: Condition,
    /// The leaderships whose `is_leader()` is true now: (name, key, token,
    /// whether the key exists in etcd now).
    pub believes: Vec<(String, String, i64, bool)>,
    /// Live leases granted to its current incarnation.
    pub leases: Vec<i64>,
    /// The lease its session reports registered, and whether etcd has it.
    pub session_lease: Option<(i64, bool)>,
    /// Every leadership its loops hold: (name, lease, ended as the
    /// library says).
    pub leaderships: Vec<(String, i64, bool)>,
}

/// One change of a key outside the hosts' prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Virtual ms.
    pub at_ms: u64,
    /// The revision.
    pub revision: i64,
    /// The key.
    pub key: String,
    /// Present after the change.
    pub present: bool,
    /// The key's create revision (of the incarnation changed).
    pub create_revision: i64,
    /// The value after a put.
    pub value: Vec<u8>,
    /// The lease.
    pub lease: i64,
    /// Why a delete happened.
    pub cause: Option<DeleteCause>,
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
    /// The view was rebuilt (after a compaction).
    Resynced,
    /// etcd's history started over (a wipe: its revision went back, its
    /// cluster changed, or its history diverged), announced before the
    /// difference: revisions start over here.
    Reset,
    /// The view was rebuilt after a `Reset` (its difference came between).
    Restored,
    /// The watcher failed to list or watch and waits to retry (its view
    /// may be stale until the retry succeeds).
    Retrying,
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
    /// What the event says the host holds: for Up and Updated its record,
    /// for Down its last-seen record.
    pub record: Option<SeenRecord>,
    /// For Updated, what it says the host held before.
    pub previous: Option<SeenRecord>,
}

/// A host's record as an event reports it (or as etcd wrote it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenRecord {
    /// The key's mod revision.
    pub mod_revision: i64,
    /// The lease it is attached to.
    pub lease: i64,
    /// The raw value.
    pub raw: Vec<u8>,
}

/// One put of a host key, as etcd applied it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPut {
    /// When, virtual ms.
    pub at_ms: u64,
    /// The key.
    pub key: Vec<u8>,
    /// What it wrote.
    pub record: SeenRecord,
}

/// One watcher in a sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatcherSample {
    /// Its process.
    pub condition: Condition,
    /// Its `view()`: host index to the key's mod revision (`None` until
    /// the watcher exists).
    pub view: Option<std::sync::Arc<HostView>>,
    /// Whether its `status()` says `Watching` (the view current), `None`
    /// until the watcher exists.
    pub says_current: Option<bool>,
}

/// A record with its virtual time.
#[derive(Debug, Clone)]
pub struct Record {
    /// Virtual ms since the start.
    pub at_ms: u64,
    /// What happened, was sampled or was logged.
    pub what: Entry,
}

/// The recorded history of one run.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// In order of time.
    pub records: Vec<Record>,
}

/// One event of an election or lock process, as recorded.
#[derive(Debug, Clone, Copy)]
pub struct ContenderRecord<'a> {
    /// Virtual ms.
    pub at_ms: u64,
    /// The process.
    pub contender: usize,
    /// Its incarnation (bumped by every restart).
    pub incarnation: u64,
    /// The election or lock's name.
    pub name: &'a str,
    /// What it did.
    pub event: &'a ContenderEvent,
}

impl History {
    /// Every event of the election and lock processes, in order.
    pub fn contender_events(&self) -> impl Iterator<Item = ContenderRecord<'_>> {
        self.records.iter().filter_map(|r| match &r.what {
            Entry::Contender {
                contender,
                incarnation,
                name,
                event,
            } => Some(ContenderRecord {
                at_ms: r.at_ms,
                contender: *contender,
                incarnation: *incarnation,
                name,
                event,
            }),
            _ => None,
        })
    }

    /// The key an outside delete or revoke removed at `at_ms` (recorded
    /// with its fault), and its lease.
    pub fn removed_outside_at(&self, at_ms: u64) -> Option<(&str, i64)> {
        self.records.iter().find_map(|r| match &r.what {
            Entry::KeyRemovedOutside { key, lease } if r.at_ms == at_ms => {
                Some((key.as_str(), *lease))
            }
            _ => None,
        })
    }

    /// Spans (begin, end) from a record `begins` selects to the next one
    /// `ends` selects (another begin while one is open does not restart
    /// it); one still open at the end of the history ends at `u64::MAX`.
    pub fn spans(
        &self,
        begins: impl Fn(&Entry) -> bool,
        ends: impl Fn(&Entry) -> bool,
    ) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut open = None;
        for r in &self.records {
            if begins(&r.what) {
                open.get_or_insert(r.at_ms);
            } else if ends(&r.what) {
                if let Some(s) = open.take() {
                    out.push((s, r.at_ms));
                }
            }
        }
        out.extend(open.map(|s| (s, u64::MAX)));
        out
    }
}

/// A shared recorder that tasks on every node append to.
#[derive(Debug, Clone, Default)]
pub struct Recorder(Arc<Mutex<History>>);

impl Recorder {
    /// Appends a record.
    pub fn record(&self, at_ms: u64, what: Entry) {
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

    /// The history recorded, leaving the recorder empty: the end of a run,
    /// without a copy.
    pub fn take(&self) -> History {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// One lease's life in etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseLife {
    /// The client (process incarnation) it was granted to.
    pub client: u64,
    /// The TTL granted, seconds.
    pub ttl_secs: i64,
    /// When it was granted, virtual ms.
    pub granted_at: u64,
    /// When it was revoked, expired or wiped, virtual ms.
    pub ended_at: Option<u64>,
}

/// A change etcd made to a host's key: the exact truth the watchers owe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyChange {
    /// When etcd made it (virtual ms).
    pub at_ms: u64,
    /// Whose key: the host's index.
    pub host: usize,
    /// The revision of the change.
    pub revision: i64,
    /// Whether the key exists after it (a put) or not (a delete).
    pub present: bool,
    /// Which of etcd's histories it belongs to: 0 until the first wipe,
    /// then one more per wipe (revisions start over at each).
    pub history: u32,
}

/// The fenced resource every leader of `name` writes its token to.
pub fn resource_key(name: &str) -> String {
    format!("/res/{name}")
}

/// The client id of contender `c`'s `incarnation` (the recorder and the
/// server's lease owners use it).
pub fn client_id(c: usize, incarnation: u64) -> u64 {
    (2 << 48) | (u64::try_from(c).unwrap_or(0) << 32) | (incarnation & 0xffff_ffff)
}

/// The contender a client id belongs to, if it is one's.
pub fn contender_of(client: u64) -> Option<usize> {
    (client >> 48 == 2).then(|| usize::try_from((client >> 32) & 0xffff).unwrap_or(usize::MAX))
}
