//! A session's loop adapter: the core session machine's events turned
//! into the phases, deadline and counters its handles watch, and the
//! handles' requests fed to the machine.

use std::collections::{BTreeMap, BTreeSet};

use coord_core::election::{Answer, AskedBy, ElectionEvent, ElectionId, Loss};
use coord_core::lease::LeaseState;
use coord_core::session::{Event, Input, Session as SessionMachine};
use coord_core::Instant;
use tokio::sync::{oneshot, watch};
use tracing::{debug, warn};

use super::protocol::{Counters, Deadline, Phase, Request};
use crate::error::Error;
use crate::runtime::runner::Adapter;
use crate::runtime::status::LeaseReporter;

/// A campaign as the loop tracks it: its phase, and answers owed.
struct Campaign {
    /// When the campaign began (for the wait metric).
    started: tokio::time::Instant,
    phase: watch::Sender<Phase>,
    answers: BTreeMap<u64, oneshot::Sender<Answer>>,
}

/// The session loop's side of the handles.
pub(super) struct SessionAdapter {
    reporter: LeaseReporter,
    deadline: watch::Sender<Deadline>,
    counters: watch::Sender<Counters>,
    heals: u64,
    campaigns: BTreeMap<ElectionId, Campaign>,
    /// Campaigns that had an event since the outputs were last drained:
    /// only those may have become over (a pool of thousands is not
    /// looked over after every input).
    eventful: BTreeSet<ElectionId>,
    next_request: u64,
}

impl Adapter<SessionMachine> for SessionAdapter {
    type Request = Request;

    fn start(&mut self, now: Instant, machine: &mut SessionMachine) {
        if let Err(e) = machine.handle(now, Input::Start) {
            warn!(error = %e, "session refused to start");
        }
    }

    fn request(&mut self, now: Instant, machine: &mut SessionMachine, request: Request) {
        match request {
            Request::Campaign {
                id,
                name,
                value,
                mode,
                phase,
            } => {
                let input = Input::Campaign {
                    id,
                    name,
                    value,
                    mode,
                };
                match machine.handle(now, input) {
                    Ok(()) => {
                        self.campaigns.insert(
                            id,
                            Campaign {
                                started: tokio::time::Instant::now(),
                                phase,
                                answers: BTreeMap::new(),
                            },
                        );
                    }
                    Err(e) => {
                        phase.send_replace(Phase::Refused(Error::from(e)));
                    }
                }
            }
            Request::Leave { id } => {
                // An election already over has nothing to leave.
                let _ = machine.handle(now, Input::Leave { id });
            }
            Request::Ask { id, asked, reply } => {
                self.next_request += 1;
                let request = self.next_request;
                let input = match asked {
                    AskedBy::Proclaim(value) => Input::Proclaim { id, request, value },
                    AskedBy::Txn(txn) => Input::Txn { id, request, txn },
                };
                match (machine.handle(now, input), self.campaigns.get_mut(&id)) {
                    (Ok(()), Some(c)) => {
                        c.answers.insert(request, reply);
                    }
                    _ => {
                        let _ = reply.send(Answer::NotLeader);
                    }
                }
            }
            Request::Close => {
                if let Err(e) = machine.handle(now, Input::Close) {
                    debug!(error = %e, "close refused");
                }
            }
        }
    }

    fn publish(&mut self, _now: Instant, event: Event) {
        match event {
            Event::Lease(e) => {
                if matches!(e, coord_core::lease::Event::Reregistered { .. }) {
                    self.heals += 1;
                }
                self.reporter.event(&e);
            }
            Event::Election { id, event } => {
                self.eventful.insert(id);
                self.election_event(id, event);
            }
        }
    }

    fn drained(&mut self, machine: &SessionMachine) {
        self.reporter.state(machine.state());
        self.reporter.expiry(machine.expires_at());
        let deadline = Deadline {
            lease: machine.lease(),
            expires_at: machine.expires_at(),
        };
        // Read with `borrow` only (nothing awaits a change): replaced.
        self.deadline.send_replace(deadline);
        // A campaign whose phase is final and owes no answer is forgotten;
        // one whose every handle is gone is left. Only an event makes a
        // phase final or answers the last request.
        for id in std::mem::take(&mut self.eventful) {
            if self
                .campaigns
                .get(&id)
                .is_some_and(|c| c.phase.borrow().is_over() && c.answers.is_empty())
            {
                self.campaigns.remove(&id);
            }
        }
        let counters = Counters {
            campaigns: machine.elections(),
            heals: self.heals,
        };
        self.counters.send_replace(counters);
        if matches!(machine.state(), LeaseState::Closed { .. }) {
            self.end_campaigns();
        }
    }

    fn orphaned(&mut self, _machine: &SessionMachine) {
        self.reporter.abandoned();
    }

    fn ended(&mut self, _machine: &SessionMachine) {
        self.end_campaigns();
    }
}

impl SessionAdapter {
    /// An adapter that reports the lease through `reporter` and publishes
    /// the lease's deadline and the session's counters.
    pub(super) fn new(
        reporter: LeaseReporter,
        deadline: watch::Sender<Deadline>,
        counters: watch::Sender<Counters>,
    ) -> Self {
        SessionAdapter {
            reporter,
            deadline,
            counters,
            heals: 0,
            campaigns: BTreeMap::new(),
            eventful: BTreeSet::new(),
            next_request: 0,
        }
    }

    /// No lease will come: every campaign the machine did not end is lost
    /// with the session (the machine ends each one before it closes, so
    /// this is a net for one it missed), and all are forgotten.
    fn end_campaigns(&mut self) {
        for (_, c) in std::mem::take(&mut self.campaigns) {
            if !c.phase.borrow().is_over() {
                c.phase.send_replace(Phase::Lost(Loss::SessionClosed));
            }
        }
    }

    fn election_event(&mut self, id: ElectionId, event: ElectionEvent) {
        let Some(c) = self.campaigns.get_mut(&id) else {
            return;
        };
        let phase = match event {
            ElectionEvent::Elected { key, lease, token } => {
                crate::telemetry::election_won(c.started.elapsed());
                debug!(election = id.0, %key, token = token.0, "elected");
                Phase::Leading { key, lease, token }
            }
            ElectionEvent::NotElected { leader } => Phase::NotElected { leader },
            ElectionEvent::Lost { reason } => {
                crate::telemetry::election_lost(&reason);
                debug!(election = id.0, %reason, "campaign or leadership lost");
                Phase::Lost(reason)
            }
            ElectionEvent::Left => Phase::Left,
            ElectionEvent::Answered { request, answer } => {
                if let Some(reply) = c.answers.remove(&request) {
                    let _ = reply.send(answer);
                }
                return;
            }
            ElectionEvent::Retrying(retry) => {
                debug!(election = id.0, attempt = retry.attempt, failure = ?retry.failure, "campaign retrying");
                return;
            }
        };
        c.phase.send_replace(phase);
    }
}
