//! What a fault is: done to etcd, to the keys, or to one process of the
//! world (a [`Target`]).

use std::fmt;

/// Which way a partition cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Direction {
    /// Requests from the process are lost.
    ToEtcd,
    /// Replies to the process are lost (requests are applied, unanswered).
    FromEtcd,
    /// Both.
    Both,
    /// Replies to the process arrive `delay_ms` late (a slow link, an
    /// overloaded member); its requests are applied at once.
    Late {
        /// How late each reply arrives, ms.
        delay_ms: u64,
    },
}

/// The process of the world a partition, pause or crash is done to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    /// A host running liveness, by index (taken modulo the fleet size).
    Host(usize),
    /// A host watcher, by index.
    Watcher(usize),
    /// An election or lock process, by index (taken modulo the case's
    /// contenders).
    Contender(usize),
}

/// One fault.
#[derive(Clone, PartialEq, Eq)]
pub enum Fault {
    /// etcd leader change: streams dropped, `Unavailable` for a window,
    /// lease TTLs restart at its end.
    LeaderChange {
        /// How long etcd has no leader, ms.
        unavailable_ms: u64,
    },
    /// Compaction to the current revision.
    Compact,
    /// A process cut off from etcd.
    Partition {
        /// Which process.
        target: Target,
        /// Which way.
        direction: Direction,
        /// For how long, ms.
        ms: u64,
    },
    /// A GC pause of a process.
    Pause {
        /// Which process.
        target: Target,
        /// For how long, ms.
        ms: u64,
    },
    /// A process crashes and restarts later. A restarted host or
    /// contender starts anew; a restarted watcher is a new watcher, starting
    /// from a fresh listing.
    Crash {
        /// Which process.
        target: Target,
        /// Down for, ms.
        down_ms: u64,
    },
    /// etcd applies requests but sends no reply (timeouts with unknown
    /// outcome).
    DropReplies {
        /// For how long, ms.
        ms: u64,
    },
    /// Someone revokes the lease the host's key is attached to (as
    /// `etcdctl lease revoke` would).
    RevokeLease {
        /// Host index.
        host: usize,
    },
    /// The host's user calls `stop` (in the middle of whatever else is
    /// going on); the host stays stopped.
    Stop {
        /// Host index.
        host: usize,
    },
    /// Someone deletes the current leader's (holder's) key of a name, as
    /// `etcdctl del` would.
    DeleteLeaderKey {
        /// Name index.
        name: usize,
    },
    /// Someone deletes a waiting candidate's key of a name.
    DeleteWaiterKey {
        /// Name index.
        name: usize,
    },
    /// Someone revokes the lease of a name's current leader.
    RevokeLeaderLease {
        /// Name index.
        name: usize,
    },
    /// etcd is wiped (or restored from a snapshot older than anything
    /// written): it restarts empty after `down_ms`, its revision back at 1,
    /// every lease gone, under the same cluster id or (`new_cluster`) a new
    /// one. Only in cases without election or lock processes.
    Wipe {
        /// A new cluster id (a replaced cluster) or the same (a restore).
        new_cluster: bool,
        /// etcd is down for, ms.
        down_ms: u64,
    },
    /// A member behind the others answers serializable reads (the probe,
    /// serializable listings) for `ms`: from etcd's state `lag_ms` ago,
    /// either keeping that lag or (`frozen`) stuck there, as a partitioned
    /// member would be. A read pinned past its revision fails with "future
    /// revision". Linearizable reads are unaffected.
    StaleReads {
        /// For how long, ms.
        ms: u64,
        /// How far behind, ms (0 for a frozen member: stuck at etcd's
        /// revision when the fault begins).
        lag_ms: u64,
        /// Stuck at the revision of `lag_ms` before the fault (cut off from
        /// the others) rather than keeping the lag.
        frozen: bool,
        /// The host watchers meet it at once: their watch streams break
        /// (their member went away) after a write outside the prefix and a
        /// compaction at etcd's revision, so each resumes into a compaction
        /// and lists the prefix while the member is behind.
        relist: bool,
    },
    /// A watcher's consumer stops taking events for `ms` (busy elsewhere)
    /// while its watcher keeps running.
    ConsumerStall {
        /// Watcher index.
        watcher: usize,
        /// For how long, ms.
        ms: u64,
    },
    /// etcd applies the contender's next join (a transaction that creates
    /// its key only if absent) but its reply is lost, and another client
    /// writes right after it: the campaign's retry finds its own key with
    /// a later revision in etcd.
    UnansweredJoin {
        /// Contender index.
        contender: usize,
    },
    /// The member serving the watcher's watch goes away (its stream
    /// breaks), and the member its next watch reaches is one revision
    /// behind what the watcher has seen: the watcher checks etcd with a
    /// linearizable listing, which lands at the watcher's own revision
    /// when nothing was written since.
    LaggingWatch {
        /// Watcher index.
        watcher: usize,
    },
    /// etcd's replies to a process arrive `delay_ms` late for `late_ms`
    /// (its keep-alives renew its lease at once, their acknowledgements
    /// come late), then the process is cut off both ways for `cut_ms`:
    /// its lease expires in etcd by the last renewed keep-alive's send
    /// time plus the TTL, which is all a client may count on.
    LateRepliesThenCut {
        /// Which process.
        target: Target,
        /// How late each reply arrives, ms.
        delay_ms: u64,
        /// For how long replies are late, ms.
        late_ms: u64,
        /// Then cut off for, ms.
        cut_ms: u64,
    },
}

impl Fault {
    /// A short name for tables.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::LeaderChange { .. } => "leader change",
            Fault::Compact => "compaction",
            Fault::Partition {
                target,
                direction: Direction::Late { .. },
                ..
            } => match target {
                Target::Host(_) => "late replies",
                Target::Watcher(_) => "watcher late replies",
                Target::Contender(_) => "contender late replies",
            },
            Fault::Partition { target, .. } => match target {
                Target::Host(_) => "partition",
                Target::Watcher(_) => "watcher partition",
                Target::Contender(_) => "contender partition",
            },
            Fault::Pause { target, .. } => match target {
                Target::Host(_) => "GC pause",
                Target::Watcher(_) => "watcher GC pause",
                Target::Contender(_) => "contender GC pause",
            },
            Fault::Crash { target, .. } => match target {
                Target::Host(_) => "host crash",
                Target::Watcher(_) => "watcher crash",
                Target::Contender(_) => "contender crash",
            },
            Fault::DropReplies { .. } => "unanswered requests",
            Fault::Stop { .. } => "stop under faults",
            Fault::RevokeLease { .. } => "lease revoked outside",
            Fault::DeleteLeaderKey { .. } => "leader key deleted outside",
            Fault::DeleteWaiterKey { .. } => "waiter key deleted outside",
            Fault::RevokeLeaderLease { .. } => "leader lease revoked outside",
            Fault::Wipe { .. } => "etcd wiped",
            Fault::StaleReads { .. } => "stale member",
            Fault::ConsumerStall { .. } => "consumer stall",
            Fault::UnansweredJoin { .. } => "unanswered join",
            Fault::LaggingWatch { .. } => "lagging watch member",
            Fault::LateRepliesThenCut { target, .. } => match target {
                Target::Host(_) => "late replies then cut",
                Target::Watcher(_) => "watcher late replies then cut",
                Target::Contender(_) => "contender late replies then cut",
            },
        }
    }

    /// The process the fault is done to, to move it to another.
    pub fn target_mut(&mut self) -> Option<&mut Target> {
        match self {
            Fault::Partition { target, .. }
            | Fault::Pause { target, .. }
            | Fault::Crash { target, .. }
            | Fault::LateRepliesThenCut { target, .. } => Some(target),
            _ => None,
        }
    }

    /// The index of the host a fault is done to (a partition, pause or
    /// crash of it, its stop, its lease revoked), to move it to another.
    pub fn host_mut(&mut self) -> Option<&mut usize> {
        match self {
            Fault::Stop { host } | Fault::RevokeLease { host } => Some(host),
            other => match other.target_mut()? {
                Target::Host(host) => Some(host),
                _ => None,
            },
        }
    }

    /// The process the fault is done to, if it is done to one.
    pub fn target(&self) -> Option<Target> {
        match self {
            Fault::Partition { target, .. }
            | Fault::Pause { target, .. }
            | Fault::Crash { target, .. }
            | Fault::LateRepliesThenCut { target, .. } => Some(*target),
            _ => None,
        }
    }
}

/// The schedule's stable text: timelines print it and pinned seeds
/// fingerprint it (`Case::fingerprint`), so it must not change with the
/// enum's shape. A fault done to a process prints as one name per kind of
/// process (`PartitionWatcher { watcher: 0, .. }`), the others as derived.
impl fmt::Debug for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        /// A process's index under the name its kind prints it with.
        fn index(target: Target) -> (&'static str, usize) {
            match target {
                Target::Host(i) => ("host", i),
                Target::Watcher(i) => ("watcher", i),
                Target::Contender(i) => ("contender", i),
            }
        }
        match *self {
            Fault::LeaderChange { unavailable_ms } => f
                .debug_struct("LeaderChange")
                .field("unavailable_ms", &unavailable_ms)
                .finish(),
            Fault::Compact => f.write_str("Compact"),
            Fault::Partition {
                target,
                direction,
                ms,
            } => {
                let name = match target {
                    Target::Host(_) => "Partition",
                    Target::Watcher(_) => "PartitionWatcher",
                    Target::Contender(_) => "ContenderPartition",
                };
                let (field, i) = index(target);
                f.debug_struct(name)
                    .field(field, &i)
                    .field("direction", &direction)
                    .field("ms", &ms)
                    .finish()
            }
            Fault::Pause { target, ms } => {
                let name = match target {
                    Target::Host(_) => "Pause",
                    Target::Watcher(_) => "PauseWatcher",
                    Target::Contender(_) => "ContenderPause",
                };
                let (field, i) = index(target);
                f.debug_struct(name)
                    .field(field, &i)
                    .field("ms", &ms)
                    .finish()
            }
            Fault::Crash { target, down_ms } => {
                let name = match target {
                    Target::Host(_) => "Crash",
                    Target::Watcher(_) => "WatcherCrash",
                    Target::Contender(_) => "ContenderCrash",
                };
                let (field, i) = index(target);
                f.debug_struct(name)
                    .field(field, &i)
                    .field("down_ms", &down_ms)
                    .finish()
            }
            Fault::DropReplies { ms } => f.debug_struct("DropReplies").field("ms", &ms).finish(),
            Fault::RevokeLease { host } => {
                f.debug_struct("RevokeLease").field("host", &host).finish()
            }
            Fault::Stop { host } => f.debug_struct("Stop").field("host", &host).finish(),
            Fault::DeleteLeaderKey { name } => f
                .debug_struct("DeleteLeaderKey")
                .field("name", &name)
                .finish(),
            Fault::DeleteWaiterKey { name } => f
                .debug_struct("DeleteWaiterKey")
                .field("name", &name)
                .finish(),
            Fault::RevokeLeaderLease { name } => f
                .debug_struct("RevokeLeaderLease")
                .field("name", &name)
                .finish(),
            Fault::Wipe {
                new_cluster,
                down_ms,
            } => f
                .debug_struct("Wipe")
                .field("new_cluster", &new_cluster)
                .field("down_ms", &down_ms)
                .finish(),
            Fault::StaleReads {
                ms,
                lag_ms,
                frozen,
                relist,
            } => f
                .debug_struct("StaleReads")
                .field("ms", &ms)
                .field("lag_ms", &lag_ms)
                .field("frozen", &frozen)
                .field("relist", &relist)
                .finish(),
            Fault::ConsumerStall { watcher, ms } => f
                .debug_struct("ConsumerStall")
                .field("watcher", &watcher)
                .field("ms", &ms)
                .finish(),
            Fault::UnansweredJoin { contender } => f
                .debug_struct("UnansweredJoin")
                .field("contender", &contender)
                .finish(),
            Fault::LaggingWatch { watcher } => f
                .debug_struct("LaggingWatch")
                .field("watcher", &watcher)
                .finish(),
            Fault::LateRepliesThenCut {
                target,
                delay_ms,
                late_ms,
                cut_ms,
            } => {
                let (field, i) = index(target);
                f.debug_struct("LateRepliesThenCut")
                    .field(field, &i)
                    .field("delay_ms", &delay_ms)
                    .field("late_ms", &late_ms)
                    .field("cut_ms", &cut_ms)
                    .finish()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_done_to_a_process_prints_its_stable_text() {
        let printed = |fault: Fault| format!("{fault:?}");
        assert_eq!(
            printed(Fault::Partition {
                target: Target::Watcher(1),
                direction: Direction::Both,
                ms: 5
            }),
            "PartitionWatcher { watcher: 1, direction: Both, ms: 5 }"
        );
        assert_eq!(
            printed(Fault::Pause {
                target: Target::Contender(2),
                ms: 7
            }),
            "ContenderPause { contender: 2, ms: 7 }"
        );
        assert_eq!(
            printed(Fault::Crash {
                target: Target::Host(3),
                down_ms: 9
            }),
            "Crash { host: 3, down_ms: 9 }"
        );
        assert_eq!(printed(Fault::Compact), "Compact");
        assert_eq!(
            printed(Fault::StaleReads {
                ms: 1,
                lag_ms: 2,
                frozen: true,
                relist: false
            }),
            "StaleReads { ms: 1, lag_ms: 2, frozen: true, relist: false }"
        );
    }
}
