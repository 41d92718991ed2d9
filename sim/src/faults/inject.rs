//! The fault injector: a scheduled [`Fault`] done to the world (etcd, a
//! host, a watcher or an election process), and the heal of all of them.

use std::time::Duration;

use madsim::runtime::Handle;
use madsim::task::NodeId;
use madsim::time::sleep;

use crate::history::{Condition, Entry};

use crate::etcd::hooks;
use crate::etcd::server::{self, lock};
use crate::faults::schedule::{Case, Fault};

use crate::world::fleet::{fleet, World};
use crate::world::hosts::host_key;

pub(crate) fn inject(w: &World, case: &Case, fault: &Fault) {
    let handle = Handle::current();
    let now = w.now();
    if let Some(applied) = crate::world::contenders::inject(w, case, fault) {
        if applied {
            w.record(Entry::Fault(fault.clone()));
        }
        return;
    }
    let applied = match fault.clone() {
        Fault::LeaderChange { unavailable_ms } => {
            let window = Duration::from_millis(unavailable_ms);
            if let Some(node) = handle.get_node(w.etcd_node) {
                node.spawn(hooks::leader_change(
                    w.etcd.clone(),
                    w.etcd_ep.clone(),
                    w.start,
                    window,
                ));
            }
            true
        }
        Fault::Compact => {
            let mut st = lock(&w.etcd);
            let rev = st.model.revision();
            let done = st.model.compact(rev).is_ok();
            if done {
                w.record(Entry::Compacted { revision: rev });
            }
            done
        }
        Fault::DropReplies { ms } => {
            let mut st = lock(&w.etcd);
            st.drop_replies_until = st.drop_replies_until.max(now + ms);
            true
        }
        Fault::RevokeLease { host } => {
            let mut st = lock(&w.etcd);
            let lease = st.model.get(host_key(host).as_bytes()).map(|kv| kv.lease);
            let revoked = matches!(lease, Some(l) if l != 0 && st.revoke_lease(now, l).is_ok());
            st.after_change(now);
            revoked
        }
        Fault::Stop { host } => {
            let mut f = fleet(&w.fleet);
            let slot = &mut f.hosts[host];
            if slot.stopped || slot.proc.condition == Condition::Crashed {
                false
            } else {
                slot.stopped = true;
                slot.stop.send_replace(true);
                true
            }
        }
        Fault::Partition {
            host,
            direction,
            ms,
        } => {
            fleet(&w.fleet).hosts[host]
                .proc
                .partition(w.etcd_node, direction);
            let w2 = w.clone();
            madsim::task::spawn(async move {
                sleep(Duration::from_millis(ms)).await;
                let ended = fleet(&w2.fleet).hosts[host]
                    .proc
                    .end_partition(w2.etcd_node, direction);
                if ended {
                    w2.record(Entry::PartitionEnded { host });
                }
            });
            true
        }
        Fault::PartitionWatcher {
            watcher,
            direction,
            ms,
        } => {
            fleet(&w.fleet).watchers[watcher]
                .proc
                .partition(w.etcd_node, direction);
            let w2 = w.clone();
            madsim::task::spawn(async move {
                sleep(Duration::from_millis(ms)).await;
                let ended = fleet(&w2.fleet).watchers[watcher]
                    .proc
                    .end_partition(w2.etcd_node, direction);
                if ended {
                    w2.record(Entry::WatcherPartitionEnded { watcher });
                }
            });
            true
        }
        Fault::Pause { host, ms } => {
            let paused = fleet(&w.fleet).hosts[host].proc.pause();
            if paused {
                let w2 = w.clone();
                madsim::task::spawn(async move {
                    sleep(Duration::from_millis(ms)).await;
                    if fleet(&w2.fleet).hosts[host].proc.end_pause() {
                        w2.record(Entry::Resumed { host });
                    }
                });
            }
            paused
        }
        Fault::PauseWatcher { watcher, ms } => {
            let paused = fleet(&w.fleet).watchers[watcher].proc.pause();
            if paused {
                let w2 = w.clone();
                madsim::task::spawn(async move {
                    sleep(Duration::from_millis(ms)).await;
                    if fleet(&w2.fleet).watchers[watcher].proc.end_pause() {
                        w2.record(Entry::WatcherResumed { watcher });
                    }
                });
            }
            paused
        }
        Fault::Crash { host, down_ms } => {
            let node = {
                let mut f = fleet(&w.fleet);
                let slot = &mut f.hosts[host];
                if slot.proc.condition == Condition::Alive && !slot.stopped {
                    slot.proc.condition = Condition::Crashed;
                    slot.status = None;
                    Some(slot.proc.node)
                } else {
                    None
                }
            };
            crash_for(w, node, down_ms, move |w| restart(w, host))
        }
        Fault::WatcherCrash { watcher, down_ms } => {
            let node = {
                let mut f = fleet(&w.fleet);
                let slot = &mut f.watchers[watcher];
                if slot.proc.condition == Condition::Alive {
                    slot.proc.condition = Condition::Crashed;
                    slot.view = None;
                    slot.status = None;
                    Some(slot.proc.node)
                } else {
                    None
                }
            };
            crash_for(w, node, down_ms, move |w| restart_watcher(w, watcher))
        }
        Fault::StaleReads {
            ms,
            lag_ms,
            frozen,
            relist,
        } => {
            let compacted = {
                let mut st = lock(&w.etcd);
                let behind = if frozen {
                    st.frozen_member(now, lag_ms)
                } else {
                    server::Behind::Lag(lag_ms)
                };
                st.stale_reads = Some(server::StaleReads {
                    until_ms: now + ms,
                    behind,
                });
                relist
                    .then(|| hooks::bump_and_compact(&mut st, now))
                    .flatten()
            };
            if let Some(revision) = compacted {
                w.record(Entry::Fault(Fault::Compact));
                w.record(Entry::Compacted { revision });
                if let Some(node) = handle.get_node(w.etcd_node) {
                    node.spawn(hooks::break_watches(
                        w.etcd.clone(),
                        w.etcd_ep.clone(),
                        coord::DEFAULT_PREFIX.as_bytes().to_vec(),
                    ));
                }
            }
            true
        }
        Fault::ConsumerStall { watcher, ms } => {
            {
                let mut f = fleet(&w.fleet);
                let slot = &mut f.watchers[watcher];
                slot.stall_until = slot.stall_until.max(now + ms);
            }
            let w2 = w.clone();
            madsim::task::spawn(async move {
                sleep(Duration::from_millis(ms)).await;
                // Not if a later stall extended it or the heal ended it.
                let ended = fleet(&w2.fleet).watchers[watcher].stall_until == now + ms;
                if ended {
                    w2.record(Entry::ConsumerStallEnded { watcher });
                }
            });
            true
        }
        Fault::Wipe {
            new_cluster,
            down_ms,
        } => {
            if let Some(node) = handle.get_node(w.etcd_node) {
                node.spawn(hooks::wipe(
                    w.etcd.clone(),
                    w.etcd_ep.clone(),
                    w.start,
                    Duration::from_millis(down_ms),
                    hooks::Wiped {
                        new_cluster,
                        refusing: case.generator.wipes_refuse(),
                    },
                ));
            }
            true
        }
        // Taken by the contenders above.
        Fault::ContenderCrash { .. }
        | Fault::ContenderPartition { .. }
        | Fault::ContenderPause { .. }
        | Fault::DeleteLeaderKey { .. }
        | Fault::DeleteWaiterKey { .. }
        | Fault::RevokeLeaderLease { .. } => false,
    };
    if applied {
        w.record(Entry::Fault(fault.clone()));
    }
}

/// Kills `node` (a process that could crash), and runs `restart` after
/// `down_ms`. True if it crashed.
pub(crate) fn crash_for(
    w: &World,
    node: Option<NodeId>,
    down_ms: u64,
    restart: impl FnOnce(&World) + Send + 'static,
) -> bool {
    let Some(node) = node else {
        return false;
    };
    Handle::current().kill(node);
    let w2 = w.clone();
    madsim::task::spawn(async move {
        sleep(Duration::from_millis(down_ms)).await;
        restart(&w2);
    });
    true
}

pub(crate) fn restart_watcher(w: &World, watcher: usize) {
    let node = {
        let mut f = fleet(&w.fleet);
        let slot = &mut f.watchers[watcher];
        if slot.proc.condition != Condition::Crashed {
            return;
        }
        slot.proc.condition = Condition::Alive;
        slot.proc.node
    };
    Handle::current().restart(node);
    w.record(Entry::WatcherRestarted { watcher });
}

pub(crate) fn restart(w: &World, host: usize) {
    let node = {
        let mut f = fleet(&w.fleet);
        let slot = &mut f.hosts[host];
        if slot.proc.condition != Condition::Crashed {
            return;
        }
        slot.proc.condition = Condition::Alive;
        slot.proc.node
    };
    Handle::current().restart(node);
    w.record(Entry::Restarted { host });
}

pub(crate) fn heal_all(w: &World) {
    crate::world::contenders::heal_all(w);
    let (hosts, watchers) = {
        let mut f = fleet(&w.fleet);
        let hosts: Vec<(bool, bool)> = f
            .hosts
            .iter_mut()
            .map(|s| s.proc.heal(w.etcd_node))
            .collect();
        let watchers: Vec<(bool, bool, bool)> = f
            .watchers
            .iter_mut()
            .map(|s| {
                let (partition_ended, resumed) = s.proc.heal(w.etcd_node);
                let stall_ended = s.stall_until > w.now();
                s.stall_until = s.stall_until.min(w.now());
                (partition_ended, resumed, stall_ended)
            })
            .collect();
        (hosts, watchers)
    };
    for (host, (partition_ended, resumed)) in hosts.into_iter().enumerate() {
        if partition_ended {
            w.record(Entry::PartitionEnded { host });
        }
        if resumed {
            w.record(Entry::Resumed { host });
        }
        restart(w, host);
    }
    for (watcher, (partition_ended, resumed, stall_ended)) in watchers.into_iter().enumerate() {
        if partition_ended {
            w.record(Entry::WatcherPartitionEnded { watcher });
        }
        if stall_ended {
            w.record(Entry::ConsumerStallEnded { watcher });
        }
        if resumed {
            w.record(Entry::WatcherResumed { watcher });
        }
        restart_watcher(w, watcher);
    }
    let now = w.now();
    let mut st = lock(&w.etcd);
    st.unavailable_until = st.unavailable_until.min(now);
    st.refused_until = st.refused_until.min(now);
    st.drop_replies_until = st.drop_replies_until.min(now);
    st.stale_reads = None;
}
