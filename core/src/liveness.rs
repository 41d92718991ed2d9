//! `Liveness`: one host's registration under a TTL lease, kept alive and
//! healed.
//!
//! Registration: grant a lease (TTL) -> put the host's key with that lease ->
//! open the keep-alive stream (the open sends the first keep-alive; its
//! reply confirms the lease) -> `Held`: a keep-alive every `refresh`.
//!
//! The machine keeps its own **lease deadline**, computed conservatively:
//! the send time of the latest acknowledged keep-alive plus the TTL that
//! reply returned, so it never believes a lease alive after etcd may have
//! dropped it.
//!
//! A keep-alive stream that closes or errors while the deadline has not
//! passed is reopened at once (then with fast backoff), and the host stays
//! `Registered`: the lease provably lives, so a broken TCP stream or one
//! etcd member going down is not a lost registration
//! ([`Event::KeepAliveInterrupted`] reports it). The lease is **lost** when
//! a reply carries TTL 0 or etcd says "lease not found" (revoked or
//! expired), or when the deadline passes with no live reply (a silent
//! partition, a stall, a stream that cannot be reopened).
//!
//! Healing after a loss: unless etcd said the lease is dead, the machine
//! first **resumes** it (the lease may outlive the conservative deadline):
//! reopen the keep-alive stream, and on a live reply make sure the key is
//! still attached with a compare-and-put that writes nothing when the key is
//! intact, so watchers see no Down/Up flap. If etcd answers that the lease
//! is gone, it grants a new lease at once and registers again. Failed attempts are paced by [`Backoff`]; a
//! partially made registration (lease granted, later step failed) has its
//! lease revoked.
//!
//! Stop revokes whatever lease exists (also one still being granted), then
//! the machine is `Stopped` and inert.

use std::collections::VecDeque;
use std::time::Duration;

use crate::backoff::{Backoff, BackoffConfig, BackoffConfigError, FailureClass};
use crate::ids::{Key, LeaseId, OpId};
use crate::outbox::Outbox;
use crate::outcome::{Failure, Outcome};
use crate::revokes::Revokes;
use crate::time::Instant;

/// Smallest lease TTL accepted.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// Largest lease TTL accepted.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// Smallest refresh interval accepted.
pub const MIN_REFRESH: Duration = Duration::from_millis(10);

pub use crate::StartPolicy;

/// Configuration of one [`Liveness`] machine.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct LivenessConfig {
    /// The host's key (`<prefix><host id>`).
    pub key: Key,
    /// The value stored at the key (the encoded metadata).
    pub value: Vec<u8>,
    /// Lease TTL asked for; granted TTLs may be longer (etcd's minimum).
    /// Whole seconds are asked for, rounding up.
    pub ttl: Duration,
    /// Keep-alive interval. Must be below `ttl`.
    pub refresh: Duration,
    /// Deadline of every request; past it the outcome is unknown.
    pub request_timeout: Duration,
    /// Pacing of heal attempts.
    pub backoff: BackoffConfig,
    /// Seed of the jitter PRNG.
    pub seed: u64,
    /// What a failed first registration does.
    pub start: StartPolicy,
}

impl LivenessConfig {
    /// A config with coord's defaults: TTL 10 s, refresh TTL/3, request
    /// timeout 5 s, default backoff, fail-fast start.
    pub fn new(key: Key, value: Vec<u8>, seed: u64) -> Self {
        LivenessConfig {
            key,
            value,
            ttl: Duration::from_secs(10),
            refresh: Duration::from_secs(10) / 3,
            request_timeout: Duration::from_secs(5),
            backoff: BackoffConfig::default(),
            seed,
            start: StartPolicy::FailFast,
        }
    }

    /// Checks every parameter; the machine refuses to start otherwise.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.ttl < MIN_TTL || self.ttl > MAX_TTL {
            return Err(ConfigError::TtlOutOfRange(self.ttl));
        }
        if self.refresh < MIN_REFRESH || self.refresh >= self.ttl {
            return Err(ConfigError::RefreshOutOfRange {
                refresh: self.refresh,
                ttl: self.ttl,
            });
        }
        if self.request_timeout < Duration::from_millis(10)
            || self.request_timeout > Duration::from_secs(300)
        {
            return Err(ConfigError::RequestTimeoutOutOfRange(self.request_timeout));
        }
        if self.key.0.is_empty() {
            return Err(ConfigError::EmptyKey);
        }
        self.backoff.validate()?;
        Ok(())
    }

    fn ttl_secs(&self) -> i64 {
        let secs = self.ttl.as_secs() + u64::from(self.ttl.subsec_nanos() > 0);
        i64::try_from(secs).unwrap_or(i64::MAX)
    }
}

/// Why a [`LivenessConfig`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// TTL must be between 1 s and one day.
    #[error("lease TTL must be between 1 s and 1 day, got {0:?}")]
    TtlOutOfRange(Duration),
    /// Refresh must be at least 10 ms and below the TTL.
    #[error("refresh must be at least 10 ms and below the TTL ({ttl:?}), got {refresh:?}")]
    RefreshOutOfRange {
        /// The refresh asked for.
        refresh: Duration,
        /// The TTL it must stay below.
        ttl: Duration,
    },
    /// Request timeout must be between 10 ms and 5 minutes.
    #[error("request timeout must be between 10 ms and 5 min, got {0:?}")]
    RequestTimeoutOutOfRange(Duration),
    /// The key is empty.
    #[error("the host key is empty")]
    EmptyKey,
    /// The backoff parameters are invalid.
    #[error(transparent)]
    Backoff(#[from] BackoffConfigError),
}

/// Misuse of the machine's API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    /// `Start` was given twice.
    #[error("liveness already started")]
    AlreadyStarted,
    /// `Start` after stop.
    #[error("liveness is stopped")]
    Stopped,
    /// The config is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// A reply to a unary request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Reply {
    /// A lease was granted with this id and TTL (seconds).
    Granted {
        /// The new lease.
        lease: LeaseId,
        /// TTL in seconds, as granted.
        ttl_secs: i64,
    },
    /// A put or revoke succeeded.
    Done,
}

/// Everything that can happen to the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Input {
    /// Begin registering.
    Start,
    /// Stop: revoke and become inert. Idempotent.
    Stop,
    /// `poll_timeout()` has passed.
    Timeout,
    /// A unary request (`Grant`, `PutKey`, `Revoke`) ended.
    Completed {
        /// The command's op.
        op: OpId,
        /// How it ended.
        outcome: Outcome<Reply>,
    },
    /// A keep-alive reply arrived on the stream opened by `stream`.
    KeepAliveReply {
        /// The `OpenKeepAlive` op that opened the stream.
        stream: OpId,
        /// Remaining TTL in seconds; 0 means the lease is gone.
        ttl_secs: i64,
    },
    /// The keep-alive stream failed to open, broke or ended.
    KeepAliveClosed {
        /// The `OpenKeepAlive` op that opened (or tried to open) it.
        stream: OpId,
        /// Why.
        failure: Failure,
    },
}

/// Work for the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Grant a lease; complete with `Reply::Granted`.
    Grant {
        /// Completion tag.
        op: OpId,
        /// TTL to ask for, seconds.
        ttl_secs: i64,
    },
    /// Attach `key` = `value` to `lease`, writing nothing if the key already
    /// has exactly that value and lease (compare-and-put); complete with
    /// `Reply::Done`.
    PutKey {
        /// Completion tag.
        op: OpId,
        /// The host key.
        key: Key,
        /// The encoded metadata.
        value: Vec<u8>,
        /// The lease to attach.
        lease: LeaseId,
    },
    /// Open a keep-alive stream for `lease`, sending the first keep-alive.
    /// Replies come as `KeepAliveReply{stream: op}`; failure to open or a
    /// break as `KeepAliveClosed{stream: op}`. Replies must always be
    /// drained.
    OpenKeepAlive {
        /// Stream tag.
        op: OpId,
        /// The lease.
        lease: LeaseId,
    },
    /// Send one keep-alive on an open stream.
    SendKeepAlive {
        /// The stream.
        stream: OpId,
        /// Its lease.
        lease: LeaseId,
    },
    /// Close the stream; later inputs tagged with it are ignored.
    CloseKeepAlive {
        /// The stream.
        stream: OpId,
    },
    /// Revoke a lease (deleting its keys); complete with `Reply::Done`.
    Revoke {
        /// Completion tag.
        op: OpId,
        /// The lease.
        lease: LeaseId,
    },
    /// The request `op` passed its deadline: drop it; its completion, if
    /// any, would be ignored.
    Abandon {
        /// The request.
        op: OpId,
    },
}

/// Why a held lease was declared lost.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LostReason {
    /// The keep-alive stream broke and could not be reopened before the
    /// lease's deadline.
    #[error("keep-alive stream broken past the lease deadline: {0}")]
    StreamClosed(Failure),
    /// etcd answered with TTL 0 or "lease not found": the lease was revoked
    /// or expired.
    #[error("lease revoked or expired")]
    LeaseExpired,
    /// No reply before the lease's deadline (silent partition, stall).
    #[error("no keep-alive reply before the lease deadline")]
    KeepAliveTimeout,
}

/// Why one registration attempt failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttemptFailure {
    /// etcd answered with a failure.
    #[error(transparent)]
    Etcd(Failure),
    /// No answer before the request deadline.
    #[error("no answer before the request deadline")]
    Timeout,
    /// The lease turned out dead (TTL 0 or not found).
    #[error("the lease is gone")]
    LeaseGone,
}

impl AttemptFailure {
    fn class(&self) -> FailureClass {
        match self {
            AttemptFailure::Etcd(f) => f.class(),
            AttemptFailure::Timeout => FailureClass::Slow,
            AttemptFailure::LeaseGone => FailureClass::Fast,
        }
    }
}

/// What stop did with the leases the machine held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevokeOutcome {
    /// No lease existed (never granted one, or every one known gone).
    NothingToRevoke,
    /// etcd confirmed the revoke of every lease the machine held (or that
    /// it no longer exists): the key is gone. Names the registration's
    /// lease (or else a partial one).
    Revoked(LeaseId),
    /// A revoke failed or timed out: its key (if any) stays until the lease
    /// expires, at most one TTL later. Names such a lease (the
    /// registration's if it is one).
    NotConfirmed(LeaseId),
}

/// Something the user should know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The first registration succeeded.
    Registered {
        /// The lease the key is attached to.
        lease: LeaseId,
        /// TTL granted.
        ttl: Duration,
    },
    /// The keep-alive stream broke while the lease is provably alive; it is
    /// being reopened and the host stays registered.
    KeepAliveInterrupted {
        /// The held lease.
        lease: LeaseId,
        /// What broke the stream.
        failure: Failure,
    },
    /// The held lease was declared lost; healing starts.
    Lost {
        /// The lease that was held.
        lease: LeaseId,
        /// Why.
        reason: LostReason,
    },
    /// An attempt failed (or a heal begins); the next one is at `next_at`.
    Healing {
        /// Failures since the last success.
        attempt: u32,
        /// When the next attempt starts.
        next_at: Instant,
        /// What failed, if an attempt did.
        last_failure: Option<AttemptFailure>,
    },
    /// Registered again after a loss.
    Reregistered {
        /// The lease the key is now attached to.
        lease: LeaseId,
        /// True if the old lease was resumed (no Down/Up for watchers).
        resumed: bool,
    },
    /// The first registration failed under [`StartPolicy::FailFast`]; a
    /// `Stopped` follows once any partial lease is revoked.
    RegistrationFailed {
        /// Why.
        reason: AttemptFailure,
    },
    /// Terminal: the machine is inert.
    Stopped {
        /// What happened to the lease.
        revoke: RevokeOutcome,
    },
}

/// What `poll` yields.
pub type Output = crate::outbox::Output<Command, Event>;

/// The user-visible state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LivenessState {
    /// Not started yet, or the first registration is in flight.
    Registering,
    /// The key exists under this lease, kept alive.
    Registered {
        /// The live lease.
        lease: LeaseId,
    },
    /// Not registered right now; re-registering.
    Healing {
        /// Failures since the last success.
        attempt: u32,
    },
    /// Stop is revoking the lease.
    Stopping,
    /// Inert.
    Stopped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lease {
    id: LeaseId,
    ttl: Duration,
}

/// An open keep-alive stream and what its replies proved.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stream {
    op: OpId,
    /// Send times of keep-alives not yet acknowledged, oldest first.
    unacked: VecDeque<Instant>,
    /// Last send time.
    last_send: Instant,
    /// The lease is surely alive until here (and maybe not after).
    expires_at: Instant,
    /// Live replies received on this stream.
    replies: u64,
}

impl Stream {
    /// A stream just opened at `now` (the open sends the first keep-alive),
    /// for a lease known alive until `expires_at`.
    fn opened(op: OpId, now: Instant, expires_at: Instant) -> Self {
        Stream {
            op,
            unacked: VecDeque::from([now]),
            last_send: now,
            expires_at,
            replies: 0,
        }
    }
}

/// The keep-alive link of a held lease.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Link {
    /// A stream is open (or reopened and awaiting its first reply).
    Up(Stream),
    /// The stream broke; reopen at `retry_at` unless the deadline passes.
    Down {
        retry_at: Instant,
        expires_at: Instant,
        failure: Failure,
    },
}

impl Link {
    fn expires_at(&self) -> Instant {
        match self {
            Link::Up(s) => s.expires_at,
            Link::Down { expires_at, .. } => *expires_at,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// Fresh registration: waiting for the grant.
    Grant,
    /// Waiting for the put. `stream` is set when resuming (already open and
    /// confirmed), unset in a fresh registration.
    Put {
        lease: Lease,
        stream: Option<Stream>,
    },
    /// Waiting for the first keep-alive reply on a new stream.
    /// `resuming`: reopening a lost lease (then a put follows) rather than
    /// finishing a fresh registration.
    Open {
        lease: Lease,
        stream: Stream,
        resuming: bool,
    },
}

/// A lost lease that etcd has not said is dead: worth resuming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Resumable {
    lease: Lease,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Idle,
    Registering {
        op: OpId,
        deadline: Instant,
        step: Step,
        first: bool,
    },
    Held {
        lease: Lease,
        link: Link,
        next_send: Instant,
    },
    Waiting {
        next_at: Instant,
        resume: Option<Resumable>,
        first: bool,
    },
    Stopping(Stopping),
    Stopped,
}

/// What stop still waits for: the revoke of every lease this machine may
/// hold (the registration's, partial ones not yet confirmed revoked, one
/// still being granted), each retried until `deadline`; then whatever is
/// left is given up and left to expire.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stopping {
    deadline: Instant,
    revokes: Revokes,
    /// The registration's lease, named by the outcome.
    primary: Option<LeaseId>,
    /// The first lease confirmed revoked.
    confirmed: Option<LeaseId>,
    /// A grant in flight at stop: its lease is revoked when it arrives.
    pending_grant: Option<OpId>,
}

impl Stopping {
    fn done(&self) -> bool {
        self.revokes.is_empty() && self.pending_grant.is_none()
    }

    fn next_deadline(&self) -> Instant {
        self.revokes
            .next_deadline()
            .map_or(self.deadline, |d| d.min(self.deadline))
    }

    /// The outcome once every revoke is confirmed.
    fn all_revoked(&self) -> RevokeOutcome {
        match self.primary.or(self.confirmed) {
            Some(lease) => RevokeOutcome::Revoked(lease),
            None => RevokeOutcome::NothingToRevoke,
        }
    }
}

/// The liveness state machine. See the module docs for the protocol.
#[derive(Debug)]
pub struct Liveness {
    config: LivenessConfig,
    state: State,
    backoff: Backoff,
    out: Outbox<Command, Event>,
    /// Leases of failed partial registrations whose revoke etcd has not
    /// confirmed yet: retried in the background, and by stop.
    orphans: Revokes,
}

impl Liveness {
    /// A machine for `config`. Nothing happens until `Input::Start`.
    pub fn new(config: LivenessConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let backoff = Backoff::new(config.backoff.clone(), config.seed);
        Ok(Liveness {
            config,
            state: State::Idle,
            backoff,
            out: Outbox::new(),
            orphans: Revokes::default(),
        })
    }

    /// The config in force.
    pub fn config(&self) -> &LivenessConfig {
        &self.config
    }

    /// The lease the key is attached to, only while `Registered`.
    pub fn lease(&self) -> Option<LeaseId> {
        match &self.state {
            State::Held { lease, .. } => Some(lease.id),
            _ => None,
        }
    }

    /// The user-visible state.
    pub fn state(&self) -> LivenessState {
        match &self.state {
            State::Idle => LivenessState::Registering,
            State::Registering { first: true, .. } => LivenessState::Registering,
            State::Registering { first: false, .. } | State::Waiting { .. } => {
                LivenessState::Healing {
                    attempt: self.backoff.attempt(),
                }
            }
            State::Held { lease, .. } => LivenessState::Registered { lease: lease.id },
            State::Stopping(_) => LivenessState::Stopping,
            State::Stopped => LivenessState::Stopped,
        }
    }

    /// True once `Stopped` (terminal).
    pub fn is_stopped(&self) -> bool {
        matches!(self.state, State::Stopped)
    }

    /// The next command or event, if any. Drain it after every `handle`.
    #[must_use]
    pub fn poll(&mut self) -> Option<Output> {
        self.out.pop()
    }

    /// The next deadline; call `handle(now, Input::Timeout)` once it passes.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let state = self.state_deadline();
        match self.orphans.next_deadline() {
            Some(o) => Some(state.map_or(o, |s| s.min(o))),
            None => state,
        }
    }

    fn state_deadline(&self) -> Option<Instant> {
        match &self.state {
            State::Idle | State::Stopped => None,
            State::Registering { deadline, .. } => Some(*deadline),
            State::Held {
                link, next_send, ..
            } => Some(match link {
                Link::Up(s) => {
                    let silent_at = s
                        .unacked
                        .front()
                        .map(|sent| *sent + self.config.request_timeout);
                    (*next_send)
                        .min(s.expires_at)
                        .min(silent_at.unwrap_or(s.expires_at))
                }
                Link::Down {
                    retry_at,
                    expires_at,
                    ..
                } => (*retry_at).min(*expires_at),
            }),
            State::Waiting { next_at, .. } => Some(*next_at),
            State::Stopping(stopping) => Some(stopping.next_deadline()),
        }
    }

    /// Feeds one input. Only `Start` in the wrong state is an error; etcd
    /// failures arrive as inputs and are handled, stale completions ignored.
    pub fn handle(&mut self, now: Instant, input: Input) -> Result<(), UsageError> {
        match input {
            Input::Start => self.on_start(now),
            Input::Stop => {
                self.on_stop(now);
                Ok(())
            }
            Input::Timeout => {
                self.on_timeout(now);
                Ok(())
            }
            Input::Completed { op, outcome } => {
                self.on_completed(now, op, outcome);
                Ok(())
            }
            Input::KeepAliveReply { stream, ttl_secs } => {
                self.on_reply(now, stream, ttl_secs);
                Ok(())
            }
            Input::KeepAliveClosed { stream, failure } => {
                self.on_closed(now, stream, failure);
                Ok(())
            }
        }
    }

    fn on_start(&mut self, now: Instant) -> Result<(), UsageError> {
        match self.state {
            State::Idle => {
                self.begin_grant(now, true);
                Ok(())
            }
            State::Stopping(_) | State::Stopped => Err(UsageError::Stopped),
            _ => Err(UsageError::AlreadyStarted),
        }
    }

    fn begin_grant(&mut self, now: Instant, first: bool) {
        let op = self.out.op();
        let ttl_secs = self.config.ttl_secs();
        self.out.cmd(Command::Grant { op, ttl_secs });
        self.state = State::Registering {
            op,
            deadline: now + self.config.request_timeout,
            step: Step::Grant,
            first,
        };
    }

    fn begin_put(&mut self, now: Instant, lease: Lease, stream: Option<Stream>, first: bool) {
        let op = self.out.op();
        self.out.cmd(Command::PutKey {
            op,
            key: self.config.key.clone(),
            value: self.config.value.clone(),
            lease: lease.id,
        });
        self.state = State::Registering {
            op,
            deadline: now + self.config.request_timeout,
            step: Step::Put { lease, stream },
            first,
        };
    }

    fn begin_open(&mut self, now: Instant, lease: Lease, resuming: bool, first: bool) {
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
                resuming,
            },
            first,
        };
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

    /// Opens a new stream for a held lease whose stream broke.
    fn reopen(&mut self, now: Instant, lease: Lease, expires_at: Instant) {
        let op = self.out.op();
        self.out.cmd(Command::OpenKeepAlive {
            op,
            lease: lease.id,
        });
        self.state = State::Held {
            lease,
            link: Link::Up(Stream::opened(op, now, expires_at)),
            next_send: now + self.config.refresh,
        };
    }

    fn on_timeout(&mut self, now: Instant) {
        let timeout = self.config.request_timeout;
        self.orphans.tick(&mut self.out, now, timeout, None);
        match std::mem::replace(&mut self.state, State::Stopped) {
            State::Registering {
                op,
                deadline,
                step,
                first,
            } if now >= deadline => {
                self.out.cmd(Command::Abandon { op });
                let (revoke, resume) = self.unwind_step(step);
                self.attempt_failed(now, AttemptFailure::Timeout, revoke, resume, first);
            }
            State::Held {
                lease,
                link,
                next_send,
            } => match link {
                link if now >= link.expires_at() => {
                    let reason = match link {
                        Link::Up(s) => {
                            self.out.cmd(Command::CloseKeepAlive { stream: s.op });
                            LostReason::KeepAliveTimeout
                        }
                        Link::Down { failure, .. } => LostReason::StreamClosed(failure),
                    };
                    self.lose(now, lease, reason);
                }
                Link::Up(stream)
                    if stream
                        .unacked
                        .front()
                        .is_some_and(|sent| now >= *sent + self.config.request_timeout) =>
                {
                    // A keep-alive unanswered for a whole request timeout:
                    // the stream is silently broken (a stalled member, a
                    // blackholed connection).
                    let failure = Failure::StreamClosed("keep-alive unanswered".into());
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
            },
            State::Waiting {
                next_at,
                resume,
                first,
            } if now >= next_at => match resume {
                Some(r) => self.begin_open(now, r.lease, true, first),
                None => self.begin_grant(now, first),
            },
            State::Stopping(st) if now >= st.deadline => {
                // Whatever is still outstanding is given up: an unconfirmed
                // revoke leaves the lease to expire by its TTL.
                let all_revoked = st.all_revoked();
                let primary = st.primary.filter(|p| st.revokes.contains(*p));
                let left = st.revokes.abandon(&mut self.out);
                if let Some(op) = st.pending_grant {
                    self.out.cmd(Command::Abandon { op });
                }
                let result = match primary.or(left.first().copied()) {
                    Some(lease) => RevokeOutcome::NotConfirmed(lease),
                    None => all_revoked,
                };
                self.finish_stop(result);
            }
            State::Stopping(mut st) => {
                let cap = Some(st.deadline);
                st.revokes.tick(&mut self.out, now, timeout, cap);
                self.state = State::Stopping(st);
            }
            other => self.state = other,
        }
    }

    /// Tears down a failed step: closes its stream; returns the lease to
    /// revoke (a fresh, partial registration) and what may still be resumed.
    fn unwind_step(&mut self, step: Step) -> (Option<LeaseId>, Option<Resumable>) {
        match step {
            Step::Grant => (None, None),
            Step::Put {
                lease,
                stream: None,
            } => (Some(lease.id), None),
            Step::Put {
                lease,
                stream: Some(s),
            } => {
                self.out.cmd(Command::CloseKeepAlive { stream: s.op });
                (None, Some(Resumable { lease }))
            }
            Step::Open {
                lease,
                stream,
                resuming,
            } => {
                self.out.cmd(Command::CloseKeepAlive { stream: stream.op });
                if resuming {
                    (None, Some(Resumable { lease }))
                } else {
                    (Some(lease.id), None)
                }
            }
        }
    }

    fn attempt_failed(
        &mut self,
        now: Instant,
        reason: AttemptFailure,
        revoke: Option<LeaseId>,
        resume: Option<Resumable>,
        first: bool,
    ) {
        if first && self.config.start == StartPolicy::FailFast {
            self.out.event(Event::RegistrationFailed { reason });
            self.begin_stopping(now, revoke, None);
            return;
        }
        if let Some(lease) = revoke {
            // Retried until etcd confirms: if it is lost, the lease (maybe
            // with the key on it) would outlive a later stop.
            let deadline = now + self.config.request_timeout;
            self.orphans.issue(&mut self.out, lease, deadline);
        }
        let delay = self.backoff.next_delay(reason.class());
        let next_at = now + delay;
        self.out.event(Event::Healing {
            attempt: self.backoff.attempt(),
            next_at,
            last_failure: Some(reason),
        });
        self.state = State::Waiting {
            next_at,
            resume,
            first,
        };
    }

    /// The held lease is lost (its stream already closed): report and
    /// schedule the first heal attempt, a resume unless etcd said the lease
    /// is dead.
    fn lose(&mut self, now: Instant, lease: Lease, reason: LostReason) {
        let resume = match reason {
            LostReason::LeaseExpired => None,
            LostReason::StreamClosed(_) | LostReason::KeepAliveTimeout => Some(Resumable { lease }),
        };
        let class = match &reason {
            LostReason::StreamClosed(f) => f.class(),
            LostReason::LeaseExpired => FailureClass::Fast,
            LostReason::KeepAliveTimeout => FailureClass::Slow,
        };
        self.out.event(Event::Lost {
            lease: lease.id,
            reason,
        });
        let next_at = now + self.backoff.next_delay(class);
        self.out.event(Event::Healing {
            attempt: self.backoff.attempt(),
            next_at,
            last_failure: None,
        });
        self.state = State::Waiting {
            next_at,
            resume,
            first: false,
        };
    }

    fn on_completed(&mut self, now: Instant, op: OpId, outcome: Outcome<Reply>) {
        if self.orphans.complete(now, op, &outcome).is_some() {
            return;
        }
        match std::mem::replace(&mut self.state, State::Stopped) {
            State::Registering {
                op: want,
                deadline,
                step,
                first,
            } if want == op => self.on_step_done(now, step, first, outcome, deadline, op),
            State::Stopping(st) => self.on_stopping_done(now, op, outcome, st),
            other => self.state = other,
        }
    }

    fn on_step_done(
        &mut self,
        now: Instant,
        step: Step,
        first: bool,
        outcome: Outcome<Reply>,
        deadline: Instant,
        op: OpId,
    ) {
        match (step, outcome) {
            (Step::Grant, Outcome::Ok(Reply::Granted { lease, ttl_secs })) if ttl_secs > 0 => {
                let ttl = Duration::from_secs(u64::try_from(ttl_secs).unwrap_or(0));
                self.begin_put(now, Lease { id: lease, ttl }, None, first);
            }
            (
                Step::Put {
                    lease,
                    stream: None,
                },
                Outcome::Ok(Reply::Done),
            ) => {
                self.begin_open(now, lease, false, first);
            }
            (
                Step::Put {
                    lease,
                    stream: Some(stream),
                },
                Outcome::Ok(Reply::Done),
            ) => {
                self.hold(lease, stream);
                self.out.event(Event::Reregistered {
                    lease: lease.id,
                    resumed: true,
                });
            }
            (step @ (Step::Grant | Step::Put { .. }), Outcome::Ok(_)) => {
                // A reply of the wrong shape: a driver bug or a bad grant
                // (TTL <= 0). Treat as a failed attempt.
                let (revoke, resume) = self.unwind_step(step);
                let why = AttemptFailure::Etcd(Failure::Other("unexpected reply".into()));
                self.attempt_failed(now, why, revoke, resume, first);
            }
            (step, Outcome::Err(failure)) => {
                let lease_gone = failure == Failure::LeaseNotFound;
                let (revoke, resume) = self.unwind_step(step);
                let resume = if lease_gone { None } else { resume };
                let why = if lease_gone {
                    AttemptFailure::LeaseGone
                } else {
                    AttemptFailure::Etcd(failure)
                };
                self.attempt_failed(now, why, revoke, resume, first);
            }
            (step, Outcome::Unknown) => {
                let (revoke, resume) = self.unwind_step(step);
                self.attempt_failed(now, AttemptFailure::Timeout, revoke, resume, first);
            }
            // Open steps complete through keep-alive inputs, not here.
            (step @ Step::Open { .. }, Outcome::Ok(_)) => {
                self.state = State::Registering {
                    op,
                    deadline,
                    step,
                    first,
                };
            }
        }
    }

    fn on_reply(&mut self, now: Instant, stream_op: OpId, ttl_secs: i64) {
        match std::mem::replace(&mut self.state, State::Stopped) {
            State::Registering {
                step:
                    Step::Open {
                        lease,
                        mut stream,
                        resuming,
                    },
                first,
                ..
            } if stream.op == stream_op => {
                if ttl_secs <= 0 {
                    self.out.cmd(Command::CloseKeepAlive { stream: stream.op });
                    if resuming {
                        // The lease died while we were away: register anew
                        // at once, this is a definite answer.
                        self.begin_grant(now, first);
                    } else {
                        let why = AttemptFailure::LeaseGone;
                        self.attempt_failed(now, why, Some(lease.id), None, first);
                    }
                    return;
                }
                stream.ack(ttl_secs);
                if resuming {
                    self.begin_put(now, lease, Some(stream), first);
                } else {
                    self.hold(lease, stream);
                    self.out.event(if first {
                        Event::Registered {
                            lease: lease.id,
                            ttl: lease.ttl,
                        }
                    } else {
                        Event::Reregistered {
                            lease: lease.id,
                            resumed: false,
                        }
                    });
                }
            }
            State::Registering {
                op,
                deadline,
                step:
                    Step::Put {
                        lease,
                        stream: Some(mut stream),
                    },
                first,
            } if stream.op == stream_op => {
                // A late reply while the resume's put is in flight.
                if ttl_secs > 0 {
                    stream.ack(ttl_secs);
                }
                self.state = State::Registering {
                    op,
                    deadline,
                    step: Step::Put {
                        lease,
                        stream: Some(stream),
                    },
                    first,
                };
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
                    if stream.replies == 0 {
                        // A reopened stream is confirmed: the link healed.
                        self.backoff.reset();
                    }
                    stream.ack(ttl_secs);
                    self.state = State::Held {
                        lease,
                        link: Link::Up(stream),
                        next_send,
                    };
                }
            }
            other => self.state = other,
        }
    }

    fn on_closed(&mut self, now: Instant, stream_op: OpId, failure: Failure) {
        match std::mem::replace(&mut self.state, State::Stopped) {
            State::Registering {
                step:
                    Step::Open {
                        lease,
                        stream,
                        resuming,
                    },
                first,
                ..
            } if stream.op == stream_op => {
                // CloseKeepAlive for a stream the driver already closed is
                // harmless and keeps the teardown in one place.
                let step = Step::Open {
                    lease,
                    stream,
                    resuming,
                };
                let lease_gone = failure == Failure::LeaseNotFound;
                let (revoke, resume) = self.unwind_step(step);
                if lease_gone && resuming {
                    self.begin_grant(now, first);
                } else {
                    let why = if lease_gone {
                        AttemptFailure::LeaseGone
                    } else {
                        AttemptFailure::Etcd(failure)
                    };
                    self.attempt_failed(now, why, revoke, resume, first);
                }
            }
            State::Registering {
                op,
                step:
                    Step::Put {
                        lease,
                        stream: Some(stream),
                    },
                first,
                ..
            } if stream.op == stream_op => {
                // Holding on would leave a dead stream: fail this attempt.
                self.out.cmd(Command::Abandon { op });
                let step = Step::Put {
                    lease,
                    stream: Some(stream),
                };
                let (revoke, resume) = self.unwind_step(step);
                let resume = if failure == Failure::LeaseNotFound {
                    None
                } else {
                    resume
                };
                self.attempt_failed(now, AttemptFailure::Etcd(failure), revoke, resume, first);
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
    fn stream_broke(
        &mut self,
        now: Instant,
        lease: Lease,
        stream: Stream,
        failure: Failure,
        next_send: Instant,
    ) {
        {
            self.out.cmd(Command::CloseKeepAlive { stream: stream.op });
            if failure == Failure::LeaseNotFound {
                self.lose(now, lease, LostReason::LeaseExpired);
            } else if now >= stream.expires_at {
                self.lose(now, lease, LostReason::StreamClosed(failure));
            } else if stream.replies > 0 {
                // A working stream broke: reopen at once.
                self.out.event(Event::KeepAliveInterrupted {
                    lease: lease.id,
                    failure,
                });
                self.reopen(now, lease, stream.expires_at);
            } else {
                // A reopened stream failed too: pace the next try.
                let retry_at = now + self.backoff.next_delay(failure.class());
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

    fn on_stop(&mut self, now: Instant) {
        match std::mem::replace(&mut self.state, State::Stopped) {
            State::Idle => self.begin_stopping(now, None, None),
            State::Registering { op, step, .. } => match step {
                Step::Grant => self.begin_stopping(now, None, Some(op)),
                Step::Put { lease, stream } => {
                    self.out.cmd(Command::Abandon { op });
                    if let Some(s) = stream {
                        self.out.cmd(Command::CloseKeepAlive { stream: s.op });
                    }
                    self.begin_stopping(now, Some(lease.id), None);
                }
                Step::Open { lease, stream, .. } => {
                    self.out.cmd(Command::CloseKeepAlive { stream: stream.op });
                    self.begin_stopping(now, Some(lease.id), None);
                }
            },
            State::Held { lease, link, .. } => {
                if let Link::Up(s) = link {
                    self.out.cmd(Command::CloseKeepAlive { stream: s.op });
                }
                self.begin_stopping(now, Some(lease.id), None);
            }
            State::Waiting { resume, .. } => {
                self.begin_stopping(now, resume.map(|r| r.lease.id), None)
            }
            // Idempotent: a second stop changes nothing.
            other @ (State::Stopping(_) | State::Stopped) => self.state = other,
        }
    }

    fn begin_stopping(
        &mut self,
        now: Instant,
        lease: Option<LeaseId>,
        pending_grant: Option<OpId>,
    ) {
        let deadline = now + self.config.request_timeout;
        let mut revokes = Revokes::default();
        for l in lease
            .into_iter()
            .chain(self.orphans.take_leases(&mut self.out))
        {
            revokes.issue(&mut self.out, l, deadline);
        }
        let st = Stopping {
            deadline,
            revokes,
            primary: lease,
            confirmed: None,
            pending_grant,
        };
        if st.done() {
            self.finish_stop(st.all_revoked());
        } else {
            self.state = State::Stopping(st);
        }
    }

    fn on_stopping_done(
        &mut self,
        now: Instant,
        op: OpId,
        outcome: Outcome<Reply>,
        mut st: Stopping,
    ) {
        if st.pending_grant == Some(op) {
            st.pending_grant = None;
            if let Outcome::Ok(Reply::Granted { lease, .. }) = outcome {
                st.revokes.issue(&mut self.out, lease, st.deadline);
            }
        } else if let Some((lease, true)) = st.revokes.complete(now, op, &outcome) {
            st.confirmed.get_or_insert(lease);
        }
        if st.done() {
            self.finish_stop(st.all_revoked());
        } else {
            self.state = State::Stopping(st);
        }
    }

    fn finish_stop(&mut self, revoke: RevokeOutcome) {
        self.state = State::Stopped;
        self.out.event(Event::Stopped { revoke });
    }
}

impl Stream {
    /// Records a live reply: the oldest unacknowledged send plus the TTL is
    /// a time the lease surely lives to. An unsolicited reply (nothing
    /// unacknowledged) proves nothing about timing and is not counted.
    fn ack(&mut self, ttl_secs: i64) {
        self.replies += 1;
        if let Some(sent) = self.unacked.pop_front() {
            let ttl = Duration::from_secs(u64::try_from(ttl_secs).unwrap_or(0));
            self.expires_at = self.expires_at.max(sent + ttl);
        }
    }
}

#[cfg(test)]
#[path = "liveness_tests.rs"]
mod tests;
