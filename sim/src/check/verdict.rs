//! What a check finds: the [`Invariant`]s, a [`Violation`] of one, and the
//! [`Verdict`] of a run (its violations, its check count and the latencies
//! measured on the way).

/// Which invariant failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Invariant {
    /// A host reported a lease its key is not attached to.
    LeaseMatches,
    /// A host's `lease_id()` disagreed with its `state()`: it names the
    /// lease while `Registered`, and nothing otherwise.
    LeaseIdAgrees,
    /// A host's `state()` showed it `Registered` under a lease that none
    /// of its `Registered` or `Reregistered` events named.
    StatesAnnounced,
    /// A host was not registered within the bound after the heal.
    BackAfterHeal,
    /// A host took longer to register again than the path that cleared
    /// its way to etcd allows (see [`crate::check::bounds`]).
    HealOnTime,
    /// An election or lock process's session registered again later than
    /// its heal path's bound.
    SessionHealOnTime,
    /// A crashed host's key outlived its TTL plus slack.
    CrashedKeyExpires,
    /// A key was present after its host stopped.
    NoGhost,
    /// `stop` failed or the task kept running.
    StopEndsTask,
    /// The simulation panicked.
    NoPanic,
    /// The simulator's own plumbing delivered a message of the wrong type.
    SimulatorSound,
    /// A watcher's events do not replay soundly.
    WatcherSound,
    /// A watcher's view at one of its bookmarks (`Synced`, `Resynced`,
    /// the `Restored` that ends a reset) was not etcd's hosts at the
    /// bookmark's revision.
    WatcherBookmarks,
    /// A watcher's view did not converge to etcd's after the heal.
    WatcherConverges,
    /// An undisturbed watcher missed a change.
    WatcherComplete,
    /// A watcher's view stayed stale while its `status()` said `Watching`.
    WatcherSaysStale,
    /// A watcher retried because its consumer stalled.
    StallBreaksNothing,
    /// A watcher's event reported a record etcd never wrote, or a previous
    /// or last-seen record its own events never gave.
    WatcherRecords,
    /// A host's event named a lease etcd never granted it, a TTL etcd did
    /// not grant, a lease it did not hold, a resume that was not, or a
    /// lease "expired" or "revoked" that etcd still had.
    LivenessRecords,
    /// An `Elected` disagreed with etcd: its key is not the name's queue
    /// prefix and its lease in hex, etcd never put that key with that lease
    /// and that create revision as its token, or an older key of the name
    /// was still in etcd.
    ElectionRecords,
    /// A waiter whose key became its name's oldest, undisturbed, did not
    /// report itself elected within `SUCCESSION_MS`.
    PromptSuccession,
    /// A campaign failed with an error that is not a loss (its key or
    /// lease gone): etcd answered or the process was cut off, so only a
    /// loss may end a campaign.
    CampaignFailsOnlyWhenLost,
    /// Two handles of one name believed they lead while both keys existed.
    OneLeader,
    /// A leader's belief outlived its key (beyond the bound).
    BeliefEnds,
    /// A write landed on a fenced resource under a token that did not hold
    /// the name.
    Fenced,
    /// A name had no leader long after the heal.
    LeaderAfterHeal,
    /// A waiter whose key was deleted was elected, or failed late.
    NoZombie,
    /// A withdrawn campaign's key outlived the bound.
    WithdrawnLeavesNoKey,
    /// A try that lost created its key.
    TryWritesNothing,
    /// An undisturbed session held more than one lease.
    OneLeasePerSession,
    /// A leadership on a lease its session no longer holds was not ended.
    LossReported,
    /// A session reported a lease etcd did not have.
    SessionLeaseLives,
    /// A lease whose loss ended a leadership was not retired: etcd still
    /// held it, or the lost leadership's key, past a TTL after the loss,
    /// or a campaign was elected on it again, or its session reported it
    /// again after leaving it.
    LostLeaseRetired,
    /// An observation disagreed with etcd's leader at its revision.
    ObserverSound,
    /// An observer skipped a leader without a compaction to excuse it.
    ObserverComplete,
    /// An observer's last report was not etcd's settled leader.
    ObserverConverges,
    /// An undisturbed observer reported a change of leader later than
    /// `SUCCESSION_MS`.
    ObserverPrompt,
    /// A leadership's `is_leader()` or `has_ended()` contradicted its state:
    /// not leading when just elected undisturbed, ended when just elected,
    /// leading after `lost()` fired or `resign()` returned, leading and
    /// ended at once, or not leading just before etcd applied its guarded
    /// write (undisturbed).
    IsLeaderTruth,
    /// `lost()` completed before the leadership ended, or with a loss that
    /// did not happen (resigned without a resign, session closed before a
    /// close, key deleted while etcd had it), or a campaign failed as lost
    /// with its key deleted while etcd deleted no key of its.
    LostTruth,
    /// An undisturbed `resign()`/`unlock()` returned `Ok` with the key still
    /// in etcd (or `lost()` then not "resigned"), or a dropped leadership's
    /// key outlived a request timeout + 1 s.
    ResignReleases,
    /// A `proclaim` returned `Ok` that etcd never applied.
    ProclaimApplied,
    /// `Election::leader` returned a leader etcd never had during the call.
    LeaderReadTrue,
    /// An undisturbed try lost on a queue that was empty throughout.
    TryWinsEmptyQueue,
    /// An undisturbed `close()` returned `Ok` with the session's lease alive.
    CloseRevokes,
    /// No order of a name's client-visible operations (elections,
    /// releases, fenced writes, leader reads), each taking effect between
    /// its call and its return, is a run of a sequential fenced lock.
    LockLinearizable,
    /// A returning fleet of 100 or more hosts sent more than
    /// [`HERD_BOUND_PERMILLE`](crate::check::HERD_BOUND_PERMILLE) of its heal requests within
    /// [`HERD_WINDOW_MS`](crate::check::HERD_WINDOW_MS): a thundering herd.
    HerdSpread,
}

/// One violation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant.
    pub invariant: Invariant,
    /// Virtual ms.
    pub at_ms: u64,
    /// The host, if one.
    pub host: Option<usize>,
    /// What was seen.
    pub detail: String,
}

/// What the checker found and measured.
#[derive(Debug, Clone, Default)]
pub struct Verdict {
    /// Violations (at most one per invariant and host).
    pub violations: Vec<Violation>,
    /// Individual checks made.
    pub checks: u64,
    /// Crash to key gone, ms.
    pub detection_ms: Vec<u64>,
    /// Path clear to registered again, ms.
    pub heal_ms: Vec<u64>,
    /// The same, by what cleared: (kind, ms).
    pub heal_by_kind: Vec<(&'static str, u64)>,
    /// The sessions' heals (election and lock processes), by what cleared:
    /// (kind, ms).
    pub session_heal_by_kind: Vec<(&'static str, u64)>,
    /// Each heal (hosts' and sessions') as a share of its path's bound,
    /// per mille: how close the run came to its bounds.
    pub heal_permille_of_bound: Vec<u64>,
    /// etcd change to watcher event, ms (undisturbed watchers only).
    pub lag_ms: Vec<u64>,
    /// A disturbance of a host watcher ended to its view complete again,
    /// by what disturbed it: (kind, ms).
    pub catch_up_by_kind: Vec<(&'static str, u64)>,
    /// Each catch-up as a share of its path's bound, per mille.
    pub catch_up_permille_of_bound: Vec<u64>,
    /// Most lease grants etcd served in any one second after the first,
    /// as a percentage of the fleet (fleets of 5 or more hosts): the
    /// re-registration peak, where a thundering herd would show.
    pub peak_grant_pct: Option<u64>,
    /// The densest herd of the run (fleets of 100 or more hosts): the
    /// largest share, per mille, of a returning fleet's grants and
    /// keep-alive opens sent within [`HERD_WINDOW_MS`](crate::check::HERD_WINDOW_MS).
    pub herd_permille: Option<u64>,
    /// A leader's process crashed to a successor leading, minus its TTL, ms.
    pub failover_ms: Vec<u64>,
    /// Resign to the successor elected, ms.
    pub handover_ms: Vec<u64>,
    /// The names whose lock history was found linearizable, or undecided.
    pub lock_histories: LockHistories,
}

impl Verdict {
    /// Records a violation (at most one per invariant and host).
    pub(crate) fn violate(
        &mut self,
        invariant: Invariant,
        at_ms: u64,
        host: Option<usize>,
        detail: String,
    ) {
        let dup = self
            .violations
            .iter()
            .any(|v| v.invariant == invariant && v.host == host);
        if !dup {
            self.violations.push(Violation {
                invariant,
                at_ms,
                host,
                detail,
            });
        }
    }
}

/// What the lock histories' checks of a run came to, counted in names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockHistories {
    /// Names whose history some legal order explains.
    pub linearizable: u64,
    /// Names whose search ran past the lock history check's step budget.
    pub undecided: u64,
}
