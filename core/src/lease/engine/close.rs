//! The close side of the engine: what each state gives back when the
//! engine is closed, and the revokes it waits for before it is `Closed`.

use super::*;

impl LeaseEngine {
    pub(super) fn on_close(&mut self, now: Instant) {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Idle => self.begin_closing(now, None, None),
            State::Registering { op, step, .. } => match step {
                Step::Grant => self.begin_closing(now, None, Some(op)),
                Step::Attach { lease, stream } => {
                    self.out.cmd(Command::Abandon { op });
                    if let Some(s) = stream {
                        self.out.cmd(Command::CloseKeepAlive { stream: s.op });
                    }
                    self.begin_closing(now, Some(lease.id), None);
                }
                Step::Open { lease, stream } => {
                    self.out.cmd(Command::CloseKeepAlive { stream: stream.op });
                    self.begin_closing(now, Some(lease.id), None);
                }
            },
            State::Held { lease, link, .. } => {
                if let Link::Up(s) = link {
                    self.out.cmd(Command::CloseKeepAlive { stream: s.op });
                }
                self.begin_closing(now, Some(lease.id), None);
            }
            State::Waiting { next, .. } => {
                let lease = match next {
                    Next::Resume(lease) => Some(lease.id),
                    Next::First | Next::Fresh => None,
                };
                self.begin_closing(now, lease, None);
            }
            // Idempotent: a second close changes nothing.
            other @ (State::Closing(_) | State::Closed(_)) => self.state = other,
        }
    }

    pub(super) fn begin_closing(
        &mut self,
        now: Instant,
        lease: Option<LeaseId>,
        pending_grant: Option<OpId>,
    ) {
        let deadline = now + self.config.request_timeout;
        self.late.abandon_all(&mut self.out);
        let orphans = self.orphans.take_leases(&mut self.out);
        let closing = Closing::begin(&mut self.out, deadline, lease, orphans, pending_grant);
        self.after_closing_progress(closing);
    }

    pub(super) fn after_closing_progress(&mut self, closing: Closing) {
        if closing.done() {
            self.finish_close(closing.all_revoked());
        } else {
            self.state = State::Closing(closing);
        }
    }

    pub(super) fn finish_close(&mut self, revoke: RevokeOutcome) {
        self.state = State::Closed(revoke.clone());
        self.out.event(Event::Closed { revoke });
    }
}
