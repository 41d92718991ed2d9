//! Grants that passed their deadline unanswered. Their outcome is unknown:
//! etcd may have granted a lease whose answer is late (a pause of this
//! process, a slow network). Such a lease is nobody's, so it is revoked the
//! moment its answer arrives instead of living on for its TTL. A grant still
//! unanswered once any lease it made would have expired is abandoned.

use std::collections::BTreeMap;

use crate::ids::OpId;
use crate::io::Command;
use crate::outbox::Outbox;
use crate::time::Instant;

/// Timed-out grants, each with the instant it is given up at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LateGrants(BTreeMap<OpId, Instant>);

impl LateGrants {
    /// Keeps listening for `op`'s answer until `give_up_at`.
    pub(crate) fn wait(&mut self, op: OpId, give_up_at: Instant) {
        self.0.insert(op, give_up_at);
    }

    /// True if `op` is one of these grants (it is then forgotten): whatever
    /// it granted must be revoked.
    pub(crate) fn answered(&mut self, op: OpId) -> bool {
        self.0.remove(&op).is_some()
    }

    /// Abandons the grants whose time is up.
    pub(crate) fn tick<E>(&mut self, out: &mut Outbox<Command, E>, now: Instant) {
        let due: Vec<OpId> = self
            .0
            .iter()
            .filter(|(_, at)| now >= **at)
            .map(|(op, _)| *op)
            .collect();
        for op in due {
            self.0.remove(&op);
            out.cmd(Command::Abandon { op });
        }
    }

    /// The earliest instant a grant is given up at.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.0.values().min().copied()
    }

    /// Abandons every grant (close does not wait for answers that may never
    /// come; a lease they made expires by its TTL).
    pub(crate) fn abandon_all<E>(&mut self, out: &mut Outbox<Command, E>) {
        for op in std::mem::take(&mut self.0).into_keys() {
            out.cmd(Command::Abandon { op });
        }
    }
}
