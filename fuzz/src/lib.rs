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
pub mod lock;
pub mod probe;
pub mod session;
pub mod watcher;

use arbitrary::{Arbitrary, Unstructured};
use coord_core::OpId;

/// Decodes a plan, then steps until the bytes run out (no continuation
/// flags between steps, so random bytes make long runs too).
pub(crate) fn decode<'a, P, S>(data: &'a [u8]) -> Option<(P, Vec<S>)>
where
    P: Arbitrary<'a>,
    S: Arbitrary<'a>,
{
    let mut u = Unstructured::new(data);
    let plan = P::arbitrary(&mut u).ok()?;
    let mut steps = Vec::new();
    while !u.is_empty() {
        match S::arbitrary(&mut u) {
            Ok(step) => steps.push(step),
            Err(_) => break,
        }
    }
    Some((plan, steps))
}

/// The `which`-th op issued so far (cycling), or a made-up one if none.
pub(crate) fn pick(ops: &[OpId], which: u8) -> OpId {
    if ops.is_empty() {
        return OpId(u64::from(which));
    }
    ops[usize::from(which) % ops.len()]
}

/// What the client's prober tells `M` at the end of an advance of `ms`,
/// if anything, decoded from the advance itself (so that committed inputs
/// keep their shape): etcd found back, by a probe sent up to a second
/// before `now`, on about one advance in 32; etcd found silent on about
/// one in 32 others.
pub(crate) fn probe_news<M: coord_core::Machine>(
    ms: u16,
    now: coord_core::Instant,
) -> Option<M::Input> {
    match ms % 32 {
        7 => Some(M::returned_input(now.saturating_sub(
            std::time::Duration::from_millis(u64::from(ms % 1000)),
        ))),
        19 => Some(M::silent_input()),
        _ => None,
    }
}

/// A timeout fed before the machine's deadline (as a parent woken by a
/// deadline of another part may feed it) changes nothing: no output, the
/// same deadline. Checked at every advance that reaches no deadline.
pub(crate) fn early_timeout_changes_nothing<M>(m: &mut M, now: coord_core::Instant)
where
    M: coord_core::Machine,
    M::Event: std::fmt::Debug,
{
    let deadline = m.poll_timeout();
    if deadline.is_some_and(|d| d <= now) {
        return;
    }
    let handled = m.handle(now, M::timeout_input());
    let out = m.poll();
    assert!(
        out.is_none(),
        "a timeout at {now:?}, before the deadline {deadline:?}, gave {out:?} ({handled:?})"
    );
    assert_eq!(
        m.poll_timeout(),
        deadline,
        "a timeout at {now:?}, before the deadline, moved it"
    );
}

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

/// The backoff pacing a plan runs with: the go-coord-style baseline
/// ([`Pacing::Plain`](coord_core::Pacing::Plain)) for one seed in eight,
/// coord's own otherwise. Taken from the seed's bits so that adding it
/// left the committed corpus decoding as before.
pub fn pacing(seed: u64) -> coord_core::Pacing {
    if seed % 8 == 7 {
        coord_core::Pacing::Plain
    } else {
        coord_core::Pacing::Adaptive
    }
}
