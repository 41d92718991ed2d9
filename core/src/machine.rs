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
    /// Why an input was refused (API misuse; nothing changed).
    type Error: std::fmt::Debug;

    /// The input for "the deadline from `poll_timeout` has passed".
    fn timeout_input() -> Self::Input;

    /// The input for "etcd answers again after a silence" (a probe, see
    /// [`crate::probe`]): every backoff wait is cut short.
    /// `probe_sent` is when the probe that found etcd back was sent.
    fn returned_input(probe_sent: Instant) -> Self::Input;

    /// The input for "the client's prober found etcd silent" (see
    /// [`Input::Silent`]).
    fn silent_input() -> Self::Input;

    /// True while the machine waits on etcd: a request in flight (a grant,
    /// a listing), or a failure not healed yet (a backoff, a retry, a
    /// reopened stream not confirmed). Meanwhile the client's probe
    /// watches for etcd going silent and coming back.
    fn awaits_etcd(&self) -> bool;

    /// How many requests and streams the machine found unanswered so far
    /// (a count that changes when etcd goes silent; the driver may then
    /// re-dial).
    fn silences(&self) -> u64;

    /// Feeds one input at `now`.
    fn handle(&mut self, now: Instant, input: Self::Input) -> Result<(), Self::Error>;

    /// The next command or event; drain until `None` after every `handle`.
    fn poll(&mut self) -> Option<Output<Command, Self::Event>>;

    /// The next deadline, if any.
    fn poll_timeout(&self) -> Option<Instant>;

    /// True once the machine is closed (terminal and inert).
    fn is_closed(&self) -> bool;
}

/// The inputs of a machine that takes no user requests but start and
/// close (a host's liveness, a watcher, an observer, the lease engine).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Input {
    /// Begin.
    Start,
    /// End: whatever the machine holds is given back; idempotent.
    Close,
    /// `poll_timeout()` has passed.
    Timeout,
    /// etcd answers again after a silence: cut every backoff wait short,
    /// and give up requests sent before `probe_sent` (they went out in the
    /// silence).
    Returned {
        /// When the probe that found etcd back was sent.
        probe_sent: Instant,
    },
    /// The client's prober found etcd silent (a probe unanswered or
    /// refused): a host's retries on its fleet slot wait for
    /// [`Input::Returned`] (see [`Backoff::hold`](crate::Backoff::hold)).
    /// Machines without a slot ignore it.
    Silent,
    /// A request or stream the machine started answered.
    Io(Completion),
}

impl From<Completion> for Input {
    fn from(c: Completion) -> Self {
        Input::Io(c)
    }
}

/// Why a machine refused `Start`: every machine's lifecycle error, and the
/// only error of one that takes no other request (a host's liveness, a
/// watcher, an observer, the lease engine). Nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// `Start` was given twice.
    #[error("already started")]
    AlreadyStarted,
    /// `Start` after close.
    #[error("closed")]
    Closed,
}

/// Implements [`Machine`] for a type whose inherent `handle` (failing with
/// the error type given last), `poll`, `poll_timeout` and `is_closed` have
/// the trait's shape.
/// With `[generics]` first, for a generic type.
macro_rules! impl_machine {
    ([$($generics:tt)*] $ty:ty, $input:ty, $event:ty, $error:ty) => {
        impl<$($generics)*> $crate::machine::Machine for $ty {
            type Input = $input;
            type Event = $event;
            type Error = $error;

            fn timeout_input() -> $input {
                <$input>::Timeout
            }

            fn returned_input(probe_sent: $crate::time::Instant) -> $input {
                type I = $input;
                I::Returned { probe_sent }
            }

            fn silent_input() -> $input {
                <$input>::Silent
            }

            fn awaits_etcd(&self) -> bool {
                <$ty>::awaits_etcd(self)
            }

            fn silences(&self) -> u64 {
                <$ty>::silences(self)
            }

            fn handle(
                &mut self,
                now: $crate::time::Instant,
                input: $input,
            ) -> Result<(), $error> {
                <$ty>::handle(self, now, input)
            }

            fn poll(&mut self) -> Option<$crate::outbox::Output<$crate::io::Command, $event>> {
                <$ty>::poll(self)
            }

            fn poll_timeout(&self) -> Option<$crate::time::Instant> {
                <$ty>::poll_timeout(self)
            }

            fn is_closed(&self) -> bool {
                <$ty>::is_closed(self)
            }
        }
    };
    ($ty:ty, $input:ty, $event:ty, $error:ty) => {
        $crate::machine::impl_machine!([] $ty, $input, $event, $error);
    };
}
pub(crate) use impl_machine;
