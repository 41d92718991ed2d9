//! # coord-core: sans-IO state machines for coord
//!
//! Pure, deterministic state machines for coordinating a fleet on etcd v3.
//! They perform no I/O, read no clock, spawn no thread and draw no unseeded
//! randomness: a driver (the `coord` crate, or the simulator) feeds them
//! inputs and executes the commands they return.
//!
//! ## Determinism contract
//! Given the same config (including its `seed`) and the same sequence of
//! `(now, input)` calls, a machine produces exactly the same outputs. Time
//! is the caller's [`Instant`]; jitter comes from a PRNG seeded by config.
//!
//! ## Call order (the same for every machine)
//! 1. `handle(now, input)` for each input (start, completions, stream
//!    messages, user requests). It returns an error (each machine's own: a
//!    [`StartError`](machine::StartError), a session's `SessionError`) only
//!    for API misuse, changing nothing; etcd and network failures are inputs, never errors.
//! 2. Drain `poll()` until `None`: each `Output` is a `Command` to execute
//!    (tagged with an [`OpId`]) or an `Event` for the user.
//! 3. Sleep until `poll_timeout()` (or the next input), then
//!    `handle(now, Input::Timeout)`.
//!
//! Completions for an `OpId` the machine no longer waits for are ignored,
//! which makes stale replies after a heal or a timeout harmless.
//!
//! ## Machines
//! - [`lease::LeaseEngine`]: one lease granted, kept alive with its own
//!   deadline, healed, revoked until confirmed; the part every
//!   lease-holding machine is built on.
//! - [`liveness::Liveness`]: a host's registration, a lease with the host's
//!   key attached.
//! - [`session::Session`]: a lease shared by campaigns (elections, locks,
//!   a pool), each an [`election`] part, routed by op.
//! - [`mirror::Mirror`]: the one list-and-watch of a prefix, the part the
//!   watcher, campaigns and the observer share.
//! - [`watcher::Watcher`]: a view of the hosts under a prefix that
//!   converges to etcd's truth, and the events that explain it.
//! - [`observer::Observer`]: every change of an election's leader.
//! - [`backoff::Backoff`]: retry pacing shared by every machine.
//! - [`lock`]: the lock family's pure parts (names, file markers and
//!   their verdict, an in-process lock table).
//!
//! Every machine takes the commands and completions of [`io`] and
//! implements [`Machine`], so one driver loop runs them all.
//!
//! ## Feature flags
//! - `arbitrary` (off by default): derives `arbitrary::Arbitrary` on the
//!   machines' inputs, configs and outputs, for fuzzing them.

#![forbid(unsafe_code)]

pub mod backoff;
pub mod census;
pub mod election;
pub mod host_id;
pub mod ids;
pub mod io;
pub mod kv;
pub mod lease;
pub mod liveness;
pub mod lock;
pub mod machine;
pub mod mirror;
pub mod observer;
pub mod outbox;
pub mod outcome;
pub mod probe;
pub mod rng;
pub mod session;
pub mod time;
pub mod watcher;

pub use backoff::{Backoff, BackoffConfig, BackoffConfigError, FailureClass, Pacing, Slot};

/// What a machine does when its very first attempt (a host's first
/// registration, a watcher's first snapshot) fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub enum StartPolicy {
    /// Report the failure (`StartFailed`), undo what
    /// was done (revoke a partial lease) and end.
    #[default]
    FailFast,
    /// Keep trying with backoff, as after a later failure.
    Retry,
}
pub use ids::{ClusterId, FencingToken, Key, LeaseId, OpId, Revision};
pub use machine::Machine;
pub use outcome::{AttemptFailure, Failure, Outcome, Retry};
pub use time::Instant;
