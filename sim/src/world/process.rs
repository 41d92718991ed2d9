//! A simulated process (a host, a watcher, a contender) and the faults on
//! it: partitions and late replies (counted, so overlapping ones end with
//! the last), GC pauses and crashes.

use madsim::net::NetSim;
use madsim::runtime::Handle;
use madsim::task::NodeId;

use crate::faults::schedule::Direction;
use crate::history::Condition;

/// A simulated process and the faults on it.
pub(crate) struct Proc {
    pub(crate) node: NodeId,
    pub(crate) condition: Condition,
    to_etcd: u32,
    from_etcd: u32,
    /// Late-reply windows open (etcd's server delays the replies while
    /// any is: the injector tells it).
    late: u32,
    pauses: u32,
}

impl Proc {
    pub(crate) fn new(node: NodeId) -> Self {
        Proc {
            node,
            condition: Condition::Alive,
            to_etcd: 0,
            from_etcd: 0,
            late: 0,
            pauses: 0,
        }
    }

    pub(crate) fn partition(&mut self, etcd: NodeId, direction: Direction) {
        let net = NetSim::current();
        if matches!(direction, Direction::ToEtcd | Direction::Both) {
            self.to_etcd += 1;
            net.clog_link(self.node, etcd);
        }
        if matches!(direction, Direction::FromEtcd | Direction::Both) {
            self.from_etcd += 1;
            net.clog_link(etcd, self.node);
        }
        if let Direction::Late { .. } = direction {
            self.late += 1;
        }
    }

    /// Whether replies to the process are late now.
    pub(crate) fn replies_late(&self) -> bool {
        self.late > 0
    }

    /// Returns true when no partition remains after this one ends.
    pub(crate) fn end_partition(&mut self, etcd: NodeId, direction: Direction) -> bool {
        let net = NetSim::current();
        let before = self.to_etcd + self.from_etcd + self.late;
        if matches!(direction, Direction::ToEtcd | Direction::Both) {
            self.to_etcd = self.to_etcd.saturating_sub(1);
            if self.to_etcd == 0 {
                net.unclog_link(self.node, etcd);
            }
        }
        if matches!(direction, Direction::FromEtcd | Direction::Both) {
            self.from_etcd = self.from_etcd.saturating_sub(1);
            if self.from_etcd == 0 {
                net.unclog_link(etcd, self.node);
            }
        }
        if let Direction::Late { .. } = direction {
            self.late = self.late.saturating_sub(1);
        }
        before > 0 && self.to_etcd + self.from_etcd + self.late == 0
    }

    pub(crate) fn pause(&mut self) -> bool {
        if self.condition == Condition::Crashed {
            return false;
        }
        self.pauses += 1;
        self.condition = Condition::Paused;
        Handle::current().pause(self.node);
        true
    }

    /// Returns true when the process runs again.
    pub(crate) fn end_pause(&mut self) -> bool {
        if self.pauses == 0 {
            return false;
        }
        self.pauses -= 1;
        if self.pauses > 0 {
            return false;
        }
        self.condition = Condition::Alive;
        Handle::current().resume(self.node);
        true
    }

    pub(crate) fn heal(&mut self, etcd: NodeId) -> (bool, bool) {
        let mut partition_ended = false;
        while self.to_etcd > 0 {
            partition_ended |= self.end_partition(etcd, Direction::ToEtcd);
        }
        while self.from_etcd > 0 {
            partition_ended |= self.end_partition(etcd, Direction::FromEtcd);
        }
        while self.late > 0 {
            partition_ended |= self.end_partition(etcd, Direction::Late { delay_ms: 0 });
        }
        let mut resumed = false;
        while self.pauses > 0 {
            resumed |= self.end_pause();
        }
        (partition_ended, resumed)
    }
}
