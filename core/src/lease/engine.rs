//! The lease engine's state machine. See the module docs for the protocol.

use std::time::Duration;

use super::closing::Closing;
use super::late_grants::LateGrants;
use super::link::{Link, Stream};
use super::revokes::Revokes;
use super::{
    Attach, ConfigError, Event, Input, LeaseConfig, LeaseState, LostReason, OnLoss, Output,
    RevokeOutcome, StartError,
};
use crate::backoff::{Backoff, FailureClass};
use crate::ids::{LeaseId, OpId};
use crate::io::{Command, Compare, CompareOp, CompareTarget, Completion, Granted, Txn, TxnOp};
use crate::outbox::Outbox;
use crate::outcome::{AttemptFailure, Failure, Outcome, Retry};
use crate::time::Instant;
use crate::StartPolicy;

mod close;
mod keep_alive;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lease {
    id: LeaseId,
    ttl: Duration,
}

/// What an `etcd grpc-proxy` adds to a keep-alive's reply beyond a TTL/3:
/// the proxy answers a lease's keep-alives only when its own renewal of
/// the lease (sent every TTL/3, from a loop that wakes every 500 ms) is
/// answered; the rest is a round trip to etcd.
const PROXY_RENEWAL_SLACK: Duration = Duration::from_secs(1);

impl Lease {
    /// How long a keep-alive on this lease's stream may go unanswered
    /// before the stream counts as silently broken: the request timeout,
    /// or TTL/3 + [`PROXY_RENEWAL_SLACK`] when that is longer (a lease of
    /// a long TTL behind a grpc-proxy is answered that late, and its
    /// stream must not be taken as broken each time).
    fn reply_wait(&self, request_timeout: Duration) -> Duration {
        request_timeout.max(self.ttl / 3 + PROXY_RENEWAL_SLACK)
    }
}

/// What a registration attempt is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// The very first registration (governed by the start policy).
    First,
    /// A new lease after a loss.
    Fresh,
    /// Keeping the lost lease, which etcd has not said is dead.
    Resume,
}

/// What the next attempt, after a wait, will be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    First,
    Fresh,
    Resume(Lease),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// Waiting for the grant.
    Grant,
    /// Waiting for the attached key's compare-and-put. `stream` is set when
    /// resuming (already open and confirmed), unset in a fresh
    /// registration.
    Attach {
        lease: Lease,
        stream: Option<Stream>,
    },
    /// Waiting for the first keep-alive reply on a new stream.
    Open { lease: Lease, stream: Stream },
}

/// How the first heal attempt after a loss is paced.
#[derive(Debug, Clone, Copy)]
pub(super) enum Pace {
    /// As a new failure of this class: a delay drawn from the backoff.
    Draw(FailureClass),
    /// Already paced: the loss found a retry scheduled for this instant
    /// (a failure whose delay was drawn), which the loss does not push
    /// later.
    Until(Instant),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Idle,
    Registering {
        op: OpId,
        deadline: Instant,
        step: Step,
        attempt: Attempt,
    },
    Held {
        lease: Lease,
        link: Link,
        next_send: Instant,
    },
    Waiting {
        next_at: Instant,
        next: Next,
    },
    Closing(Closing),
    Closed(RevokeOutcome),
}

/// The lease engine. See the [module docs](super) for the protocol.
#[derive(Debug)]
pub struct LeaseEngine {
    config: LeaseConfig,
    /// The key registered with the lease, if any.
    attach: Option<Attach>,
    /// What a loss does.
    on_loss: OnLoss,
    state: State,
    backoff: Backoff,
    out: Outbox<Command, Event>,
    /// Leases of failed partial registrations (and, when replacing, of lost
    /// leases) whose revoke etcd has not confirmed yet: retried in the
    /// background, and by close.
    orphans: Revokes,
    /// Grants that timed out: a lease one of them made is revoked when its
    /// answer arrives.
    late: LateGrants,
    /// Requests and streams found unanswered so far.
    silences: u64,
}

impl LeaseEngine {
    /// An engine for `config` that registers `attach` with its lease (if
    /// any), does `on_loss` when it loses it, and whose op ids carry
    /// `slot`. Nothing happens until `Input::Start`. Fails, changing
    /// nothing, on a parameter out of range or an empty key.
    pub fn new(
        config: LeaseConfig,
        attach: Option<Attach>,
        on_loss: OnLoss,
        slot: u64,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        if attach.as_ref().is_some_and(|a| a.key.0.is_empty()) {
            return Err(ConfigError::EmptyKey);
        }
        let backoff = Backoff::new(config.backoff.clone(), config.seed);
        Ok(LeaseEngine {
            config,
            attach,
            on_loss,
            state: State::Idle,
            backoff,
            out: Outbox::with_slot(slot),
            orphans: Revokes::default(),
            late: LateGrants::default(),
            silences: 0,
        })
    }

    /// The config in force.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// Sets (or forgets) this host's place on its fleet's return
    /// schedule: retries of a lasting failure, and the wait cut short when
    /// etcd returns, land on it (see [`Slot`](crate::Slot)).
    pub fn set_slot(&mut self, slot: Option<crate::Slot>) {
        self.backoff.set_slot(slot);
    }

    /// The fleet slot in use, if any (none under
    /// [`Pacing::Plain`](crate::Pacing::Plain)).
    pub fn slot(&self) -> Option<crate::Slot> {
        self.backoff.slot()
    }

    /// The lease held, only while `Registered`.
    pub fn lease(&self) -> Option<LeaseId> {
        match &self.state {
            State::Held { lease, .. } => Some(lease.id),
            _ => None,
        }
    }

    /// While `Registered`: the instant until which the lease provably
    /// lives (send time of the last acknowledged keep-alive plus the TTL it
    /// returned). Past it, etcd may have expired the lease.
    pub fn expires_at(&self) -> Option<Instant> {
        match &self.state {
            State::Held { link, .. } => Some(link.expires_at()),
            _ => None,
        }
    }

    /// The user-visible state.
    pub fn state(&self) -> LeaseState {
        match &self.state {
            State::Idle
            | State::Registering {
                attempt: Attempt::First,
                ..
            } => LeaseState::Registering,
            State::Registering { .. } | State::Waiting { .. } => LeaseState::Healing {
                attempt: self.backoff.attempt(),
            },
            State::Held { lease, .. } => LeaseState::Registered { lease: lease.id },
            State::Closing(_) => LeaseState::Closing,
            State::Closed(revoke) => LeaseState::Closed {
                revoke: revoke.clone(),
            },
        }
    }

    /// True once `Closed` (terminal).
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed(_))
    }

    /// The last op id handed out, without its slot.
    #[cfg(test)]
    pub(crate) fn last_op(&self) -> u64 {
        self.out.last_op()
    }

    /// The next command or event, if any. Drain it after every `handle`.
    #[must_use]
    pub fn poll(&mut self) -> Option<Output> {
        self.out.pop()
    }

    /// The next deadline; call `handle(now, Input::Timeout)` once it passes.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.state_deadline(),
            self.orphans.next_deadline(),
            self.late.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn state_deadline(&self) -> Option<Instant> {
        match &self.state {
            State::Idle | State::Closed(_) => None,
            State::Registering { deadline, .. } => Some(*deadline),
            State::Held {
                lease,
                link,
                next_send,
            } => Some(self.held_deadline(lease, link, *next_send)),
            State::Waiting { next_at, .. } => Some(*next_at),
            State::Closing(closing) => Some(closing.next_deadline()),
        }
    }

    /// The first of a held lease's timers: a keep-alive to send, a reply
    /// awaited for a request timeout, a retry of the stream, the deadline.
    fn held_deadline(&self, lease: &Lease, link: &Link, next_send: Instant) -> Instant {
        match link {
            Link::Up(s) => {
                let silent_at = s.silent_at(lease.reply_wait(self.config.request_timeout));
                next_send
                    .min(s.expires_at)
                    .min(silent_at.unwrap_or(s.expires_at))
            }
            Link::Down {
                retry_at,
                expires_at,
                ..
            } => (*retry_at).min(*expires_at),
        }
    }

    /// Feeds one input. Only `Start` in the wrong state is an error; etcd
    /// failures arrive as inputs and are handled, stale completions ignored.
    pub fn handle(&mut self, now: Instant, input: Input) -> Result<(), StartError> {
        match input {
            Input::Start => return self.on_start(now),
            Input::Close => self.on_close(now),
            Input::Timeout => self.on_timeout(now),
            Input::Returned { probe_sent } => self.cut(now, probe_sent),
            Input::Silent => self.on_silent(now),
            Input::Io(c) => self.on_io(now, c),
        }
        Ok(())
    }

    /// How many requests and streams were found unanswered so far (a
    /// client may re-dial when this grows).
    pub fn silences(&self) -> u64 {
        self.silences
    }

    /// True while waiting on etcd: registering, waiting to register again
    /// or to reopen a broken keep-alive stream, or a reopened stream not
    /// confirmed yet.
    pub fn awaits_etcd(&self) -> bool {
        match &self.state {
            State::Registering { .. }
            | State::Waiting { .. }
            | State::Held {
                link: Link::Down { .. },
                ..
            } => true,
            State::Held {
                link: Link::Up(stream),
                ..
            } => stream.replies == 0 || self.backoff.attempt() > 0,
            State::Idle | State::Closing(_) | State::Closed(_) => false,
        }
    }

    /// etcd answers again after a silence: an attempt sent long before has
    /// until a jittered cut to be answered, a keep-alive is sent at once
    /// (to prove the stream), a backoff wait is cut short, and the backoff
    /// starts again from the first attempt (the failures counted so far
    /// were the silence's; a loss found right after, such as a deadline
    /// passing on a stream reopened too late, is paced as a first
    /// failure). Nothing under [`Pacing::Plain`](crate::Pacing::Plain).
    fn cut(&mut self, now: Instant, probe_sent: Instant) {
        if !self.backoff.heeds_returns() {
            return;
        }
        let timeout = self.config.request_timeout;
        let lost = |sent: Option<&Instant>| sent.is_some_and(|t| *t < probe_sent);
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Registering {
                op,
                deadline,
                step,
                attempt,
            } if crate::probe::sent_before(deadline, timeout, probe_sent) => {
                // Sent in the silence: etcd may still answer it (a stalled
                // etcd answers what it had queued, at once) or not (a
                // partition lost it). It has until a jittered cut, then it
                // is taken as lost and retried at the first attempt's pace.
                self.state = State::Registering {
                    op,
                    deadline: self.backoff.cut(now, deadline),
                    step,
                    attempt,
                };
            }
            // A keep-alive sent in the silence and unanswered: the stream
            // is taken as broken now, not a request timeout later.
            State::Held {
                lease,
                link: Link::Up(stream),
                next_send,
            } if lost(stream.unacked.front()) => {
                let why = Failure::StreamClosed("keep-alive sent before etcd returned".into());
                self.stream_broke(now, lease, stream, why, next_send);
            }
            // A keep-alive now proves the stream.
            State::Held {
                lease,
                link: link @ Link::Up(_),
                next_send,
            } => {
                self.state = State::Held {
                    lease,
                    link,
                    next_send: next_send.min(now),
                }
            }
            other => self.state = other,
        }
        self.move_wait(|backoff, at| backoff.cut(now, at));
        self.backoff.reset();
    }

    /// Moves the wait for the next retry (of the lease, or of its broken
    /// stream), if one is waited for, to what `to` makes of it.
    fn move_wait(&mut self, to: impl FnOnce(&mut Backoff, Instant) -> Instant) {
        match &mut self.state {
            State::Waiting { next_at, .. } => *next_at = to(&mut self.backoff, *next_at),
            State::Held {
                link: Link::Down { retry_at, .. },
                ..
            } => *retry_at = to(&mut self.backoff, *retry_at),
            _ => {}
        }
    }

    /// The client's prober found etcd silent: a retry waiting on this
    /// host's fleet slot now waits for etcd's return (see
    /// [`Backoff::hold`]); requests in flight are left to their deadlines.
    fn on_silent(&mut self, now: Instant) {
        self.backoff.silenced();
        self.move_wait(|backoff, at| backoff.hold(now, at));
    }

    fn on_io(&mut self, now: Instant, c: Completion) {
        match c {
            Completion::Granted { op, outcome } => self.on_granted(now, op, outcome),
            Completion::Txn { op, outcome } => self.on_attached(now, op, outcome.map(|_| ())),
            Completion::Revoked { op, outcome } => self.on_revoked(now, op, outcome),
            Completion::KeepAliveReply { stream, ttl_secs } => self.on_reply(now, stream, ttl_secs),
            Completion::KeepAliveClosed { stream, failure } => {
                self.on_stream_closed(now, stream, failure)
            }
            // Never asked for: nothing to do.
            Completion::Listed { .. }
            | Completion::WatchMessage { .. }
            | Completion::WatchClosed { .. } => {}
        }
    }

    fn on_start(&mut self, now: Instant) -> Result<(), StartError> {
        match self.state {
            State::Idle => {
                self.begin_grant(now, Attempt::First);
                Ok(())
            }
            State::Closing(_) | State::Closed(_) => Err(StartError::Closed),
            _ => Err(StartError::AlreadyStarted),
        }
    }

    fn begin_grant(&mut self, now: Instant, attempt: Attempt) {
        let op = self.out.op();
        let ttl_secs = self.config.ttl_secs();
        self.out.cmd(Command::Grant { op, ttl_secs });
        self.state = State::Registering {
            op,
            deadline: now + self.config.request_timeout,
            step: Step::Grant,
            attempt,
        };
    }

    /// The attached key's compare-and-put (if a key is attached), else the
    /// next step.
    fn begin_attach(
        &mut self,
        now: Instant,
        lease: Lease,
        stream: Option<Stream>,
        attempt: Attempt,
    ) {
        let Some(attach) = self.attach.clone() else {
            match stream {
                Some(stream) => self.registered(now, lease, stream, attempt),
                None => self.begin_open(now, lease, attempt),
            }
            return;
        };
        let op = self.out.op();
        self.out.cmd(Command::Txn {
            op,
            txn: put_if_changed(attach.key, attach.value, lease.id),
        });
        self.state = State::Registering {
            op,
            deadline: now + self.config.request_timeout,
            step: Step::Attach { lease, stream },
            attempt,
        };
    }

    fn begin_open(&mut self, now: Instant, lease: Lease, attempt: Attempt) {
        let op = self.out.op();
        self.out.cmd(Command::OpenKeepAlive {
            op,
            lease: lease.id,
        });
        self.state = State::Registering {
            op,
            deadline: now + self.config.request_timeout,
            step: Step::Open {
                lease,
                stream: Stream::opened(op, now, now),
            },
            attempt,
        };
    }

    /// The registration is complete: hold the lease and say so. Unless the
    /// last answer came at or past the lease's deadline (its first
    /// keep-alive's send time plus the TTL etcd answered): etcd may have
    /// expired the lease by then, so nothing is reported held and the
    /// attempt fails as timed out, its stream closed. A resume then tries
    /// the same lease again, and etcd's answer to its keep-alive settles
    /// whether it lives; a first or fresh registration revokes its lease.
    fn registered(&mut self, now: Instant, lease: Lease, stream: Stream, attempt: Attempt) {
        if now >= stream.expires_at {
            let (revoke, resume) = self.unwind_step(Step::Open { lease, stream }, attempt);
            self.attempt_failed(now, AttemptFailure::Timeout, revoke, resume, attempt);
            return;
        }
        self.hold(lease, stream);
        self.out.event(match attempt {
            Attempt::First => Event::Registered {
                lease: lease.id,
                ttl: lease.ttl,
            },
            Attempt::Fresh => Event::Reregistered {
                lease: lease.id,
                resumed: false,
            },
            Attempt::Resume => Event::Reregistered {
                lease: lease.id,
                resumed: true,
            },
        });
    }

    fn hold(&mut self, lease: Lease, stream: Stream) {
        self.backoff.reset();
        let next_send = stream.last_send + self.config.refresh;
        self.state = State::Held {
            lease,
            link: Link::Up(stream),
            next_send,
        };
    }

    fn on_timeout(&mut self, now: Instant) {
        let timeout = self.config.request_timeout;
        self.orphans.tick(&mut self.out, now, timeout, None);
        self.late.tick(&mut self.out, now);
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Registering {
                op,
                deadline,
                step,
                attempt,
            } if now >= deadline => {
                self.silences += 1;
                match step {
                    // Its answer may still come (this process paused, the
                    // network slow): a lease it made is then revoked. Any
                    // such lease has expired once a TTL has passed.
                    Step::Grant => self.late.wait(op, now + self.config.ttl),
                    Step::Attach { .. } | Step::Open { .. } => {
                        self.out.cmd(Command::Abandon { op })
                    }
                }
                let (revoke, resume) = self.unwind_step(step, attempt);
                self.attempt_failed(now, AttemptFailure::Timeout, revoke, resume, attempt);
            }
            State::Held {
                lease,
                link,
                next_send,
            } => {
                let soonest = self.held_deadline(&lease, &link, next_send);
                self.held_timeout(now, lease, link, next_send, soonest)
            }
            State::Waiting { next_at, next } if now >= next_at => match next {
                Next::Resume(lease) => self.begin_open(now, lease, Attempt::Resume),
                Next::First => self.begin_grant(now, Attempt::First),
                Next::Fresh => self.begin_grant(now, Attempt::Fresh),
            },
            State::Closing(mut closing) => match closing.tick(&mut self.out, now, timeout) {
                Some(outcome) => self.finish_close(outcome),
                None => self.state = State::Closing(closing),
            },
            other => self.state = other,
        }
    }

    /// Tears down a failed step: closes its stream; returns the lease to
    /// revoke (a fresh, partial registration) and what may still be resumed.
    fn unwind_step(&mut self, step: Step, attempt: Attempt) -> (Option<LeaseId>, Option<Lease>) {
        match step {
            Step::Grant => (None, None),
            Step::Attach {
                lease,
                stream: None,
            } => (Some(lease.id), None),
            Step::Attach {
                lease,
                stream: Some(s),
            } => {
                self.out.cmd(Command::CloseKeepAlive { stream: s.op });
                (None, Some(lease))
            }
            Step::Open { lease, stream } => {
                self.out.cmd(Command::CloseKeepAlive { stream: stream.op });
                match attempt {
                    Attempt::Resume => (None, Some(lease)),
                    Attempt::First | Attempt::Fresh => (Some(lease.id), None),
                }
            }
        }
    }

    fn attempt_failed(
        &mut self,
        now: Instant,
        reason: AttemptFailure,
        revoke: Option<LeaseId>,
        resume: Option<Lease>,
        attempt: Attempt,
    ) {
        if attempt == Attempt::First && self.config.start == StartPolicy::FailFast {
            self.out.event(Event::StartFailed { reason });
            self.begin_closing(now, revoke, None);
            return;
        }
        if let Some(lease) = revoke {
            // Retried until etcd confirms: if it is lost, the lease (maybe
            // with the key on it) would outlive a later close.
            let deadline = now + self.config.request_timeout;
            self.orphans.issue(&mut self.out, lease, deadline);
        }
        if reason == AttemptFailure::LeaseGone {
            // etcd answered that the lease is gone (it expired while the
            // process was paused, say): etcd works, whatever failed
            // before, so the retry starts from the first attempt, as after
            // a lease lost the same way. Only failures that follow grow the
            // delay; every lease-gone answer is an answer from etcd, so
            // retrying at the first attempt's pace loads no silent etcd.
            self.backoff.reset();
        }
        let next_at = self.backoff.retry_at(now, reason.class());
        self.out.event(Event::Retrying(Retry {
            attempt: self.backoff.attempt(),
            next_at,
            failure: Some(reason),
        }));
        let next = match (resume, attempt) {
            (Some(lease), _) => Next::Resume(lease),
            (None, Attempt::First) => Next::First,
            (None, Attempt::Fresh | Attempt::Resume) => Next::Fresh,
        };
        self.state = State::Waiting { next_at, next };
    }

    /// The held lease is lost (its stream already closed): report and
    /// schedule the first heal attempt: a resume unless etcd said the lease
    /// is dead or the policy is to replace it.
    fn lose(&mut self, now: Instant, lease: Lease, reason: LostReason) {
        let class = match &reason {
            LostReason::StreamClosed(f) => f.class(),
            LostReason::LeaseExpired => {
                // etcd answered that the lease is gone: etcd works, whatever
                // failed before, so the heal starts from the first attempt.
                self.backoff.reset();
                FailureClass::Fast
            }
            LostReason::KeepAliveTimeout => FailureClass::Slow,
        };
        self.lose_as(now, lease, reason, Pace::Draw(class));
    }

    /// [`Self::lose`], pacing the first heal attempt as `pace` says.
    fn lose_as(&mut self, now: Instant, lease: Lease, reason: LostReason, pace: Pace) {
        let alive_maybe = !matches!(reason, LostReason::LeaseExpired);
        let next = match self.on_loss {
            OnLoss::Resume if alive_maybe => Next::Resume(lease),
            OnLoss::Resume => Next::Fresh,
            OnLoss::Replace => {
                if alive_maybe {
                    // Whatever was built on it is reported lost: its keys
                    // must go, not linger until it expires.
                    let deadline = now + self.config.request_timeout;
                    self.orphans.issue(&mut self.out, lease.id, deadline);
                }
                Next::Fresh
            }
        };
        self.out.event(Event::Lost {
            lease: lease.id,
            reason,
        });
        let next_at = match pace {
            Pace::Draw(class) => self.backoff.retry_at(now, class),
            Pace::Until(at) => at.max(now),
        };
        self.out.event(Event::Retrying(Retry {
            attempt: self.backoff.attempt(),
            next_at,
            failure: None,
        }));
        self.state = State::Waiting { next_at, next };
    }

    fn on_granted(&mut self, now: Instant, op: OpId, outcome: Outcome<Granted>) {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Registering {
                op: want,
                step: Step::Grant,
                attempt,
                ..
            } if want == op => match outcome {
                Outcome::Ok(Granted { lease, ttl_secs }) if ttl_secs > 0 => {
                    let ttl = Duration::from_secs(u64::try_from(ttl_secs).unwrap_or(0));
                    self.begin_attach(now, Lease { id: lease, ttl }, None, attempt);
                }
                Outcome::Ok(Granted { lease, ttl_secs }) => {
                    // etcd never grants a TTL of 0 or less; if it ever does,
                    // the lease is useless: give it back and try again.
                    let why = Failure::Other(format!("lease granted with TTL {ttl_secs}"));
                    self.attempt_failed(now, AttemptFailure::Etcd(why), Some(lease), None, attempt);
                }
                failed => {
                    let why = AttemptFailure::of(&failed).unwrap_or(AttemptFailure::Timeout);
                    self.attempt_failed(now, why, None, None, attempt);
                }
            },
            other if self.late.answered(op) => {
                self.state = other;
                if let Outcome::Ok(Granted { lease, .. }) = outcome {
                    let deadline = now + self.config.request_timeout;
                    self.orphans.issue(&mut self.out, lease, deadline);
                }
            }
            State::Closing(mut closing) => {
                let lease = match outcome {
                    Outcome::Ok(g) => Some(g.lease),
                    Outcome::Err(_) | Outcome::Unknown => None,
                };
                closing.granted(&mut self.out, op, lease);
                self.after_closing_progress(closing);
            }
            other => self.state = other,
        }
    }

    fn on_attached(&mut self, now: Instant, op: OpId, outcome: Outcome<()>) {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Registering {
                op: want,
                step: Step::Attach { lease, stream },
                attempt,
                ..
            } if want == op => match (outcome, stream) {
                (Outcome::Ok(()), None) => self.begin_open(now, lease, attempt),
                (Outcome::Ok(()), Some(stream)) => self.registered(now, lease, stream, attempt),
                (failed, stream) => {
                    let why = AttemptFailure::of(&failed).unwrap_or(AttemptFailure::Timeout);
                    let step = Step::Attach { lease, stream };
                    let (revoke, resume) = self.unwind_step(step, attempt);
                    let resume = resume.filter(|_| why != AttemptFailure::LeaseGone);
                    self.attempt_failed(now, why, revoke, resume, attempt);
                }
            },
            other => self.state = other,
        }
    }

    fn on_revoked(&mut self, now: Instant, op: OpId, outcome: Outcome<()>) {
        if self.orphans.complete(now, op, &outcome).is_some() {
            return;
        }
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Closing(mut closing) => {
                closing.revoked(now, op, &outcome);
                self.after_closing_progress(closing);
            }
            other => self.state = other,
        }
    }
}

/// Makes `key` hold `value` attached to `lease`, writing nothing when it
/// already does (so an intact key produces no watch event).
pub(crate) fn put_if_changed(key: crate::ids::Key, value: Vec<u8>, lease: LeaseId) -> Txn {
    Txn {
        compares: vec![
            Compare {
                key: key.clone(),
                prefix: false,
                op: CompareOp::Equal,
                target: CompareTarget::Lease(lease),
            },
            Compare {
                key: key.clone(),
                prefix: false,
                op: CompareOp::Equal,
                target: CompareTarget::Value(value.clone()),
            },
        ],
        success: Vec::new(),
        failure: vec![TxnOp::Put { key, value, lease }],
    }
}
