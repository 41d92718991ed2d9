//! The keep-alive side of the engine: replies and closes of its streams,
//! the held lease's timers (sends, silence, deadline), and reopening a
//! broken stream while the lease provably lives.

use super::*;

/// A timer judged this long after it came was not judged by a running
/// process: the run loop wakes for a deadline within milliseconds of it,
/// however busy it is.
const OVERSLEPT: Duration = Duration::from_secs(1);

impl LeaseEngine {
    /// Opens a new stream for a held lease whose stream broke.
    pub(super) fn reopen(&mut self, now: Instant, lease: Lease, expires_at: Instant) {
        let op = self.out.op();
        self.out.cmd(Command::OpenKeepAlive {
            op,
            lease: lease.id,
        });
        self.state = State::Held {
            lease,
            link: Link::Up(Stream::reopened(op, now, expires_at)),
            next_send: now + self.config.refresh,
        };
    }

    /// The held lease's timers, `soonest` being the first of them
    /// ([`held_deadline`](Self::held_deadline)) as they were before this
    /// timeout.
    pub(super) fn held_timeout(
        &mut self,
        now: Instant,
        lease: Lease,
        link: Link,
        next_send: Instant,
        soonest: Instant,
    ) {
        match link {
            link if now >= link.expires_at() => {
                // The first of the lease's timers (a keep-alive to send, a
                // reply awaited, the deadline itself) judged [`OVERSLEPT`]
                // or more after it came: this process was not running (a
                // GC pause, SIGSTOP) when its lease's deadline came or
                // before, so the silence since proves nothing about etcd,
                // and the failures before (a backoff raised by an outage
                // it was still healing from) say nothing of etcd now. The
                // heal starts from the first attempt, as after a restart;
                // failures that follow grow the delay again.
                let overslept = now >= soonest + OVERSLEPT;
                let (reason, pace) = match link {
                    Link::Up(s) => {
                        self.out.cmd(Command::CloseKeepAlive { stream: s.op });
                        // Slow only if the stream proved etcd silent (a
                        // keep-alive unanswered for a request timeout); a
                        // stream reopened just before the deadline proved
                        // nothing, and etcd may have just come back.
                        let silent = s
                            .silent_at(lease.reply_wait(self.config.request_timeout))
                            .is_some_and(|at| now >= at);
                        let class = if overslept {
                            self.backoff.reset();
                            FailureClass::Fast
                        } else if silent {
                            FailureClass::Slow
                        } else {
                            FailureClass::Fast
                        };
                        (LostReason::KeepAliveTimeout, Pace::Draw(class))
                    }
                    // The reopen that failed drew its delay already: the
                    // deadline passing is no new failure, and does not push
                    // the retry later.
                    Link::Down {
                        failure, retry_at, ..
                    } => (LostReason::StreamClosed(failure), Pace::Until(retry_at)),
                };
                self.lose_as(now, lease, reason, pace);
            }
            Link::Up(stream)
                if stream
                    .silent_at(lease.reply_wait(self.config.request_timeout))
                    .is_some_and(|at| now >= at) =>
            {
                // A keep-alive unanswered for a whole request timeout (or
                // the longer wait of a proxied lease): the stream is
                // silently broken (a stalled member, a blackholed
                // connection).
                let failure = Failure::StreamClosed("keep-alive unanswered".into());
                self.silences += 1;
                self.stream_broke(now, lease, stream, failure, next_send);
            }
            Link::Up(mut stream) if now >= next_send => {
                self.out.cmd(Command::SendKeepAlive {
                    stream: stream.op,
                    lease: lease.id,
                });
                stream.unacked.push_back(now);
                stream.last_send = now;
                self.state = State::Held {
                    lease,
                    link: Link::Up(stream),
                    next_send: now + self.config.refresh,
                };
            }
            Link::Down {
                retry_at,
                expires_at,
                ..
            } if now >= retry_at => self.reopen(now, lease, expires_at),
            link => {
                self.state = State::Held {
                    lease,
                    link,
                    next_send,
                }
            }
        }
    }

    pub(super) fn on_reply(&mut self, now: Instant, stream_op: OpId, ttl_secs: i64) {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Registering {
                step: Step::Open { lease, mut stream },
                attempt,
                ..
            } if stream.op == stream_op => {
                if ttl_secs <= 0 {
                    self.out.cmd(Command::CloseKeepAlive { stream: stream.op });
                    match attempt {
                        // The lease died while we were away: register anew
                        // at once, this is a definite answer.
                        Attempt::Resume => self.begin_grant(now, Attempt::Fresh),
                        Attempt::First | Attempt::Fresh => {
                            let why = AttemptFailure::LeaseGone;
                            self.attempt_failed(now, why, Some(lease.id), None, attempt);
                        }
                    }
                    return;
                }
                stream.ack(ttl_secs);
                match attempt {
                    Attempt::Resume => self.begin_attach(now, lease, Some(stream), attempt),
                    Attempt::First | Attempt::Fresh => self.registered(now, lease, stream, attempt),
                }
            }
            State::Held {
                lease,
                link: Link::Up(mut stream),
                next_send,
            } if stream.op == stream_op => {
                if ttl_secs <= 0 {
                    self.out.cmd(Command::CloseKeepAlive { stream: stream.op });
                    self.lose(now, lease, LostReason::LeaseExpired);
                } else {
                    let worked = stream.works();
                    stream.ack(ttl_secs);
                    if stream.works() && !worked {
                        // A reopened stream is confirmed: the link healed.
                        self.backoff.reset();
                    }
                    self.state = State::Held {
                        lease,
                        link: Link::Up(stream),
                        next_send,
                    };
                }
            }
            // Any other reply changes nothing. That includes a reply on a
            // resume's stream while its put is in flight: the stream
            // answered its one keep-alive before the put went out (its
            // proof, the only one it needs), and the put's answer says
            // whether the lease lives.
            other => self.state = other,
        }
    }

    pub(super) fn on_stream_closed(&mut self, now: Instant, stream_op: OpId, failure: Failure) {
        let lease_gone = failure == Failure::LeaseNotFound;
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Registering {
                step: Step::Open { lease, stream },
                attempt,
                ..
            } if stream.op == stream_op => {
                // CloseKeepAlive for a stream the driver already closed is
                // harmless and keeps the teardown in one place.
                let (revoke, resume) = self.unwind_step(Step::Open { lease, stream }, attempt);
                if lease_gone && attempt == Attempt::Resume {
                    self.begin_grant(now, Attempt::Fresh);
                } else {
                    let why = if lease_gone {
                        AttemptFailure::LeaseGone
                    } else {
                        AttemptFailure::Etcd(failure)
                    };
                    self.attempt_failed(now, why, revoke, resume, attempt);
                }
            }
            State::Registering {
                op,
                step:
                    Step::Attach {
                        lease,
                        stream: Some(stream),
                    },
                attempt,
                ..
            } if stream.op == stream_op => {
                // Holding on would leave a dead stream: fail this attempt.
                self.out.cmd(Command::Abandon { op });
                let step = Step::Attach {
                    lease,
                    stream: Some(stream),
                };
                let (revoke, resume) = self.unwind_step(step, attempt);
                let resume = resume.filter(|_| !lease_gone);
                self.attempt_failed(now, AttemptFailure::Etcd(failure), revoke, resume, attempt);
            }
            State::Held {
                lease,
                link: Link::Up(stream),
                next_send,
            } if stream.op == stream_op => {
                self.stream_broke(now, lease, stream, failure, next_send)
            }
            other => self.state = other,
        }
    }

    /// The stream of a held lease broke (closed, errored or went silent).
    pub(super) fn stream_broke(
        &mut self,
        now: Instant,
        lease: Lease,
        stream: Stream,
        failure: Failure,
        next_send: Instant,
    ) {
        self.out.cmd(Command::CloseKeepAlive { stream: stream.op });
        if failure == Failure::LeaseNotFound {
            self.lose(now, lease, LostReason::LeaseExpired);
        } else if now >= stream.expires_at {
            self.lose(now, lease, LostReason::StreamClosed(failure));
        } else if stream.works() {
            // A working stream broke: reopen at once.
            self.out.event(Event::KeepAliveInterrupted {
                lease: lease.id,
                failure,
            });
            self.reopen(now, lease, stream.expires_at);
        } else {
            // A reopened stream failed too, before it proved itself (even
            // if it answered its opening keep-alive): pace the next try, so
            // that streams that keep breaking back off.
            if stream.replies > 0 {
                self.out.event(Event::KeepAliveInterrupted {
                    lease: lease.id,
                    failure: failure.clone(),
                });
            }
            let retry_at = self.backoff.retry_at(now, failure.class());
            self.state = State::Held {
                lease,
                link: Link::Down {
                    retry_at,
                    expires_at: stream.expires_at,
                    failure,
                },
                next_send,
            };
        }
    }
}
