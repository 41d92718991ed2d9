//! What every machine has in common, so one driver loop runs them all.

use crate::io::{Command, Completion};
use crate::outbox::Output;
use crate::time::Instant;

/// A sans-IO state machine as the driver sees it: completions and timeouts
/// go in through [`handle`](Machine::handle), commands and events come out
/// of [`poll`](Machine::poll), and [`poll_timeout`](Machine::poll_timeout)
/// says when to call back. User requests (start, campaign, close) are the
/// machine's own inputs, given through the same `handle`.
pub trait Machine {
    /// The machine's inputs; every completion is one.
    type Input: From<Completion>;
    /// What the machine tells its user.
    type Event;
    /// API misuse.
    type Error: std::fmt::Debug;

    /// The input for "the deadline from `poll_timeout` has passed".
    fn timeout_input() -> Self::Input;

    /// Feeds one input at `now`.
    fn handle(&mut self, now: Instant, input: Self::Input) -> Result<(), Self::Error>;

    /// The next command or event; drain until `None` after every `handle`.
    fn poll(&mut self) -> Option<Output<Command, Self::Event>>;

    /// The next deadline, if any.
    fn poll_timeout(&self) -> Option<Instant>;

    /// True once the machine is closed (terminal and inert).
    fn is_closed(&self) -> bool;
}
