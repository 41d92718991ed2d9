//! How a campaign leaves its name: its key deleted (guarded by its token
//! once it has one) after its join is answered, retried until etcd
//! confirms.

use super::*;

impl Campaign {
    /// Leave: cancel a campaign or resign. Idempotent.
    pub(super) fn leave(&mut self, now: Instant, ids: &mut OpIds) {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Pending => self.event(ElectionEvent::Left),
            State::Joining {
                op,
                deadline,
                lease,
            } => {
                // Wait for the join's answer: a delete sent now could reach
                // etcd before the join and miss the key it then creates.
                self.state = State::Leaving {
                    leave: self.leave_of(lease, None, Tell::Left),
                    step: LeaveStep::AwaitJoin { op, deadline },
                };
            }
            State::Rejoin { lease, .. } => {
                self.begin_leave(now, self.leave_of(lease, None, Tell::Left), ids);
            }
            State::Queued {
                lease,
                token,
                mirror,
            }
            | State::Leading {
                lease,
                token,
                mirror,
            } => {
                self.close_mirror(mirror);
                self.begin_leave(now, self.leave_of(lease, Some(token), Tell::Left), ids);
            }
            other @ (State::Leaving { .. } | State::Done) => self.state = other,
        }
    }

    pub(super) fn leave_of(&self, lease: LeaseId, token: Option<Revision>, tell: Tell) -> Leave {
        Leave {
            key: candidate_key(&self.name, lease),
            token,
            tell,
        }
    }

    pub(super) fn left(&mut self, tell: Tell) {
        match tell {
            Tell::Left => self.event(ElectionEvent::Left),
            Tell::Nothing => {}
        }
    }

    pub(super) fn begin_leave(&mut self, now: Instant, leave: Leave, ids: &mut OpIds) {
        let compares = leave
            .token
            .map(|t| Compare::create_revision(leave.key.clone(), CompareOp::Equal, t))
            .into_iter()
            .collect();
        let txn = Txn {
            compares,
            success: vec![TxnOp::Delete {
                key: leave.key.clone(),
            }],
            failure: Vec::new(),
        };
        let op = ids.next();
        self.cmd(Command::Txn { op, txn });
        let deadline = now + self.config.request_timeout;
        self.state = State::Leaving {
            leave,
            step: LeaveStep::InFlight { op, deadline },
        };
    }

    pub(super) fn leave_failed(&mut self, now: Instant, leave: Leave, failure: AttemptFailure) {
        let next_at = now + self.backoff.next_delay(failure.class());
        self.event(ElectionEvent::Retrying(Retry {
            attempt: self.backoff.attempt(),
            next_at,
            failure: Some(failure),
        }));
        self.state = State::Leaving {
            leave,
            step: LeaveStep::RetryAt(next_at),
        };
    }
}
