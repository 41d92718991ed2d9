//! What every machine emits, and the queue it emits into.

use std::collections::VecDeque;

use crate::ids::OpId;

/// What `poll` yields: work for the driver or news for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output<C, E> {
    /// Work for the driver.
    Command(C),
    /// News for the user.
    Event(E),
}

/// A machine's output queue and op-id allocator: ids are fresh and
/// increasing, so a completion for an op no longer awaited is recognisable.
#[derive(Debug)]
pub(crate) struct Outbox<C, E> {
    last_op: u64,
    queue: VecDeque<Output<C, E>>,
}

impl<C, E> Outbox<C, E> {
    pub(crate) fn new() -> Self {
        Outbox {
            last_op: 0,
            queue: VecDeque::new(),
        }
    }

    /// A fresh op id.
    pub(crate) fn op(&mut self) -> OpId {
        self.last_op += 1;
        OpId(self.last_op)
    }

    /// The last op id handed out (0 if none).
    #[cfg(test)]
    pub(crate) fn last_op(&self) -> u64 {
        self.last_op
    }

    pub(crate) fn cmd(&mut self, c: C) {
        self.queue.push_back(Output::Command(c));
    }

    pub(crate) fn event(&mut self, e: E) {
        self.queue.push_back(Output::Event(e));
    }

    pub(crate) fn pop(&mut self) -> Option<Output<C, E>> {
        self.queue.pop_front()
    }
}
