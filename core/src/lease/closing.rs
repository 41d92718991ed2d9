//! What close still waits for: the revoke of every lease the engine may
//! hold (the registration's, partial ones not yet confirmed revoked, one
//! still being granted), each retried until a deadline; then whatever is
//! left is given up and left to expire.

use std::time::Duration;

use super::revokes::Revokes;
use super::RevokeOutcome;
use crate::ids::{LeaseId, OpId};
use crate::io::Command;
use crate::outbox::Outbox;
use crate::outcome::Outcome;
use crate::time::Instant;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Closing {
    deadline: Instant,
    revokes: Revokes,
    /// The registration's lease, named by the outcome.
    primary: Option<LeaseId>,
    /// The first lease confirmed revoked.
    confirmed: Option<LeaseId>,
    /// A grant in flight at close: its lease is revoked when it arrives.
    pending_grant: Option<OpId>,
}

impl Closing {
    /// Revokes `primary` and every lease in `others`, all answered by
    /// `deadline`; `pending_grant` is a grant whose lease must be revoked
    /// when it arrives.
    pub(super) fn begin<E>(
        out: &mut Outbox<Command, E>,
        deadline: Instant,
        primary: Option<LeaseId>,
        others: Vec<LeaseId>,
        pending_grant: Option<OpId>,
    ) -> Closing {
        let mut revokes = Revokes::default();
        for lease in primary.into_iter().chain(others) {
            revokes.issue(out, lease, deadline);
        }
        Closing {
            deadline,
            revokes,
            primary,
            confirmed: None,
            pending_grant,
        }
    }

    /// True once nothing is left to wait for.
    pub(super) fn done(&self) -> bool {
        self.revokes.is_empty() && self.pending_grant.is_none()
    }

    pub(super) fn next_deadline(&self) -> Instant {
        self.revokes
            .next_deadline()
            .map_or(self.deadline, |d| d.min(self.deadline))
    }

    /// The grant in flight at close ended: revoke what it granted.
    pub(super) fn granted<E>(
        &mut self,
        out: &mut Outbox<Command, E>,
        op: OpId,
        lease: Option<LeaseId>,
    ) -> bool {
        if self.pending_grant != Some(op) {
            return false;
        }
        self.pending_grant = None;
        if let Some(lease) = lease {
            self.revokes.issue(out, lease, self.deadline);
        }
        true
    }

    /// A revoke ended.
    pub(super) fn revoked(&mut self, now: Instant, op: OpId, outcome: &Outcome<()>) {
        if let Some((lease, true)) = self.revokes.complete(now, op, outcome) {
            self.confirmed.get_or_insert(lease);
        }
    }

    /// Retries what is due; `None` while the deadline has not passed, else
    /// the outcome after giving up on whatever is left.
    pub(super) fn tick<E>(
        &mut self,
        out: &mut Outbox<Command, E>,
        now: Instant,
        timeout: Duration,
    ) -> Option<RevokeOutcome> {
        if now < self.deadline {
            self.revokes.tick(out, now, timeout, Some(self.deadline));
            return None;
        }
        // An unconfirmed revoke leaves the lease to expire by its TTL.
        let all_revoked = self.all_revoked();
        let primary = self.primary.filter(|p| self.revokes.contains(*p));
        let left = std::mem::take(&mut self.revokes).abandon(out);
        if let Some(op) = self.pending_grant.take() {
            out.cmd(Command::Abandon { op });
        }
        Some(match primary.or(left.first().copied()) {
            Some(lease) => RevokeOutcome::NotConfirmed(lease),
            None => all_revoked,
        })
    }

    /// The outcome once every revoke is confirmed.
    pub(super) fn all_revoked(&self) -> RevokeOutcome {
        match self.primary.or(self.confirmed) {
            Some(lease) => RevokeOutcome::Revoked(lease),
            None => RevokeOutcome::NothingToRevoke,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRIMARY: LeaseId = LeaseId(0x70);
    /// Sorts before the primary: the first of the leases left.
    const ORPHAN: LeaseId = LeaseId(0x10);

    /// Closing with the registration's lease (revoked by op 1) and an
    /// orphan (op 2) to revoke, by t = 1 s; op `confirmed` answered `Ok`.
    fn given_up_with(confirmed: &[u64]) -> RevokeOutcome {
        let mut out: Outbox<Command, ()> = Outbox::new();
        let deadline = Instant::from_millis(1000);
        let mut c = Closing::begin(&mut out, deadline, Some(PRIMARY), vec![ORPHAN], None);
        for op in confirmed {
            c.revoked(Instant::from_millis(5), OpId(*op), &Outcome::Ok(()));
        }
        assert!(!c.done());
        let timeout = Duration::from_millis(500);
        assert_eq!(c.tick(&mut out, Instant::from_millis(999), timeout), None);
        c.tick(&mut out, deadline, timeout)
            .expect("given up at the deadline")
    }

    #[test]
    fn giving_up_names_the_registrations_lease_if_unconfirmed_else_one_left() {
        assert_eq!(given_up_with(&[]), RevokeOutcome::NotConfirmed(PRIMARY));
        assert_eq!(given_up_with(&[2]), RevokeOutcome::NotConfirmed(PRIMARY));
        assert_eq!(given_up_with(&[1]), RevokeOutcome::NotConfirmed(ORPHAN));
    }
}
