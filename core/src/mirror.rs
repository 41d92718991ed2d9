//! `Mirror`: every key under a prefix, as a view that converges to etcd's
//! truth and the changes that explain it. The one list-and-watch every
//! machine uses: the host watcher, election waiters and leaders (who watch
//! their queue), and `observe`.
//!
//! Start: range the prefix (or take a listing the owner already read, such
//! as a campaign transaction's), report each key as a `Put`, then `Synced`,
//! then watch from the listing's revision + 1 (without prev kv: the view
//! has it). A put that changes a key's value or lease is a `Put` with the
//! previous kv; an identical re-put is nothing; a delete of a known key is
//! `Deleted` with the last-seen kv, the view's: the kv of the last change
//! reported, so an identical re-put never shows, even there.
//!
//! A broken stream (closed, erroring, or silent: no answer to a progress
//! request within the request timeout) is resumed from the last revision
//! seen + 1, with backoff. A compacted start revision makes the mirror
//! range the prefix again and report the difference against its view, then
//! `Resynced`, then watch from the new revision + 1. Nothing is lost and
//! nothing repeated: every change applies to the view exactly as reported,
//! and revisions never decrease, except across a restore (below). Every
//! wait before a retry is announced with `Retrying`.
//!
//! Listings are read in pages of `page_size` keys, every page at the first
//! page's revision, so a prefix larger than one response is still one
//! snapshot; a page too large to receive is asked again with half the keys.
//!
//! etcd restored from an older snapshot, or wiped, answers with a revision
//! below the one the mirror reflects; a replaced cluster answers with
//! another cluster id. A watch message that shows either makes the mirror
//! read the prefix linearizably; a listing behind the mirror's revision (or
//! from another cluster) is a restore: `Reset` announces it (with the
//! reason and the listing's revision), then the view becomes the listing,
//! the difference is reported, then `Resynced` with the reason, and the
//! mirror's revision moves to the listing's (the one time it goes back;
//! a history found diverged is announced the same way). A
//! serializable listing behind the mirror, or behind the compaction that
//! made it list, proves nothing (a lagging member answered it): it is read
//! again linearizably, never applied.
//!
//! The mirror is a part, not a machine: its owner lends it op ids (so ids
//! stay unique across the owner's parts), routes the mirror's completions
//! to it, drains its commands and changes in order with
//! [`Mirror::poll`] and folds its deadline.

mod change;
mod config;
mod machine;
mod pages;
mod status;
mod verify;
mod view;

pub use change::{Change, ResyncReason};
pub use config::{KeyFilter, MirrorConfig, MirrorConfigError, DEFAULT_PAGE_SIZE};
pub use machine::{MirrorMachine, MirrorReader};
pub use status::MirrorStatus;
use status::{Failing, Showed};
use verify::{Found, Verify};

use std::collections::{BTreeMap, VecDeque};

use pages::{ListReason, PageStep, Pages};

use crate::backoff::Backoff;
use crate::ids::{ClusterId, Key, OpId, Revision};
use crate::io::{Command, Completion, Consistency, Listing, MessageKind};
use crate::kv::{KeyValue, WatchEvent};
use crate::machine::StartError;
use crate::outbox::{OpIds, Output};
use crate::outcome::{AttemptFailure, Failure, Outcome, Retry};
use crate::time::Instant;
use crate::StartPolicy;

/// What the filter does with a key under the prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wanted {
    Kept,
    /// Outside the prefix, or excluded on purpose.
    Left,
    /// Not a valid host id (reported as `Ignored`).
    Invalid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// Quiet; probe at `at` unless a message comes first.
    Quiet { at: Instant },
    /// A progress request (or the watch's creation) awaits an answer by
    /// `deadline`.
    Awaiting { deadline: Instant },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Resume,
    List(ListReason),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Idle,
    Listing {
        op: OpId,
        deadline: Instant,
        pages: Pages,
    },
    Watching {
        stream: OpId,
        probe: Probe,
    },
    /// Reading back a key at the view's revision before resuming.
    Verifying {
        op: OpId,
        deadline: Instant,
        verify: Verify,
    },
    Waiting {
        next_at: Instant,
        then: Then,
    },
    Closed,
}

/// A list-and-watch of one prefix. See the module docs.
#[derive(Debug)]
pub struct Mirror {
    config: MirrorConfig,
    state: State,
    backoff: Backoff,
    view: BTreeMap<Key, KeyValue>,
    /// Every change up to here is reflected in the view.
    revision: Revision,
    /// The cluster the view is of (once a header named it).
    cluster: ClusterId,
    /// Failures since the last success, if any.
    failing: Option<Failing>,
    /// Requests and streams found unanswered so far.
    silences: u64,
    out: VecDeque<Output<Command, Change>>,
}

impl Mirror {
    /// A mirror for `config`. Nothing happens until it is started.
    pub fn new(config: MirrorConfig) -> Result<Self, MirrorConfigError> {
        config.validate()?;
        let backoff = Backoff::new(config.backoff.clone(), config.seed);
        Ok(Mirror {
            config,
            state: State::Idle,
            backoff,
            view: BTreeMap::new(),
            revision: Revision(0),
            cluster: ClusterId::default(),
            failing: None,
            silences: 0,
            out: VecDeque::new(),
        })
    }

    /// What the mirror is doing; see [`MirrorStatus`].
    pub fn status(&self) -> MirrorStatus {
        let revision = self.revision;
        match (&self.state, &self.failing) {
            (State::Closed, _) => MirrorStatus::Closed,
            (State::Idle, _) => MirrorStatus::Starting,
            (_, Some(f)) => MirrorStatus::Failing {
                revision,
                since: f.since,
                attempt: self.backoff.attempt(),
                failure: f.last.clone(),
            },
            (State::Listing { pages, .. }, None) if pages.reason() == ListReason::Initial => {
                MirrorStatus::Starting
            }
            (State::Watching { .. }, None) => MirrorStatus::Watching { revision },
            (State::Listing { .. } | State::Waiting { .. } | State::Verifying { .. }, None) => {
                MirrorStatus::Relisting { revision }
            }
        }
    }

    /// A success: the backoff starts over and the run of failures ends.
    fn succeeded(&mut self) {
        self.backoff.reset();
        self.failing = None;
    }

    /// The config in force.
    pub fn config(&self) -> &MirrorConfig {
        &self.config
    }

    /// The kept keys, exactly as the changes so far describe them.
    pub fn view(&self) -> &BTreeMap<Key, KeyValue> {
        &self.view
    }

    /// Every change up to this revision is reflected in the view.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// True once closed (terminal).
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// True until started: nothing asked of etcd yet.
    pub fn is_idle(&self) -> bool {
        matches!(self.state, State::Idle)
    }

    /// True while a watch stream is open and the view is current.
    pub fn is_watching(&self) -> bool {
        matches!(self.state, State::Watching { .. })
    }

    /// The next command or change, in the order they arose (the `poll` of
    /// every machine's shape). Drain after every call that feeds the mirror.
    #[must_use]
    pub fn poll(&mut self) -> Option<Output<Command, Change>> {
        self.out.pop_front()
    }

    fn cmd(&mut self, c: Command) {
        self.out.push_back(Output::Command(c));
    }

    fn change(&mut self, c: Change) {
        self.out.push_back(Output::Event(c));
    }

    /// How many requests and streams were found unanswered so far.
    pub fn silences(&self) -> u64 {
        self.silences
    }

    /// True while waiting on etcd: a listing or read-back in flight, or a
    /// failure to list or watch not healed yet (from the failure to the
    /// next success).
    pub fn awaits_etcd(&self) -> bool {
        match self.state {
            State::Listing { .. } | State::Verifying { .. } | State::Waiting { .. } => true,
            State::Watching { .. } => self.failing.is_some(),
            State::Idle | State::Closed => false,
        }
    }

    /// etcd answers again after a silence: a request sent long before is
    /// given up as lost, a quiet watch is probed at once, and a backoff
    /// wait is cut short (see [`Backoff::cut`]). Nothing under
    /// [`Pacing::Plain`](crate::Pacing::Plain).
    pub(crate) fn cut(&mut self, now: Instant, probe_sent: Instant, ids: &mut OpIds) {
        if !self.backoff.heeds_returns() {
            return;
        }
        let timeout = self.config.request_timeout;
        let lost = |d: &Instant| crate::probe::sent_before(*d, timeout, probe_sent);
        let due = match &mut self.state {
            State::Listing { deadline, .. }
            | State::Verifying { deadline, .. }
            | State::Watching {
                probe: Probe::Awaiting { deadline },
                ..
            } if lost(deadline) => {
                *deadline = now;
                true
            }
            State::Watching {
                probe: Probe::Quiet { at },
                ..
            } => {
                *at = (*at).min(now);
                true
            }
            _ => false,
        };
        if due {
            self.timeout(now, ids);
        }
        if let State::Waiting { next_at, .. } = &mut self.state {
            *next_at = self.backoff.cut(now, *next_at);
        }
    }

    /// The next deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.state {
            State::Idle | State::Closed => None,
            State::Listing { deadline, .. } | State::Verifying { deadline, .. } => Some(*deadline),
            State::Watching { probe, .. } => Some(match probe {
                Probe::Quiet { at } => *at,
                Probe::Awaiting { deadline } => *deadline,
            }),
            State::Waiting { next_at, .. } => Some(*next_at),
        }
    }

    /// True if `op` is a request or stream this mirror waits for.
    pub fn owns(&self, op: OpId) -> bool {
        match self.state {
            State::Listing { op: o, .. } | State::Verifying { op: o, .. } => o == op,
            State::Watching { stream, .. } => stream == op,
            State::Idle | State::Waiting { .. } | State::Closed => false,
        }
    }

    /// Feeds one input of a machine that is a mirror plus a translation
    /// of its changes (the watcher, the observer): `Start` is refused
    /// unless idle; a completion that is not the mirror's is stale.
    pub(crate) fn handle(
        &mut self,
        now: Instant,
        input: crate::machine::Input,
        ids: &mut OpIds,
    ) -> Result<(), StartError> {
        use crate::machine::Input;
        match input {
            Input::Start => self.start(now, ids)?,
            Input::Close => self.close(),
            Input::Timeout => self.timeout(now, ids),
            Input::Returned { probe_sent } => self.cut(now, probe_sent, ids),
            // A watcher has no fleet slot: its retries are its own.
            Input::Silent => {}
            Input::Io(c) => {
                let _ = self.io(now, c, ids);
            }
        }
        Ok(())
    }

    /// Starts by ranging the prefix. Only from idle; otherwise refused,
    /// changing nothing.
    fn start(&mut self, now: Instant, ids: &mut OpIds) -> Result<(), StartError> {
        self.refuse_unless_idle()?;
        self.list(now, ListReason::Initial, ids);
        Ok(())
    }

    /// Why a mirror that is not idle refuses to start.
    fn refuse_unless_idle(&self) -> Result<(), StartError> {
        match self.state {
            State::Idle => Ok(()),
            State::Closed => Err(StartError::Closed),
            _ => Err(StartError::AlreadyStarted),
        }
    }

    /// Starts from a listing the owner read itself (it must hold every key
    /// under the prefix at its revision). Only from idle; otherwise
    /// refused, changing nothing.
    pub(crate) fn start_from(
        &mut self,
        now: Instant,
        listing: Listing,
        ids: &mut OpIds,
    ) -> Result<(), StartError> {
        self.refuse_unless_idle()?;
        self.apply_listing(
            now,
            listing,
            ListReason::Initial,
            Consistency::Linearizable,
            ids,
        );
        Ok(())
    }

    /// Stops: cancels what is in flight. Idempotent.
    pub fn close(&mut self) {
        match std::mem::replace(&mut self.state, State::Closed) {
            State::Closed => return,
            State::Listing { op, .. } | State::Verifying { op, .. } => {
                self.cmd(Command::Abandon { op })
            }
            State::Watching { stream, .. } => self.cmd(Command::CancelWatch { stream }),
            State::Idle | State::Waiting { .. } => {}
        }
        self.change(Change::Closed);
    }

    /// The deadline from `poll_timeout` may have passed.
    pub(crate) fn timeout(&mut self, now: Instant, ids: &mut OpIds) {
        match std::mem::replace(&mut self.state, State::Closed) {
            State::Listing {
                op,
                deadline,
                pages,
            } if now >= deadline => {
                self.silences += 1;
                self.cmd(Command::Abandon { op });
                self.list_failed(now, pages.reason(), AttemptFailure::Timeout);
            }
            State::Verifying { op, deadline, .. } if now >= deadline => {
                self.silences += 1;
                self.cmd(Command::Abandon { op });
                self.retry(now, AttemptFailure::Timeout, Then::Resume);
            }
            State::Watching {
                stream,
                probe: Probe::Awaiting { deadline },
            } if now >= deadline => {
                // No creation or progress answer in time: silently broken.
                self.silences += 1;
                self.cmd(Command::CancelWatch { stream });
                self.retry(now, AttemptFailure::Timeout, Then::Resume);
            }
            State::Watching {
                stream,
                probe: Probe::Quiet { at },
            } if now >= at => {
                self.cmd(Command::RequestProgress { stream });
                self.state = State::Watching {
                    stream,
                    probe: Probe::Awaiting {
                        deadline: now + self.config.request_timeout,
                    },
                };
            }
            State::Waiting { next_at, then } if now >= next_at => match then {
                Then::Resume => self.resume(now, ids),
                Then::List(reason) => self.list(now, reason, ids),
            },
            other => self.state = other,
        }
    }

    /// Takes a completion. Returns it back if it is not the mirror's.
    pub(crate) fn io(
        &mut self,
        now: Instant,
        c: Completion,
        ids: &mut OpIds,
    ) -> Option<Completion> {
        if !self.owns(c.op()) {
            return Some(c);
        }
        match c {
            Completion::Listed { outcome, .. } if matches!(self.state, State::Verifying { .. }) => {
                self.on_verified(now, outcome, ids)
            }
            Completion::Listed { outcome, .. } => self.on_listed(now, outcome, ids),
            Completion::WatchMessage {
                stream,
                kind,
                events,
                revision,
                cluster,
            } => self.on_message(now, stream, kind, events, (revision, cluster)),
            Completion::WatchClosed { stream, failure } => {
                self.on_closed(now, stream, failure, ids)
            }
            other => return Some(other),
        }
        None
    }

    fn list(&mut self, now: Instant, reason: ListReason, ids: &mut OpIds) {
        // Whether etcd went back is judged by a linearizable read only.
        let consistency = match reason {
            ListReason::Check => Consistency::Linearizable,
            ListReason::Initial | ListReason::Resync(_) | ListReason::Diverged(_) => {
                self.config.consistency
            }
        };
        self.list_with(now, reason, consistency, ids);
    }

    fn list_with(
        &mut self,
        now: Instant,
        reason: ListReason,
        consistency: Consistency,
        ids: &mut OpIds,
    ) {
        let pages = Pages::new(reason, consistency, self.config.page_size);
        self.request_page(now, pages, ids);
    }

    fn request_page(&mut self, now: Instant, pages: Pages, ids: &mut OpIds) {
        let op = ids.next();
        self.cmd(Command::Range {
            op,
            request: pages.request(&self.config.prefix),
        });
        self.state = State::Listing {
            op,
            deadline: now + self.config.request_timeout,
            pages,
        };
    }

    /// Resumes the watch after a break, once a read-back found etcd's
    /// history the same (see [`verify`]); an empty view resumes at once.
    fn resume(&mut self, now: Instant, ids: &mut OpIds) {
        let verify = Verify::of(self.view.values(), &self.config.prefix, self.revision);
        let op = ids.next();
        self.cmd(Command::Range {
            op,
            request: verify.request(),
        });
        self.state = State::Verifying {
            op,
            deadline: now + self.config.request_timeout,
            verify,
        };
    }

    fn on_verified(&mut self, now: Instant, outcome: Outcome<Listing>, ids: &mut OpIds) {
        let State::Verifying { verify, .. } = std::mem::replace(&mut self.state, State::Closed)
        else {
            return;
        };
        let kept = |key: &Key| self.wanted(key) == Wanted::Kept;
        let found = verify.judge(outcome, kept);
        match found {
            Found::Same => self.watch(now, ids),
            Found::Diverged => self.list(now, ListReason::Diverged(self.revision), ids),
            // The watch will say so too, with etcd's compact revision (a
            // range's error does not carry it), and a re-list follows.
            Found::Compacted => self.watch(now, ids),
            Found::Behind => self.list(now, ListReason::Check, ids),
            Found::Failed(failure) => self.retry(now, failure, Then::Resume),
        }
    }

    fn watch(&mut self, now: Instant, ids: &mut OpIds) {
        let op = ids.next();
        self.cmd(Command::Watch {
            op,
            key: self.config.prefix.clone(),
            prefix: true,
            start_revision: Revision(self.revision.0.saturating_add(1)),
        });
        // The creation must be confirmed within a request timeout.
        self.state = State::Watching {
            stream: op,
            probe: Probe::Awaiting {
                deadline: now + self.config.request_timeout,
            },
        };
    }

    fn retry(&mut self, now: Instant, failure: AttemptFailure, then: Then) {
        self.retry_showing(now, failure, then, Showed::NotServing);
    }

    /// etcd answered a watch from behind the view, or as another cluster:
    /// a check is due. The failures before it in this run (etcd
    /// unreachable, refusing, silent) say nothing of etcd now that it
    /// answers, so the backoff starts over, and the check goes out after
    /// the first attempt's delay, not after the delay the outage had
    /// grown to (seed 9762455: a watch answered by the new cluster just
    /// after a wipe waited 940 ms to re-list). Unless the run's last
    /// failure was such an answer too: a member answering from behind
    /// again after a check found etcd as it was is backed off, not
    /// re-listed in a loop.
    fn retry_check(&mut self, now: Instant, why: Failure) {
        let again = self
            .failing
            .as_ref()
            .is_some_and(|f| f.showed == Showed::AnsweredBehind);
        if !again {
            self.backoff.reset();
        }
        self.retry_showing(
            now,
            AttemptFailure::Etcd(why),
            Then::List(ListReason::Check),
            Showed::AnsweredBehind,
        );
    }

    fn retry_showing(&mut self, now: Instant, failure: AttemptFailure, then: Then, showed: Showed) {
        let since = self.failing.as_ref().map_or(now, |f| f.since);
        self.failing = Some(Failing {
            since,
            last: failure.clone(),
            showed,
        });
        let next_at = now + self.backoff.next_delay(failure.class());
        self.change(Change::Retrying(Retry {
            attempt: self.backoff.attempt(),
            next_at,
            failure: Some(failure),
        }));
        self.state = State::Waiting { next_at, then };
    }

    fn list_failed(&mut self, now: Instant, reason: ListReason, failure: AttemptFailure) {
        if reason == ListReason::Initial && self.config.start == StartPolicy::FailFast {
            self.change(Change::StartFailed { reason: failure });
            // Nothing is in flight (the range just ended).
            self.state = State::Closed;
            self.change(Change::Closed);
            return;
        }
        self.retry(now, failure, Then::List(reason));
    }

    fn on_listed(&mut self, now: Instant, outcome: Outcome<Listing>, ids: &mut OpIds) {
        // `io` passes on only the answers of the op in flight (`owns`).
        let mut pages = match std::mem::replace(&mut self.state, State::Closed) {
            State::Listing { pages, .. } => pages,
            other => {
                self.state = other;
                return;
            }
        };
        match outcome {
            Outcome::Ok(page) => match pages.take(page) {
                PageStep::More => self.request_page(now, pages, ids),
                PageStep::Done(listing) => {
                    self.apply_listing(now, listing, pages.reason(), pages.consistency(), ids)
                }
                PageStep::Restart => self.request_page(now, pages.restarted(), ids),
            },
            // Ask for fewer keys at once.
            Outcome::Err(Failure::TooLarge(_)) if pages.shrink() => {
                self.request_page(now, pages, ids)
            }
            // The pinned revision was compacted between pages, or etcd went
            // behind it (restored, or another member answered): start over.
            Outcome::Err(Failure::Compacted(_) | Failure::FutureRevision) if pages.pinned() => {
                self.request_page(now, pages.restarted(), ids)
            }
            failed => {
                let failure = AttemptFailure::of(&failed).unwrap_or(AttemptFailure::Timeout);
                self.list_failed(now, pages.reason(), failure);
            }
        }
    }

    fn on_message(
        &mut self,
        now: Instant,
        stream: OpId,
        kind: MessageKind,
        events: Vec<WatchEvent>,
        (header, cluster): (Revision, ClusterId),
    ) {
        if !self.cluster.is_known() {
            self.cluster = cluster;
        }
        let other_cluster = cluster.is_known() && cluster != self.cluster;
        if other_cluster || header < self.revision {
            // etcd answers from behind the view, or another cluster does:
            // restored, wiped, replaced, or a lagging member. A linearizable
            // listing tells which (after a backoff, announced).
            self.cmd(Command::CancelWatch { stream });
            let why = Failure::StreamClosed(format!(
                "watch answered at revision {} of cluster {cluster}, behind revision {} of cluster {}",
                header.0, self.revision.0, self.cluster
            ));
            self.retry_check(now, why);
            return;
        }
        // Any message proves the stream alive.
        self.state = State::Watching {
            stream,
            probe: Probe::Quiet {
                at: now + self.config.probe_interval,
            },
        };
        // Everything up to here was reflected before this message; events
        // of one revision (a lease revoke deleting several keys) all apply.
        let reflected = self.revision;
        for ev in events {
            let rev = ev.revision();
            if rev <= reflected || rev < self.revision {
                // Already reflected (a replay after a resume), or out of
                // order (never from etcd): revisions never go back.
                continue;
            }
            match ev {
                WatchEvent::Put { kv, .. } => {
                    if self.keeps(&kv.key) {
                        self.apply_put(kv, rev);
                    }
                }
                WatchEvent::Delete { key, .. } => {
                    if self.keeps(&key) {
                        if let Some(last_seen) = self.view.remove(&key) {
                            self.change(Change::Deleted {
                                key,
                                last_seen,
                                revision: rev,
                            });
                        }
                    }
                }
            }
            self.revision = rev;
        }
        // Only a progress notification promises that nothing up to its
        // revision is still to come.
        if kind == MessageKind::Progress {
            self.revision = self.revision.max(header);
        }
        self.succeeded();
    }

    fn on_closed(&mut self, now: Instant, stream: OpId, failure: Failure, ids: &mut OpIds) {
        self.cmd(Command::CancelWatch { stream });
        match failure {
            Failure::Compacted(rev) => {
                self.list(now, ListReason::Resync(Revision(rev)), ids);
            }
            other => self.retry(now, AttemptFailure::Etcd(other), Then::Resume),
        }
    }
}
