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

/// Op ids carry the slot of the machine that issued them in their high
/// bits, so a parent sharing one driver with its parts (a session and its
/// elections) routes a completion by its op alone: `op >> SLOT_SHIFT`.
pub const SLOT_SHIFT: u32 = 40;

/// The slot an op id was issued from.
pub fn slot_of(op: OpId) -> u64 {
    op.0 >> SLOT_SHIFT
}

/// An op-id allocator: ids are fresh and increasing within a machine and
/// unique across slots, so a completion for an op no longer awaited is
/// recognisable.
#[derive(Debug)]
pub(crate) struct OpIds {
    base: u64,
    last: u64,
}

impl OpIds {
    /// An allocator whose ids all carry `slot`.
    pub(crate) fn with_slot(slot: u64) -> Self {
        OpIds {
            base: slot << SLOT_SHIFT,
            last: 0,
        }
    }

    /// A fresh op id.
    pub(crate) fn next(&mut self) -> OpId {
        self.last += 1;
        OpId(self.base | self.last)
    }
}

/// A machine's output queue and op-id allocator.
#[derive(Debug)]
pub(crate) struct Outbox<C, E> {
    pub(crate) ids: OpIds,
    queue: VecDeque<Output<C, E>>,
}

impl<C, E> Outbox<C, E> {
    /// An outbox for slot 0 (a machine that shares its driver with no one).
    pub(crate) fn new() -> Self {
        Self::with_slot(0)
    }

    /// An outbox whose op ids all carry `slot`.
    pub(crate) fn with_slot(slot: u64) -> Self {
        Outbox {
            ids: OpIds::with_slot(slot),
            queue: VecDeque::new(),
        }
    }

    /// A fresh op id.
    pub(crate) fn op(&mut self) -> OpId {
        self.ids.next()
    }

    /// The last op id handed out (0 if none), without the slot.
    #[cfg(test)]
    pub(crate) fn last_op(&self) -> u64 {
        self.ids.last
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
