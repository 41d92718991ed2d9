//! The probe: how a client notices that etcd answers again, without
//! loading a struggling etcd.
//!
//! Machines back off after failures, up to the cap (30 s by default) for
//! requests that time out. When etcd comes back, a machine deep in its
//! backoff would wait out the rest of its delay. Instead, while any machine
//! of a client waits, the client's one prober sends a cheap request (a
//! serializable read of one key that nobody writes) at most once per
//! `interval`. When a probe is answered after one went unanswered (etcd
//! was silent and answers again), the prober reports
//! [`ProbeEvent::Returned`], and the driver gives every machine
//! [`Input::Returned`](crate::machine::Input::Returned): each cuts its
//! backoff wait to a short jittered delay or its fleet slot
//! ([`Backoff::cut`](crate::Backoff::cut)). When a probe goes unanswered
//! after etcd answered (or before it ever did), it reports
//! [`ProbeEvent::Silent`], and the driver gives every machine
//! [`Input::Silent`](crate::machine::Input::Silent): a host whose retries
//! wait on its fleet slot then holds them until etcd's return, so that
//! only the probe asks a silent etcd.
//!
//! Heavy requests (grants, puts, transactions) are never used to probe,
//! and a probe answered while etcd never went silent cuts nothing: a slow
//! but answering etcd sees the machines' retries back off to the cap as
//! before. An answer that is an error (permission denied, say) still
//! proves that etcd answers; only no answer, `Unavailable`, a refused
//! connection or a broken stream count as silence.
//!
//! A probe whose connection was refused ([`Failure::Refused`]: nothing
//! listens at etcd's address, as while a killed etcd restarts) never
//! reached an etcd, so the next one goes out after the short
//! `refused_interval` instead: a restarted etcd is found back within it,
//! and an etcd that accepts connections again is probed at the normal
//! pace, however it answers.
//!
//! One state enum, the time passed in; commands and events come out of
//! [`Prober::poll`].

use std::time::Duration;

use crate::ids::Key;
use crate::io::{Command, Completion, Consistency, Get, RangeRequest};
use crate::outbox::{Outbox, Output};
use crate::outcome::{Failure, Outcome};
use crate::time::Instant;

/// True if a request whose deadline is `deadline` (sent `timeout` before
/// it) was sent before `probe_sent`, the send time of the probe that found
/// etcd back: it went out during the silence and is taken as lost.
pub(crate) fn sent_before(deadline: Instant, timeout: Duration, probe_sent: Instant) -> bool {
    deadline.saturating_sub(timeout) < probe_sent
}

/// The key probed: nobody writes it, so the read is as cheap as a read is.
pub const PROBE_KEY: &[u8] = b"\0coord-probe";

/// The probe: a serializable read of [`PROBE_KEY`], one key at most. It
/// needs a leader only where the client asks for one (etcd's
/// require-leader), as coord's clients do.
pub fn probe_request() -> RangeRequest {
    RangeRequest {
        get: Get {
            limit: 1,
            ..Get::key(Key(PROBE_KEY.to_vec()))
        },
        consistency: Consistency::Serializable,
        after: None,
        revision: crate::Revision(0),
    }
}

/// How the prober probes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub struct ProbeConfig {
    /// Least time between two probes. Default 1 s.
    pub interval: Duration,
    /// A probe unanswered after this counts as silence. Default 1 s.
    pub request_timeout: Duration,
    /// Least time between a probe whose connection was refused and the
    /// next ([`Health::Refused`]). Default 50 ms. A refused connection
    /// reaches no etcd, so this pace loads none; set it to `interval` for
    /// one pace whatever the failure.
    pub refused_interval: Duration,
}

/// Builder-style setters: the struct is `#[non_exhaustive]`, so that a
/// new option is not a breaking change; start from `ProbeConfig::default()`
/// (or its constructor) and set what differs.
impl ProbeConfig {
    /// These options with [`interval`](Self::interval) set.
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }
    /// These options with [`request_timeout`](Self::request_timeout) set.
    pub fn with_request_timeout(mut self, request_timeout: Duration) -> Self {
        self.request_timeout = request_timeout;
        self
    }
    /// These options with [`refused_interval`](Self::refused_interval) set.
    pub fn with_refused_interval(mut self, refused_interval: Duration) -> Self {
        self.refused_interval = refused_interval;
        self
    }
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            interval: Duration::from_secs(1),
            request_timeout: Duration::from_secs(1),
            refused_interval: Duration::from_millis(50),
        }
    }
}

/// What the prober is given.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum ProbeInput {
    /// Whether any machine of the client waits out a backoff now.
    Demand(bool),
    /// `poll_timeout()` has passed.
    Timeout,
    /// A probe answered (other completions are ignored).
    Io(Completion),
}

/// What the prober reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeEvent {
    /// etcd answered after a probe went unanswered: cut every backoff.
    Returned {
        /// When the probe that found etcd back was sent: requests sent
        /// before it went out in the silence.
        sent: Instant,
    },
    /// A probe went unanswered (or was refused) after etcd answered, or
    /// before it ever did: slotted retries wait for `Returned`.
    Silent,
}

/// What the prober last learned of etcd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// No probe has been answered or gone unanswered yet.
    Unknown,
    /// The last probe was answered.
    Answering,
    /// The last probe went unanswered (or etcd was unavailable).
    Silent,
    /// The last probe's connection was refused: nothing listens at etcd's
    /// address. A silence too, probed again after `refused_interval`.
    Refused,
}

impl Health {
    /// Whether this verdict is a silence (unanswered, unavailable or
    /// refused).
    fn silent(self) -> bool {
        matches!(self, Health::Silent | Health::Refused)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No demand, or between demands.
    Idle,
    /// A probe is in flight until `deadline`.
    Probing { op: crate::OpId, deadline: Instant },
    /// Demand, but the last probe was sent less than an interval ago.
    Resting { until: Instant },
}

/// The prober of one client. See the module docs.
#[derive(Debug)]
pub struct Prober {
    config: ProbeConfig,
    state: State,
    demand: bool,
    health: Health,
    last_sent: Option<Instant>,
    out: Outbox<Command, ProbeEvent>,
}

impl Prober {
    /// A prober; nothing is sent until there is demand.
    pub fn new(config: ProbeConfig) -> Self {
        Prober {
            config,
            state: State::Idle,
            demand: false,
            health: Health::Unknown,
            last_sent: None,
            out: Outbox::new(),
        }
    }

    /// What the last probe learned.
    pub fn health(&self) -> Health {
        self.health
    }

    /// The next command (a probe read, or abandoning one) or event.
    #[must_use]
    pub fn poll(&mut self) -> Option<Output<Command, ProbeEvent>> {
        self.out.pop()
    }

    /// The next deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Idle => None,
            State::Probing { deadline, .. } => Some(deadline),
            State::Resting { until } => Some(until),
        }
    }

    /// Feeds one input.
    pub fn handle(&mut self, now: Instant, input: ProbeInput) {
        match input {
            ProbeInput::Demand(demand) => {
                self.demand = demand;
                match self.state {
                    // Probes (or rests) if demanded, stays idle if not.
                    State::Idle => self.next_probe(now),
                    State::Resting { .. } if !demand => self.state = State::Idle,
                    _ => {}
                }
            }
            ProbeInput::Timeout => match self.state {
                State::Probing { op, deadline } if now >= deadline => {
                    self.out.cmd(Command::Abandon { op });
                    self.learned(now, Health::Silent);
                }
                // Rests on until an interval has passed since the last.
                State::Resting { .. } => self.next_probe(now),
                _ => {}
            },
            ProbeInput::Io(Completion::Listed { op, outcome }) => match self.state {
                State::Probing { op: want, .. } if want == op => {
                    let health = match outcome {
                        Outcome::Ok(_) => Health::Answering,
                        Outcome::Err(Failure::Refused(_)) => Health::Refused,
                        Outcome::Unknown
                        | Outcome::Err(Failure::Unavailable(_) | Failure::StreamClosed(_)) => {
                            Health::Silent
                        }
                        Outcome::Err(_) => Health::Answering,
                    };
                    self.learned(now, health);
                }
                _ => {}
            },
            ProbeInput::Io(_) => {}
        }
    }

    /// A probe's verdict; reports a return or a silence, then probes on
    /// while demanded.
    fn learned(&mut self, now: Instant, health: Health) {
        match (self.health.silent(), health.silent()) {
            (true, false) => {
                let sent = self.last_sent.unwrap_or(now);
                self.out.event(ProbeEvent::Returned { sent });
            }
            (false, true) => self.out.event(ProbeEvent::Silent),
            (true, true) | (false, false) => {}
        }
        self.health = health;
        self.next_probe(now);
    }

    /// Probes now if demanded and an interval has passed since the last
    /// (`refused_interval` after a refused connection).
    fn next_probe(&mut self, now: Instant) {
        if !self.demand {
            self.state = State::Idle;
            return;
        }
        let interval = match self.health {
            Health::Refused => self.config.refused_interval,
            Health::Unknown | Health::Answering | Health::Silent => self.config.interval,
        };
        if let Some(until) = self.last_sent.map(|t| t + interval) {
            if until > now {
                self.state = State::Resting { until };
                return;
            }
        }
        let op = self.out.op();
        self.out.cmd(Command::Range {
            op,
            request: probe_request(),
        });
        self.last_sent = Some(now);
        self.state = State::Probing {
            op,
            deadline: now + self.config.request_timeout,
        };
    }
}

#[cfg(test)]
mod tests;
