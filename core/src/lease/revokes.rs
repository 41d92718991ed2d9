//! Leases an engine must revoke, each either in flight (with a deadline)
//! or waiting to be tried again, until etcd confirms.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::ids::{LeaseId, OpId};
use crate::io::Command;
use crate::outbox::Outbox;
use crate::outcome::{Failure, Outcome};
use crate::time::Instant;

/// Pause between two tries of one lease's revoke.
pub(crate) const RETRY: Duration = Duration::from_millis(250);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Try {
    InFlight { op: OpId, deadline: Instant },
    RetryAt(Instant),
}

/// Leases to revoke. A revoke is confirmed by `Ok` or "lease not found";
/// anything else (a failure, an unknown outcome, no answer by its
/// deadline) is tried again after [`RETRY`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Revokes(BTreeMap<LeaseId, Try>);

impl Revokes {
    /// Sends a revoke of `lease`, answered by `deadline`.
    pub(crate) fn issue<E>(
        &mut self,
        out: &mut Outbox<Command, E>,
        lease: LeaseId,
        deadline: Instant,
    ) {
        let op = out.op();
        out.cmd(Command::Revoke { op, lease });
        self.0.insert(lease, Try::InFlight { op, deadline });
    }

    /// Takes a revoke's completion. `None` if `op` is not one of these
    /// revokes; else the lease and whether etcd confirmed it (then it is
    /// done).
    pub(crate) fn complete(
        &mut self,
        now: Instant,
        op: OpId,
        outcome: &Outcome<()>,
    ) -> Option<(LeaseId, bool)> {
        let lease = self
            .0
            .iter()
            .find(|(_, t)| matches!(t, Try::InFlight { op: o, .. } if *o == op))
            .map(|(l, _)| *l)?;
        let confirmed = matches!(
            outcome,
            Outcome::Ok(()) | Outcome::Err(Failure::LeaseNotFound)
        );
        if confirmed {
            self.0.remove(&lease);
        } else {
            self.0.insert(lease, Try::RetryAt(now + RETRY));
        }
        Some((lease, confirmed))
    }

    /// Abandons tries past their deadline and sends the tries that are due;
    /// new tries must be answered within `timeout`, capped at `cap`.
    pub(crate) fn tick<E>(
        &mut self,
        out: &mut Outbox<Command, E>,
        now: Instant,
        timeout: Duration,
        cap: Option<Instant>,
    ) {
        let due: Vec<(LeaseId, Try)> = self
            .0
            .iter()
            .filter(|(_, t)| match t {
                Try::InFlight { deadline, .. } => now >= *deadline,
                Try::RetryAt(at) => now >= *at,
            })
            .map(|(l, t)| (*l, *t))
            .collect();
        for (lease, t) in due {
            if let Try::InFlight { op, .. } = t {
                out.cmd(Command::Abandon { op });
            }
            let deadline = cap.map_or(now + timeout, |c| c.min(now + timeout));
            self.issue(out, lease, deadline);
        }
    }

    /// The earliest deadline or retry time.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.0
            .values()
            .map(|t| match t {
                Try::InFlight { deadline, .. } => *deadline,
                Try::RetryAt(at) => *at,
            })
            .min()
    }

    /// True when every lease is confirmed revoked.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True if `lease` still awaits confirmation.
    pub(crate) fn contains(&self, lease: LeaseId) -> bool {
        self.0.contains_key(&lease)
    }

    /// Gives up: abandons what is in flight; returns the leases left
    /// unconfirmed.
    pub(crate) fn abandon<E>(self, out: &mut Outbox<Command, E>) -> Vec<LeaseId> {
        self.0
            .into_iter()
            .map(|(lease, t)| {
                if let Try::InFlight { op, .. } = t {
                    out.cmd(Command::Abandon { op });
                }
                lease
            })
            .collect()
    }

    /// Hands every lease over, leaving this empty.
    pub(crate) fn take_leases<E>(&mut self, out: &mut Outbox<Command, E>) -> Vec<LeaseId> {
        std::mem::take(self).abandon(out)
    }
}
