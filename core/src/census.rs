//! The census: how a registered host learns its place in its fleet.
//!
//! A fleet whose etcd fails fails as one, and each host's retries would
//! reach etcd within a second of its return. To spread the return, each
//! host needs the fleet's size and a rank of its own (see
//! [`Slot`]). A registered host counts the keys under the
//! fleet's prefix, and those after its own key, with two cheap count
//! reads (serializable, one key returned each): its rank is the number of
//! keys before its own, distinct for every live host. The first census is
//! taken within 50 ms of the host's first registration, so that a host
//! is counted from its first moments: one that etcd fails a second after
//! it registered returns on its slot too (a fleet that starts together is
//! counted as far as it has registered: two hosts may share a slot, never
//! worse than no census); the second a fifth of `every` later (jittered),
//! once such a fleet has registered; then every `every`. A host registered again
//! (its lease lost and healed) counts again a fifth of `every` later. A
//! census that fails or goes unanswered changes nothing; the next one is
//! due as if it had been answered.
//!
//! One state enum, the time passed in; the reads come out of
//! `Census::poll`, under op ids of the census's own slot.

use std::time::Duration;

use crate::backoff::Slot;
use crate::ids::{Key, OpId};
use crate::io::{Command, Completion, Consistency, Get, RangeRequest};
use crate::outbox::Outbox;
use crate::outcome::Outcome;
use crate::rng::Rng;
use crate::time::Instant;

/// How a host finds its place in its fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct FleetConfig {
    /// The prefix every host of the fleet registers under.
    pub prefix: Key,
    /// Time between two hosts' return slots. Default 5 ms: a fleet
    /// returns at most 200 hosts a second, and 1,000 hosts over 5 s.
    pub spacing: Duration,
    /// Time between two censuses. Default 60 s (at least 1 s). The first
    /// is due within 50 ms of registering, the second a fifth of it later
    /// (jittered), once a fleet that starts together has registered.
    pub every: Duration,
    /// Wall-clock milliseconds (since the Unix epoch) at the epoch of the
    /// caller's clock: slots are placed on the wall clock, which the
    /// hosts share.
    pub wall_at_epoch: u64,
}

impl FleetConfig {
    /// The defaults for hosts under `prefix`, whose caller's clock
    /// started at `wall_at_epoch`.
    pub fn new(prefix: Key, wall_at_epoch: u64) -> Self {
        FleetConfig {
            prefix,
            spacing: Duration::from_millis(5),
            every: Duration::from_secs(60),
            wall_at_epoch,
        }
    }
}

/// The two counts of one census, as they arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts {
    /// Keys under the prefix.
    fleet: Option<u64>,
    /// Keys under the prefix after this host's own.
    later: Option<u64>,
}

/// Which census comes next, by those before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    /// The host never registered: its first census comes at once.
    First,
    /// The early census is due or asked: the one after it comes a fifth
    /// of `every` later, to count a fleet that started together.
    Second,
    /// Every census after those: `every` apart.
    Steady,
}

/// The longest the first census waits after the first registration
/// (jittered up to it): enough to spread the reads of a fleet registered
/// in one instant over 10 slots of 5 ms, short enough that a host is
/// almost never taken out before it is counted.
const EARLY: Duration = Duration::from_millis(50);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not registered (or closed): no census.
    Off,
    /// The next census is due at `at`.
    Due { at: Instant },
    /// Both reads asked, until `deadline`.
    Asking {
        fleet: OpId,
        later: OpId,
        deadline: Instant,
        counts: Counts,
    },
}

/// One host's census. See the module docs.
#[derive(Debug)]
pub(crate) struct Census {
    config: FleetConfig,
    own: Key,
    window: Duration,
    request_timeout: Duration,
    state: State,
    round: Round,
    rng: Rng,
    out: Outbox<Command, ()>,
}

impl Census {
    /// The census of the host at `own`, its slots within `window`, its
    /// op ids of `slot`.
    pub(crate) fn new(
        config: FleetConfig,
        own: Key,
        window: Duration,
        request_timeout: Duration,
        seed: u64,
        slot: u64,
    ) -> Self {
        Census {
            config,
            own,
            window,
            request_timeout,
            state: State::Off,
            round: Round::First,
            rng: Rng::new(seed ^ 0x6365_6e73_7573),
            out: Outbox::with_slot(slot),
        }
    }

    /// The next read to send, or an abandoned one.
    pub(crate) fn poll(&mut self) -> Option<Command> {
        match self.out.pop()? {
            crate::outbox::Output::Command(c) => Some(c),
            crate::outbox::Output::Event(()) => None,
        }
    }

    /// The next deadline.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Off => None,
            State::Due { at } => Some(at),
            State::Asking { deadline, .. } => Some(deadline),
        }
    }

    /// Whether the host is registered: a census is due within 50 ms of
    /// its first registration, and a fifth of `every` after each later
    /// one; none while it is not.
    pub(crate) fn registered(&mut self, now: Instant, registered: bool) {
        match (self.state, registered) {
            (State::Off, true) => {
                let at = match self.round {
                    Round::First => {
                        self.round = Round::Second;
                        now + self.jitter(EARLY)
                    }
                    Round::Second | Round::Steady => self.settled(now),
                };
                self.state = State::Due { at };
            }
            (State::Asking { fleet, later, .. }, false) => {
                self.abandon(&[fleet, later]);
                self.state = State::Off;
            }
            (State::Due { .. }, false) => self.state = State::Off,
            _ => {}
        }
    }

    /// A deadline passed: ask, or give up on an unanswered census.
    pub(crate) fn timeout(&mut self, now: Instant) {
        match self.state {
            State::Due { at } if now >= at => self.ask(now),
            State::Asking {
                fleet,
                later,
                deadline,
                ..
            } if now >= deadline => {
                self.abandon(&[fleet, later]);
                self.rest(now);
            }
            _ => {}
        }
    }

    /// A read answered: `Some(slot)` once both counts are in (the slot
    /// they give), `None` otherwise. A failed read ends the census.
    pub(crate) fn io(&mut self, now: Instant, c: &Completion) -> Option<Slot> {
        let Completion::Listed { op, outcome } = c else {
            return None;
        };
        let State::Asking {
            fleet,
            later,
            deadline,
            mut counts,
        } = self.state
        else {
            return None;
        };
        let count = match outcome {
            Outcome::Ok(listing) => listing.count,
            Outcome::Err(_) | Outcome::Unknown => {
                if *op == fleet || *op == later {
                    let other = if *op == fleet { later } else { fleet };
                    self.abandon(&[other]);
                    self.rest(now);
                }
                return None;
            }
        };
        if *op == fleet {
            counts.fleet = Some(count);
        } else if *op == later {
            counts.later = Some(count);
        } else {
            return None;
        }
        match counts {
            Counts {
                fleet: Some(fleet),
                later: Some(later),
            } => {
                self.rest(now);
                // The keys before this host's own; a host whose key is not
                // there (yet) counts as the last.
                let rank = fleet.saturating_sub(later.saturating_add(1));
                Some(Slot::new(
                    rank,
                    fleet,
                    self.config.spacing,
                    self.window,
                    self.config.wall_at_epoch,
                ))
            }
            _ => {
                self.state = State::Asking {
                    fleet,
                    later,
                    deadline,
                    counts,
                };
                None
            }
        }
    }

    /// True if `op` is one of the census's reads.
    pub(crate) fn owns(&self, op: OpId) -> bool {
        matches!(self.state, State::Asking { fleet, later, .. } if op == fleet || op == later)
    }

    fn ask(&mut self, now: Instant) {
        let count = |out: &mut Outbox<Command, ()>, after: Option<Key>, prefix: &Key| {
            let op = out.op();
            out.cmd(Command::Range {
                op,
                request: RangeRequest {
                    get: Get {
                        limit: 1,
                        ..Get::prefix(prefix.clone())
                    },
                    consistency: Consistency::Serializable,
                    after,
                    revision: crate::Revision(0),
                },
            });
            op
        };
        let fleet = count(&mut self.out, None, &self.config.prefix);
        let later = count(&mut self.out, Some(self.own.clone()), &self.config.prefix);
        self.state = State::Asking {
            fleet,
            later,
            deadline: now + self.request_timeout,
            counts: Counts {
                fleet: None,
                later: None,
            },
        };
    }

    /// Drops the census's reads `ops`: their answers, if any come, are
    /// no longer awaited.
    fn abandon(&mut self, ops: &[OpId]) {
        for op in ops {
            self.out.cmd(Command::Abandon { op: *op });
        }
    }

    /// The next census is due a fifth of `every` (jittered by up to as
    /// much again) after the early one, else `every` (jittered by up to a
    /// quarter) from now.
    fn rest(&mut self, now: Instant) {
        let every = self.config.every;
        let at = match self.round {
            Round::Second => {
                self.round = Round::Steady;
                self.settled(now)
            }
            Round::First | Round::Steady => now + every + self.jitter(every / 4),
        };
        self.state = State::Due { at };
    }

    /// A fifth of `every` from now, jittered by up to as much again: once
    /// a fleet that registered together has registered.
    fn settled(&mut self, now: Instant) -> Instant {
        let settle = self.config.every / 5;
        now + settle + self.jitter(settle)
    }

    fn jitter(&mut self, up_to: Duration) -> Duration {
        let ms = u64::try_from(up_to.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(self.rng.below_inclusive(ms))
    }
}

#[cfg(test)]
mod tests;
