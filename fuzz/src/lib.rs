//! Fuzz drivers for coord's core machines. Each `run(data)` decodes a
//! config and a sequence of steps from the bytes, feeds them to the real
//! machine with non-decreasing time, and asserts the machine's invariants
//! after every step. A panic is a finding.
//!
//! Steps mostly refer to ops the machine really issued (by index), so
//! completions, replies and stream closures hit live ops as well as stale
//! ones.

#![forbid(unsafe_code)]

pub mod liveness;
pub mod watcher;

/// How far one fuzz case got, so a smoke run can check it is not vacuous.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reach {
    /// Steps executed.
    pub steps: usize,
    /// Interesting events seen (registrations, losses, stops; watcher ups,
    /// downs, resyncs).
    pub milestones: usize,
}

impl std::ops::AddAssign for Reach {
    fn add_assign(&mut self, o: Reach) {
        self.steps += o.steps;
        self.milestones += o.milestones;
    }
}
