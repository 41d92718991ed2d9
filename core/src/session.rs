//! `Session`: one lease, kept alive by the [lease engine](crate::lease),
//! shared by any number of campaigns (elections and locks) — a pool of
//! elections is one session, so keep-alive load does not grow with names.
//!
//! The session routes inputs to its parts, as str0m's `Rtc` does: the
//! engine's completions by their op's slot, each campaign's by a table of
//! the ops it issued, and it reports the soonest of its parts' deadlines.
//!
//! When the lease is lost (TTL 0, not found, or its deadline passed), every
//! queued or leading campaign gets `Lost` at once, the old lease is revoked
//! until etcd confirms (its keys must not block anyone) and a new lease is
//! granted for later campaigns: a dead lease is never handed out. A
//! campaign asked for while the session has no lease waits for the next
//! one. Close ends every campaign, then revokes the lease.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

mod campaigns;
use campaigns::Campaigns;

use crate::election::{
    AskedBy, Campaign, CampaignConfig, CampaignInput, ElectionEvent, ElectionId, Mode, Standing,
};
use crate::ids::{Key, LeaseId, OpId};
use crate::io::{Command, Completion, Txn};
use crate::lease::{self, ConfigError, LeaseConfig, LeaseEngine, LeaseState, OnLoss};
use crate::machine::StartError;
use crate::outbox::{self, slot_of, OpIds, SLOT_SHIFT};
use crate::time::Instant;

/// Configuration of a [`Session`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct SessionConfig {
    /// The session's lease, which nothing is attached to and which is
    /// replaced when lost. Its request timeout, backoff and seed serve the
    /// campaigns too.
    pub lease: LeaseConfig,
    /// How long a campaign's queue watch may stay quiet before it is probed.
    /// Default 10 s.
    pub probe_interval: Duration,
}

impl SessionConfig {
    /// coord's defaults: the lease's (see [`LeaseConfig::new`]), and a
    /// probe interval of 10 s.
    pub fn new(seed: u64) -> Self {
        SessionConfig {
            lease: LeaseConfig::new(seed),
            probe_interval: Duration::from_secs(10),
        }
    }

    /// Checks every parameter.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.lease.validate()?;
        if !lease::probe_interval_in_range(self.probe_interval) {
            return Err(ConfigError::ProbeIntervalOutOfRange(self.probe_interval));
        }
        Ok(())
    }
}

/// Why a session refused an input. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// `Start` refused.
    #[error(transparent)]
    Start(#[from] StartError),
    /// `Campaign` refused.
    #[error(transparent)]
    Campaign(#[from] CampaignError),
    /// A request (`Leave`, `Proclaim`, `Txn`) for a campaign the session
    /// does not have: never made, or over.
    #[error("no such election")]
    UnknownElection,
}

/// Why a session refused `Campaign`. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CampaignError {
    /// The session is closing or closed.
    #[error("closed")]
    Closed,
    /// A campaign's id must be new: above every id used before, never 0.
    #[error("election id {0} is 0 or already used")]
    IdTaken(u64),
    /// This session already campaigns (or still cleans up a campaign) on
    /// the name: both would write the same key.
    #[error("this session already campaigns on {0}")]
    AlreadyCampaigning(Key),
}

/// Everything that can happen to a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Begin: grant the lease.
    Start,
    /// End every campaign and revoke the lease. Idempotent.
    Close,
    /// `poll_timeout()` passed.
    Timeout,
    /// etcd answers again after a silence: cut every backoff wait short,
    /// and give up requests sent before `probe_sent`.
    Returned {
        /// When the probe that found etcd back was sent.
        probe_sent: Instant,
    },
    /// The client's prober found etcd silent (see
    /// [`machine::Input::Silent`](crate::machine::Input::Silent)).
    Silent,
    /// A request or stream answered.
    Io(Completion),
    /// Campaign for `name` (a key prefix ending with `/`) with `value`.
    Campaign {
        /// The caller's id for it: unique, never 0.
        id: ElectionId,
        /// The election's key prefix, ending with `/`.
        name: Key,
        /// The candidate's value.
        value: Vec<u8>,
        /// Wait, or try once.
        mode: Mode,
    },
    /// Leave: cancel the campaign, or resign the leadership.
    Leave {
        /// Which.
        id: ElectionId,
    },
    /// Replace the leader's value (only while leading).
    Proclaim {
        /// Which election.
        id: ElectionId,
        /// The caller's id for the answer.
        request: u64,
        /// The new value.
        value: Vec<u8>,
    },
    /// Run `txn` only while leading.
    Txn {
        /// Which election.
        id: ElectionId,
        /// The caller's id for the answer.
        request: u64,
        /// The transaction.
        txn: Txn,
    },
}

impl From<Completion> for Input {
    fn from(c: Completion) -> Self {
        Input::Io(c)
    }
}

/// What a session tells its user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// About the session's lease.
    Lease(lease::Event),
    /// About one campaign.
    Election {
        /// Which.
        id: ElectionId,
        /// What.
        event: ElectionEvent,
    },
}

/// What `poll` yields.
pub type Output = outbox::Output<Command, Event>;

/// The session machine. See the module docs.
#[derive(Debug)]
pub struct Session {
    config: SessionConfig,
    engine: LeaseEngine,
    /// Op ids of every campaign (slot 1), and which campaign issued each.
    ids: OpIds,
    routes: BTreeMap<OpId, ElectionId>,
    elections: Campaigns,
    /// Every id ever used (ids are never reused).
    used: u64,
    out: VecDeque<Output>,
}

impl Session {
    /// A session for `config`. Nothing happens until `Input::Start`.
    pub fn new(config: SessionConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let engine = LeaseEngine::new(config.lease.clone(), None, OnLoss::Replace, 0)?;
        Ok(Session {
            config,
            engine,
            ids: OpIds::with_slot(1),
            routes: BTreeMap::new(),
            elections: Campaigns::default(),
            used: 0,
            out: VecDeque::new(),
        })
    }

    /// The config in force.
    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    /// The lease's state.
    pub fn state(&self) -> LeaseState {
        self.engine.state()
    }

    /// The lease held, only while registered.
    pub fn lease(&self) -> Option<LeaseId> {
        self.engine.lease()
    }

    /// While the lease is held: until when it provably lives.
    pub fn expires_at(&self) -> Option<Instant> {
        self.engine.expires_at()
    }

    /// Where a campaign is (`Done` once it is over and forgotten).
    pub fn standing(&self, id: ElectionId) -> Standing {
        self.elections
            .get(id)
            .map_or(Standing::Done, Campaign::standing)
    }

    /// Campaigns not yet over.
    pub fn elections(&self) -> usize {
        self.elections.len()
    }

    /// True once closed (terminal).
    pub fn is_closed(&self) -> bool {
        self.engine.is_closed() && self.elections.is_empty()
    }

    /// The next command or event.
    #[must_use]
    pub fn poll(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// True while the lease or any campaign waits on etcd (see
    /// [`Input::Returned`]).
    pub fn awaits_etcd(&self) -> bool {
        self.engine.awaits_etcd() || self.elections.awaits_etcd()
    }

    /// How many requests and streams were found unanswered so far, by the
    /// lease and the campaigns' queue watches now open (so it may also
    /// drop when a campaign ends; any change means "look again").
    pub fn silences(&self) -> u64 {
        self.engine
            .silences()
            .wrapping_add(self.elections.silences())
    }

    /// The soonest deadline of the lease and of every campaign.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.elections
            .poll_timeout()
            .into_iter()
            .chain(self.engine.poll_timeout())
            .min()
    }

    /// Feeds one input.
    pub fn handle(&mut self, now: Instant, input: Input) -> Result<(), SessionError> {
        let result = self.route(now, input);
        self.drain(now);
        debug_assert!(
            self.elections.consistent(),
            "the campaigns' indexes went stale"
        );
        result
    }

    fn route(&mut self, now: Instant, input: Input) -> Result<(), SessionError> {
        match input {
            Input::Start => self.engine.handle(now, lease::Input::Start)?,
            Input::Close => {
                for c in self.elections.all_mut() {
                    c.handle(now, CampaignInput::SessionClosing, &mut self.ids);
                }
                self.engine.handle(now, lease::Input::Close)?;
            }
            Input::Timeout => {
                self.engine.handle(now, lease::Input::Timeout)?;
                for id in self.elections.due(now) {
                    if let Some(c) = self.elections.get_mut(id) {
                        c.handle(now, CampaignInput::Timeout, &mut self.ids);
                    }
                }
            }
            Input::Silent => self.engine.handle(now, lease::Input::Silent)?,
            Input::Returned { probe_sent } => {
                self.engine
                    .handle(now, lease::Input::Returned { probe_sent })?;
                for c in self.elections.all_mut() {
                    c.handle(now, CampaignInput::Returned { probe_sent }, &mut self.ids);
                }
            }
            Input::Io(c) => self.io(now, c)?,
            Input::Campaign {
                id,
                name,
                value,
                mode,
            } => self.campaign(now, id, name, value, mode)?,
            Input::Leave { id } => {
                let (c, ids) = self.election(id)?;
                c.handle(now, CampaignInput::Leave, ids);
            }
            Input::Proclaim { id, request, value } => {
                let (c, ids) = self.election(id)?;
                let asked = AskedBy::Proclaim(value);
                c.handle(now, CampaignInput::Ask { request, asked }, ids);
            }
            Input::Txn { id, request, txn } => {
                let (c, ids) = self.election(id)?;
                let asked = AskedBy::Txn(txn);
                c.handle(now, CampaignInput::Ask { request, asked }, ids);
            }
        }
        Ok(())
    }

    /// A campaign, and the op ids it may use.
    fn election(&mut self, id: ElectionId) -> Result<(&mut Campaign, &mut OpIds), SessionError> {
        let c = self
            .elections
            .get_mut(id)
            .ok_or(SessionError::UnknownElection)?;
        Ok((c, &mut self.ids))
    }

    fn io(&mut self, now: Instant, c: Completion) -> Result<(), StartError> {
        let op = c.op();
        if slot_of(op) == 0 {
            return self.engine.handle(now, lease::Input::Io(c));
        }
        let Some(id) = self.routes.get(&op).copied() else {
            // A stale answer for a campaign that is over.
            return Ok(());
        };
        if ends_op(&c) {
            self.routes.remove(&op);
        }
        if let Some(contender) = self.elections.get_mut(id) {
            contender.handle(now, CampaignInput::Io(c), &mut self.ids);
        }
        Ok(())
    }

    fn campaign(
        &mut self,
        now: Instant,
        id: ElectionId,
        name: Key,
        value: Vec<u8>,
        mode: Mode,
    ) -> Result<(), CampaignError> {
        if matches!(
            self.engine.state(),
            LeaseState::Closing | LeaseState::Closed { .. }
        ) {
            return Err(CampaignError::Closed);
        }
        if id.0 == 0 || id.0 <= self.used {
            return Err(CampaignError::IdTaken(id.0));
        }
        // A campaign still leaving the name (its key being deleted) makes
        // the new one wait; a live one on the same key is refused.
        let live = self
            .elections
            .iter()
            .map(|(_, c)| c)
            .filter(|c| *c.name() == name)
            .any(|c| !matches!(c.standing(), Standing::Leaving | Standing::Done));
        if live {
            return Err(CampaignError::AlreadyCampaigning(name));
        }
        self.used = id.0;
        let config = CampaignConfig {
            request_timeout: self.config.lease.request_timeout,
            probe_interval: self.config.probe_interval,
            backoff: self.config.lease.backoff.clone(),
            seed: campaign_seed(self.config.lease.seed, id),
        };
        self.elections
            .insert(id, Campaign::new(name, value, mode, config));
        self.start_ready(now);
        Ok(())
    }

    /// Starts every pending campaign that may join: the session holds a
    /// lease, and no earlier campaign on its name is still leaving (their
    /// keys are the same). Runs after every input: constant time when none
    /// is pending, `n log n` when one is.
    fn start_ready(&mut self, now: Instant) {
        let Some(lease) = self.engine.lease() else {
            return;
        };
        if !self.elections.any_pending() {
            return;
        }
        // The first campaign on each name, in id order, is the one that
        // may join.
        let mut named: BTreeSet<&Key> = BTreeSet::new();
        let ready: Vec<ElectionId> = self
            .elections
            .iter()
            .filter(|(_, c)| named.insert(c.name()))
            .filter(|(_, c)| c.is_pending())
            .map(|(id, _)| id)
            .collect();
        for id in ready {
            if let Some(c) = self.elections.get_mut(id) {
                c.handle(now, CampaignInput::LeaseReady(lease), &mut self.ids);
            }
        }
    }

    /// Moves the parts' outputs to the session's queue: the engine's first
    /// (a lease event concerns every campaign), then each touched
    /// campaign's, recording which campaign issued each op; refreshes
    /// their indexes and forgets those finished.
    fn drain(&mut self, now: Instant) {
        while let Some(o) = self.engine.poll() {
            match o {
                outbox::Output::Command(c) => self.out.push_back(outbox::Output::Command(c)),
                outbox::Output::Event(e) => {
                    match &e {
                        lease::Event::Registered { .. } | lease::Event::Reregistered { .. } => {
                            // Started below, once the engine is drained.
                        }
                        lease::Event::Lost { reason, .. } => {
                            for c in self.elections.all_mut() {
                                let lost = CampaignInput::LeaseLost(reason.clone());
                                c.handle(now, lost, &mut self.ids);
                            }
                        }
                        lease::Event::StartFailed { .. } | lease::Event::Closed { .. } => {
                            // No lease will come: nothing can wait for one.
                            for c in self.elections.all_mut() {
                                c.handle(now, CampaignInput::SessionClosing, &mut self.ids);
                            }
                        }
                        lease::Event::KeepAliveInterrupted { .. } | lease::Event::Retrying(_) => {}
                    }
                    self.out.push_back(outbox::Output::Event(Event::Lease(e)));
                }
            }
        }
        let mut finished = Vec::new();
        for id in self.elections.take_touched() {
            let Some(c) = self.elections.get_mut(id) else {
                continue;
            };
            while let Some(o) = c.poll() {
                match o {
                    outbox::Output::Command(cmd) => {
                        match &cmd {
                            c if c.starts_op() => {
                                self.routes.insert(c.op(), id);
                            }
                            Command::Abandon { op } | Command::CancelWatch { stream: op } => {
                                self.routes.remove(op);
                            }
                            _ => {}
                        }
                        self.out.push_back(outbox::Output::Command(cmd));
                    }
                    outbox::Output::Event(event) => self
                        .out
                        .push_back(outbox::Output::Event(Event::Election { id, event })),
                }
            }
            if c.is_finished() {
                finished.push(id);
            }
            self.elections.refresh(id);
        }
        if !finished.is_empty() {
            for id in &finished {
                self.elections.remove(*id);
            }
            self.routes.retain(|_, id| !finished.contains(id));
        }
        // A lease just held, or a name just left: start who may (and move
        // what that issued).
        self.start_ready(now);
        if self.elections.any_touched() {
            self.drain(now);
        }
    }
}

/// True for a completion after which its op says nothing more.
fn ends_op(c: &Completion) -> bool {
    !matches!(
        c,
        Completion::KeepAliveReply { .. } | Completion::WatchMessage { .. }
    )
}

/// The first op id of the campaigns' slot (for tests and fuzzing).
pub const CAMPAIGN_OPS: u64 = 1 << SLOT_SHIFT;

crate::machine::impl_machine!(Session, Input, Event, SessionError);

/// The jitter seed of campaign `id` on a session seeded `seed`: one of its
/// own per campaign, so that a pool's campaigns do not retry in step, and
/// as distinct between sessions as their seeds are.
fn campaign_seed(seed: u64, id: ElectionId) -> u64 {
    seed ^ id.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[cfg(test)]
mod tests;
