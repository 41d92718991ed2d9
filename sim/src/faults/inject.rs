//! The fault injector: a scheduled [`Fault`] done to the world (etcd, a
//! host, a watcher or an election process), and the heal of all of them.

use std::time::Duration;

use madsim::runtime::Handle;
use madsim::time::sleep;

use crate::history::{Condition, Entry};

use crate::etcd::hooks;
use crate::etcd::server::{self, lock, EtcdState};
use crate::faults::schedule::{Case, Direction, Fault, Target};

use crate::world::fleet::{fleet, target_ip, World};
use crate::world::hosts::host_key;

/// Does `fault` to the world now, and records it if it took effect (a
/// crash of a process that is not running, say, does not).
pub(crate) fn inject(w: &World, case: &Case, fault: &Fault) {
    let handle = Handle::current();
    let now = w.now();
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
            target,
            direction,
            ms,
        } => {
            fleet(&w.fleet)
                .proc_mut(target)
                .partition(w.etcd_node, direction);
            if let Direction::Late { delay_ms } = direction {
                lock(&w.etcd)
                    .late_replies
                    .insert(target_ip(target), delay_ms);
            }
            let w2 = w.clone();
            madsim::task::spawn(async move {
                sleep(Duration::from_millis(ms)).await;
                let (ended, late) = {
                    let mut f = fleet(&w2.fleet);
                    let proc = f.proc_mut(target);
                    (
                        proc.end_partition(w2.etcd_node, direction),
                        proc.replies_late(),
                    )
                };
                if !late {
                    lock(&w2.etcd).late_replies.remove(&target_ip(target));
                }
                if ended {
                    w2.record(Entry::partition_ended(target));
                }
            });
            true
        }
        Fault::LateRepliesThenCut {
            target,
            delay_ms,
            late_ms,
            cut_ms,
        } => {
            let late = Fault::Partition {
                target,
                direction: Direction::Late { delay_ms },
                ms: late_ms,
            };
            inject(w, case, &late);
            let (w2, case) = (w.clone(), case.clone());
            madsim::task::spawn(async move {
                sleep(Duration::from_millis(late_ms)).await;
                // Not into the heal.
                if w2.now() >= case.phase1_ms {
                    return;
                }
                let cut = Fault::Partition {
                    target,
                    direction: Direction::Both,
                    ms: cut_ms,
                };
                inject(&w2, &case, &cut);
            });
            // Each of its two parts is recorded as it happens.
            false
        }
        Fault::Pause { target, ms } => {
            let paused = fleet(&w.fleet).proc_mut(target).pause();
            if paused {
                let w2 = w.clone();
                madsim::task::spawn(async move {
                    sleep(Duration::from_millis(ms)).await;
                    if fleet(&w2.fleet).proc_mut(target).end_pause() {
                        w2.record(Entry::resumed(target));
                    }
                });
            }
            paused
        }
        Fault::Crash { target, down_ms } => {
            let node = fleet(&w.fleet).crash(target);
            if let Some(node) = node {
                handle.kill(node);
                let w2 = w.clone();
                madsim::task::spawn(async move {
                    sleep(Duration::from_millis(down_ms)).await;
                    restart(&w2, target);
                });
            }
            node.is_some()
        }
        Fault::DeleteLeaderKey { name } | Fault::DeleteWaiterKey { name } => {
            let rank = usize::from(matches!(fault, Fault::DeleteWaiterKey { .. }));
            remove_queued(w, case, name, rank, Removal::Delete)
        }
        Fault::RevokeLeaderLease { name } => remove_queued(w, case, name, 0, Removal::RevokeLease),
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
        Fault::UnansweredJoin { contender } => {
            *lock(&w.etcd).unanswered_joins.entry(contender).or_insert(0) += 1;
            true
        }
        Fault::LaggingWatch { watcher } => {
            let ip = crate::world::fleet::watcher_ip(watcher);
            let streams = hooks::lag_watches_of(&mut lock(&w.etcd), ip);
            let broke = !streams.is_empty();
            if let Some(node) = handle.get_node(w.etcd_node).filter(|_| broke) {
                node.spawn(hooks::tell_broken(w.etcd_ep.clone(), streams));
            }
            broke
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
    };
    if applied {
        w.record(Entry::Fault(fault.clone()));
    }
}

/// How a queued key of a name is taken away from outside.
enum Removal {
    /// `etcdctl del` of the key.
    Delete,
    /// `etcdctl lease revoke` of its lease.
    RevokeLease,
}

/// Takes away the key at `rank` in name `name`'s queue (0: its leader); true
/// if there was one to take.
fn remove_queued(w: &World, case: &Case, name: usize, rank: usize, how: Removal) -> bool {
    let now = w.now();
    let Some(name) = case.names().get(name).cloned() else {
        return false;
    };
    let mut st = lock(&w.etcd);
    let Some(kv) = queued(&st, &name, rank) else {
        return false;
    };
    match how {
        Removal::Delete => {
            st.model.delete(&kv.key);
        }
        Removal::RevokeLease => {
            if kv.lease == 0 || st.revoke_lease(now, kv.lease).is_err() {
                return false;
            }
        }
    }
    st.after_change(now);
    w.record(Entry::KeyRemovedOutside {
        key: String::from_utf8_lossy(&kv.key).into_owned(),
        lease: kv.lease,
    });
    true
}

/// Restarts a crashed process (unless it is a contender told to stop
/// since).
pub(crate) fn restart(w: &World, target: Target) {
    let Some(node) = fleet(&w.fleet).revive(target) else {
        return;
    };
    Handle::current().restart(node);
    w.record(Entry::restarted(target));
}

/// Ends every partition, pause and consumer stall and restarts every
/// crashed process: the contenders first, then the hosts and the watchers.
pub(crate) fn heal_all(w: &World) {
    let (contenders, hosts, watchers) = {
        let f = fleet(&w.fleet);
        (f.contenders.len(), f.hosts.len(), f.watchers.len())
    };
    heal(w, (0..contenders).map(Target::Contender).collect());
    let others = (0..hosts)
        .map(Target::Host)
        .chain((0..watchers).map(Target::Watcher))
        .collect();
    heal(w, others);
    let now = w.now();
    let mut st = lock(&w.etcd);
    st.unavailable_until = st.unavailable_until.min(now);
    st.refused_until = st.refused_until.min(now);
    st.drop_replies_until = st.drop_replies_until.min(now);
    st.stale_reads = None;
    st.unanswered_joins.clear();
    st.lagging_watches.clear();
    st.late_replies.clear();
}

/// Heals every one of `targets` at once, then records what ended and
/// restarts the crashed ones, in order.
fn heal(w: &World, targets: Vec<Target>) {
    let now = w.now();
    let healed: Vec<(Target, bool, bool, bool)> = {
        let mut f = fleet(&w.fleet);
        targets
            .into_iter()
            .map(|target| {
                let (partition_ended, resumed) = f.proc_mut(target).heal(w.etcd_node);
                let stall_ended = match target {
                    Target::Watcher(i) => {
                        let slot = &mut f.watchers[i];
                        let stalled = slot.stall_until > now;
                        slot.stall_until = slot.stall_until.min(now);
                        stalled
                    }
                    _ => false,
                };
                (target, partition_ended, resumed, stall_ended)
            })
            .collect()
    };
    for (target, partition_ended, resumed, stall_ended) in healed {
        if partition_ended {
            w.record(Entry::partition_ended(target));
        }
        if let (true, Target::Watcher(watcher)) = (stall_ended, target) {
            w.record(Entry::ConsumerStallEnded { watcher });
        }
        if resumed {
            w.record(Entry::resumed(target));
        }
        restart(w, target);
    }
}

/// The leader's (`rank` 0) or a waiter's (`rank` 1) key of `name` in etcd.
fn queued(st: &EtcdState, name: &str, rank: usize) -> Option<crate::etcd::model::KeyValue> {
    let select = crate::etcd::model::Select {
        key: format!("{name}/").into_bytes(),
        prefix: true,
        sort: crate::etcd::model::Sort::CreateAscending,
        limit: 0,
    };
    st.model.select(&select).into_iter().nth(rank)
}
