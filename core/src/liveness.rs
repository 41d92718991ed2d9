//! `Liveness`: one host's registration, a lease with the host's key
//! attached, kept alive and healed by the [lease engine](crate::lease).
//!
//! Registration: grant a lease (TTL) -> put the host's key with that lease
//! -> open the keep-alive stream -> `Registered`. A loss is healed by first
//! **resuming** the same lease (reopen the keep-alive, then a
//! compare-and-put that writes nothing when the key is intact, so watchers
//! see no Down/Up flap), and by a new lease when etcd says the old one is
//! dead. Close revokes every lease the machine may hold, then it is
//! `Closed` and inert. See [`crate::lease`] for the keep-alive deadline,
//! broken streams, backoff and revokes.

use std::time::Duration;

use crate::census::Census;
pub use crate::census::FleetConfig;
use crate::ids::{Key, LeaseId};
use crate::lease::{Attach, LeaseConfig, LeaseEngine};
use crate::time::Instant;
pub use crate::StartPolicy;

pub use crate::lease::{
    ConfigError, Event, Input, LeaseState as LivenessState, LostReason, OnLoss, Output,
    RevokeOutcome, StartError, MAX_TTL, MIN_REFRESH, MIN_TTL,
};
pub use crate::outcome::{AttemptFailure, Retry};

/// Configuration of one [`Liveness`] machine.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct LivenessConfig {
    /// The host's key (`<prefix><host id>`).
    pub key: Key,
    /// The value stored at the key (the encoded metadata).
    pub value: Vec<u8>,
    /// The lease the key is attached to.
    pub lease: LeaseConfig,
    /// What a lost lease becomes: resumed (the default; the key stays and
    /// watchers see no flap when etcd still has the lease) or replaced by
    /// a new one (go-coord's way, for comparisons).
    pub on_loss: OnLoss,
    /// The fleet this host returns with after an outage of etcd (see
    /// [`crate::census`] and [`Slot`](crate::Slot)); none: its retries
    /// keep their own jittered pace.
    pub fleet: Option<FleetConfig>,
}

impl LivenessConfig {
    /// A config with coord's defaults: the lease's (see
    /// [`LeaseConfig::new`]), resumed on loss, no fleet.
    pub fn new(key: Key, value: Vec<u8>, seed: u64) -> Self {
        LivenessConfig {
            key,
            value,
            lease: LeaseConfig::new(seed),
            on_loss: OnLoss::Resume,
            fleet: None,
        }
    }

    /// Checks every parameter; the machine refuses to start otherwise.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.engine().map(|_| ())
    }

    /// The lease engine of this config: its key attached.
    fn engine(&self) -> Result<LeaseEngine, ConfigError> {
        let attach = Attach {
            key: self.key.clone(),
            value: self.value.clone(),
        };
        self.validate_fleet()?;
        LeaseEngine::new(self.lease.clone(), Some(attach), self.on_loss, 0)
    }

    /// Checks the fleet's parameters (see [`ConfigError::FleetOutOfRange`]).
    fn validate_fleet(&self) -> Result<(), ConfigError> {
        match &self.fleet {
            Some(f)
                if f.prefix.0.is_empty()
                    || f.spacing < Duration::from_millis(1)
                    || f.spacing > Duration::from_secs(1)
                    || f.every < Duration::from_secs(1)
                    || f.every > Duration::from_secs(86_400) =>
            {
                Err(ConfigError::FleetOutOfRange {
                    spacing: f.spacing,
                    every: f.every,
                })
            }
            _ => Ok(()),
        }
    }
}

/// The liveness state machine. See the module docs.
#[derive(Debug)]
pub struct Liveness {
    config: LivenessConfig,
    engine: LeaseEngine,
    census: Option<Census>,
}

impl Liveness {
    /// A machine for `config`. Nothing happens until `Input::Start`.
    pub fn new(config: LivenessConfig) -> Result<Self, ConfigError> {
        let engine = config.engine()?;
        let census = config.fleet.clone().map(|fleet| {
            Census::new(
                fleet,
                config.key.clone(),
                config.lease.ttl / 2,
                config.lease.request_timeout,
                config.lease.seed,
                1,
            )
        });
        Ok(Liveness {
            config,
            engine,
            census,
        })
    }

    /// This host's place on its fleet's return schedule, once a census
    /// has been answered.
    pub fn slot(&self) -> Option<crate::Slot> {
        self.engine.slot()
    }

    /// The config in force.
    pub fn config(&self) -> &LivenessConfig {
        &self.config
    }

    /// The lease the key is attached to, only while `Registered`.
    pub fn lease(&self) -> Option<LeaseId> {
        self.engine.lease()
    }

    /// While `Registered`: the instant until which the lease provably
    /// lives (see [`LeaseEngine::expires_at`]).
    pub fn expires_at(&self) -> Option<Instant> {
        self.engine.expires_at()
    }

    /// The user-visible state.
    pub fn state(&self) -> LivenessState {
        self.engine.state()
    }

    /// True once `Closed` (terminal).
    pub fn is_closed(&self) -> bool {
        self.engine.is_closed()
    }

    #[cfg(test)]
    fn last_op(&self) -> u64 {
        self.engine.last_op()
    }

    /// The next command or event, if any. Drain it after every `handle`.
    #[must_use]
    pub fn poll(&mut self) -> Option<Output> {
        // The census's reads (and abandons) first: a close abandons them
        // before the engine says `Closed`, the last output.
        self.census
            .as_mut()
            .and_then(Census::poll)
            .map(Output::Command)
            .or_else(|| self.engine.poll())
    }

    /// The next deadline; call `handle(now, Input::Timeout)` once it passes.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.engine.poll_timeout(),
            self.census.as_ref().and_then(Census::poll_timeout),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// True while waiting on etcd: registering, or a failure not healed
    /// yet (see [`Input::Returned`]).
    pub fn awaits_etcd(&self) -> bool {
        self.engine.awaits_etcd()
    }

    /// How many requests and streams were found unanswered so far.
    pub fn silences(&self) -> u64 {
        self.engine.silences()
    }

    /// Feeds one input. Only `Start` in the wrong state is an error; etcd
    /// failures arrive as inputs and are handled, stale completions ignored.
    pub fn handle(&mut self, now: Instant, input: Input) -> Result<(), StartError> {
        if let Some(census) = self.census.as_mut() {
            match &input {
                Input::Io(c) if census.owns(c.op()) => {
                    if let Some(slot) = census.io(now, c) {
                        self.engine.set_slot(Some(slot));
                    }
                    return Ok(());
                }
                Input::Timeout => census.timeout(now),
                _ => {}
            }
        }
        let handled = self.engine.handle(now, input);
        if let Some(census) = self.census.as_mut() {
            census.registered(now, self.engine.lease().is_some());
        }
        handled
    }
}

crate::machine::impl_machine!(Liveness, Input, Event, StartError);

#[cfg(test)]
mod tests;
