//! Per-path bounds, derived from the options the simulated processes are
//! configured with (coord's defaults). Each heal or detection path has its
//! own bound, tight enough that the path running twice as slow as
//! configured fails a seed (the `teeth` tests show it per path).
//!
//! A heal is timed from the moment the host's path to etcd clears to the
//! first sample where it is registered with its key attached to the lease
//! it reports. Each bound is what the path needs to notice etcd is back,
//! then what it waits before its retry, then [`REGISTRATION_MS`] for the
//! round trips of a registration and the sampling.

use std::time::Duration;

use coord::{LivenessOptions, ProbeConfig, WatcherOptions};

use crate::faults::schedule::Case;

/// The round trips of a registration (grant, put, keep-alive open), the
/// simulated network's latency and queueing in a fleet, and the 100 ms
/// sampling that observes it.
pub const REGISTRATION_MS: u64 = 500;

/// A page of a listing: one round trip of the simulated network, with
/// etcd's queue in a large fleet.
pub const LIST_PAGE_MS: u64 = 20;

/// What cleared a host's path to etcd, which decides how fast it must be
/// registered again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HealPath {
    /// The host's process restarted: it registers at once.
    Restart,
    /// The host resumed from a GC pause: a lease lost meanwhile is noticed
    /// at once (its timers are due), then a keep-alive answered "gone" and
    /// a grant follow, each after a first-attempt backoff.
    Pause,
    /// etcd had no leader and answers again: the host was refused at once
    /// (a fast failure), so its wait is at most the fast cap.
    LeaderChange,
    /// The host's partition ended: its prober finds etcd back within a
    /// probe interval (or a probe's timeout), then the wait is cut to at
    /// most half the fast cap.
    Partition,
    /// The host's partition ended within a probe interval of its start:
    /// the prober may have sent no probe into it, so it never saw a
    /// silence and cuts nothing; a request lost in the partition times out
    /// and is retried after its own backoff, up to the cap, as after
    /// [`UnansweredBlip`](HealPath::UnansweredBlip).
    PartitionBlip,
    /// etcd answers again after leaving requests unanswered for at least a
    /// request timeout: a request sent before may still be waited for
    /// (the request timeout), then the prober's cut applies.
    Unanswered,
    /// etcd answers again after leaving requests unanswered for less than
    /// a request timeout: no probe need have gone out meanwhile (nothing
    /// waited), so the prober may never have seen a silence; a request
    /// that lost its reply times out and is retried after its own backoff,
    /// up to the cap, as against a slow etcd.
    UnansweredBlip,
    /// etcd came back wiped: a host refused at once while it was down
    /// (fast) retries within the fast cap or the prober's cut; one that
    /// never saw the outage learns at its next keep-alive that its lease
    /// is gone. Either then registers within a fast-failure wait: after a
    /// first-attempt backoff (etcd answered "gone"), or, when its lease
    /// ran out at its own deadline first, after up to the fast cap.
    Wiped,
    /// Every fault healed at once: any of the above, so the longest.
    GlobalHeal,
    /// The host's lease was revoked from outside: its next keep-alive
    /// (within one keep-alive interval) is answered "gone", then it
    /// registers again after a first-attempt backoff (etcd answered, so
    /// earlier failures do not count). A keep-alive whose reply was lost
    /// just before is waited for first (see the checker).
    Revoked,
}

impl HealPath {
    /// The name in reports.
    pub fn label(self) -> &'static str {
        match self {
            HealPath::Restart => "host crash",
            HealPath::Pause => "GC pause",
            HealPath::LeaderChange => "leader change",
            HealPath::Partition => "partition",
            HealPath::PartitionBlip => "partition (blip)",
            HealPath::Unanswered => "unanswered requests",
            HealPath::UnansweredBlip => "unanswered requests (blip)",
            HealPath::Wiped => "etcd wiped",
            HealPath::GlobalHeal => "global heal",
            HealPath::Revoked => "lease revoked outside",
        }
    }
}

/// `d` in whole milliseconds (saturating).
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What disturbed a host watcher, which decides how soon its view must
/// be complete again after the disturbance ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WatchPath {
    /// The watcher's process started (or restarted): it lists the prefix
    /// at once.
    Restart,
    /// The watcher resumed from a GC pause: what its stream held is
    /// delivered at once; a stream that lost a message meanwhile is
    /// noticed like any silent stream.
    Pause,
    /// The watcher's consumer took events again after a stall: what the
    /// watcher kept is handed over at once.
    Stall,
    /// The watcher's partition ended: a stream that stalled is noticed by
    /// its own probe (quiet for the probe interval, then unanswered for a
    /// request timeout), or, when it was noticed during the partition, the
    /// prober finds etcd back and cuts the wait.
    Partition,
    /// etcd had no leader and answers again: the stream was broken at
    /// once and the retries refused at once (fast failures).
    LeaderChange,
    /// etcd answers again after leaving requests and stream messages
    /// unanswered: a stalled stream is noticed by its own probe, or a
    /// retry sent into the silence is given up as the prober finds etcd
    /// back.
    Unanswered,
    /// etcd answers again after leaving requests unanswered for less than
    /// a request timeout: no probe need have gone out meanwhile, so the
    /// prober may never have seen a silence; a request that lost its
    /// reply times out and is retried after its own backoff, up to the
    /// cap (as a host's [`HealPath::UnansweredBlip`]).
    UnansweredBlip,
    /// etcd came back wiped: the broken stream's retries were refused at
    /// once (fast failures), then its resume finds the revisions gone and
    /// the watcher lists again.
    Wiped,
    /// A compaction: a watcher resuming across it lists the prefix again.
    Compact,
    /// The member serving the watcher's watches went away and the one its
    /// resumed watches reached was behind what it had seen: each watch is
    /// cancelled and, after a first attempt's backoff, the watcher lists
    /// the prefix linearizably to tell a lagging member from a restore.
    LaggingMember,
}

impl WatchPath {
    /// Whether the catch-up after this path lists the prefix again.
    pub fn lists(self) -> bool {
        matches!(
            self,
            WatchPath::Restart | WatchPath::Compact | WatchPath::Wiped | WatchPath::LaggingMember
        )
    }

    /// The name in reports.
    pub fn label(self) -> &'static str {
        match self {
            WatchPath::Restart => "watcher start",
            WatchPath::Pause => "watcher GC pause",
            WatchPath::Stall => "consumer stall",
            WatchPath::Partition => "watcher partition",
            WatchPath::LeaderChange => "leader change",
            WatchPath::Unanswered => "unanswered requests",
            WatchPath::UnansweredBlip => "unanswered requests (blip)",
            WatchPath::Wiped => "etcd wiped",
            WatchPath::Compact => "compaction",
            WatchPath::LaggingMember => "lagging watch member",
        }
    }
}

/// The configured (nominal) parameters the bounds derive from.
#[derive(Debug, Clone, Default)]
pub struct Nominal {
    /// The hosts' options (the TTL is per host).
    pub liveness: LivenessOptions,
    /// Each process's prober.
    pub probe: ProbeConfig,
    /// The host watchers' options.
    pub watcher: WatcherOptions,
    /// How many hosts share the prefix: a lasting failure's retries wait
    /// for the host's fleet slot, up to `fleet` × the spacing (at most
    /// half the TTL). 0 for sessions, which count no fleet.
    pub fleet: usize,
}

impl Nominal {
    /// The election and lock processes' sessions: coord's session
    /// defaults (the TTL is per process).
    pub fn sessions() -> Nominal {
        let s = coord::SessionOptions::default();
        let liveness = LivenessOptions::default()
            .with_request_timeout(s.request_timeout)
            .with_backoff(s.backoff);
        Nominal {
            liveness: match s.refresh {
                Some(refresh) => liveness.with_refresh(refresh),
                None => liveness,
            },
            ..Nominal::default()
        }
    }

    /// The keep-alive interval of a host with `ttl_secs`: TTL/3 unless
    /// configured.
    pub fn refresh_ms(&self, ttl_secs: u64) -> u64 {
        self.liveness.refresh.map_or(ttl_secs.max(1) * 1000 / 3, ms)
    }

    /// How long a heal along `path` may take, for a host with `ttl_secs`.
    pub fn heal_ms(&self, path: HealPath, ttl_secs: u64) -> u64 {
        let b = &self.liveness.backoff;
        let initial = ms(b.initial);
        let fast_cap = ms(b.fast_cap.min(b.cap));
        // The prober finds etcd back within an interval, or a probe
        // timeout when the probe in flight at the clear was lost.
        let probe = ms(self.probe.interval.max(self.probe.request_timeout));
        let cut = fast_cap / 2;
        let request = ms(self.liveness.request_timeout);
        let refresh = self.refresh_ms(ttl_secs);
        let first_retries = initial + initial * u64::from(b.multiplier.max(1));
        let wait = match path {
            HealPath::Restart => 0,
            HealPath::Pause => first_retries,
            HealPath::LeaderChange => fast_cap.min(probe + cut),
            HealPath::Partition => probe + cut,
            HealPath::Unanswered | HealPath::GlobalHeal => request + cut,
            HealPath::UnansweredBlip | HealPath::PartitionBlip => request + ms(b.cap),
            HealPath::Wiped => fast_cap.min(probe + cut).max(refresh) + fast_cap,
            HealPath::Revoked => refresh + initial,
        };
        wait + self.slot_ms(ttl_secs) + REGISTRATION_MS
    }

    /// The longest a retry waits for the host's fleet slot: the slots'
    /// period, `fleet` × the spacing, at most half the TTL.
    pub fn slot_ms(&self, ttl_secs: u64) -> u64 {
        self.liveness.fleet_spacing.map_or(0, |spacing| {
            let fleet = u64::try_from(self.fleet).unwrap_or(u64::MAX);
            ms(spacing).saturating_mul(fleet).min(ttl_secs * 1000 / 2)
        })
    }

    /// How long a listing of a prefix of `hosts` keys may take: every page
    /// of it ([`LIST_PAGE_MS`] per key).
    pub fn listing_ms(&self, hosts: usize) -> u64 {
        LIST_PAGE_MS.saturating_mul(u64::try_from(hosts).unwrap_or(u64::MAX))
    }

    /// How long after a partition that lost etcd's messages to it ended a
    /// subject may take to heal from what its stalled keep-alive stream
    /// never told it (a close, a TTL-0 reply): the first keep-alive after
    /// the lost message goes out within a keep-alive interval and counts
    /// as unanswered a request timeout later; the stream is reopened at
    /// once, and a lease found gone is granted anew after a first retry.
    pub fn stalled_heal_ms(&self, ttl_secs: u64) -> u64 {
        let b = &self.liveness.backoff;
        let initial = ms(b.initial);
        let first_retries = initial + initial * u64::from(b.multiplier.max(1));
        self.refresh_ms(ttl_secs)
            + ms(self.liveness.request_timeout)
            + first_retries
            + REGISTRATION_MS
    }

    /// How long after its lease is revoked from outside a host may still
    /// report it: until its next keep-alive is answered, one keep-alive
    /// interval plus the sampling.
    pub fn learns_revoke_ms(&self, ttl_secs: u64) -> u64 {
        self.refresh_ms(ttl_secs) + 2 * ms(crate::history::SAMPLE_EVERY)
    }

    /// How long after a disturbance along `path` ends a host watcher of a
    /// fleet of `hosts` may still miss what etcd holds. A path that lists
    /// the prefix again (a start, a compaction, a wipe) also reads every
    /// page of it: [`LIST_PAGE_MS`] per host, pages of one key being the
    /// smallest the simulator uses.
    pub fn catch_up_ms(&self, path: WatchPath, hosts: usize) -> u64 {
        let o = &self.watcher;
        let b = &o.backoff;
        let initial = ms(b.initial);
        let fast_cap = ms(b.fast_cap.min(b.cap));
        let probe = ms(self.probe.interval.max(self.probe.request_timeout));
        let cut = fast_cap / 2;
        // A stream that stalled just before the path cleared: quiet for a
        // probe interval, then its progress request unanswered for a
        // request timeout; the retry follows a first-attempt backoff.
        let silent = ms(o.probe_interval) + ms(o.request_timeout) + initial;
        let wait = match path {
            WatchPath::Restart | WatchPath::Stall | WatchPath::Compact => 0,
            WatchPath::Pause => silent,
            WatchPath::Partition | WatchPath::Unanswered => silent.max(probe + cut),
            WatchPath::LeaderChange | WatchPath::Wiped => fast_cap.min(probe + cut),
            WatchPath::UnansweredBlip => ms(o.request_timeout) + ms(b.cap),
            // The resume's read-back and watch, then the check after a
            // first attempt's delay (its backoff starts over).
            WatchPath::LaggingMember => initial * 2,
        };
        let listing = if path.lists() {
            self.listing_ms(hosts)
        } else {
            0
        };
        wait + listing + REGISTRATION_MS
    }
}

/// How long after the heal every host must be registered again: one
/// request deadline (a request lost at the heal), the backoff cap (jitter
/// included: equal jitter never exceeds the ceiling), and 4 s for the round
/// trips of a registration.
pub fn heal_bound() -> Duration {
    let o = LivenessOptions::default();
    o.request_timeout + o.backoff.cap + Duration::from_secs(4)
}

/// How long after the heal (or after its last disturbance) a watcher's
/// view must equal etcd's: a silent stream is noticed within the probe
/// interval plus a request timeout, the retry waits at most the backoff
/// cap, and 4 s covers the round trips of a resume or re-list.
pub fn watcher_bound() -> Duration {
    let o = WatcherOptions::default();
    o.probe_interval + o.request_timeout + o.backoff.cap + Duration::from_secs(4)
}

/// How long a watcher's view may be stale while its `status()` still says
/// `Watching`: a silent stream is noticed within the probe interval plus a
/// request timeout; 1 s more for delivery.
pub fn says_stale_bound() -> Duration {
    let o = WatcherOptions::default();
    o.probe_interval + o.request_timeout + Duration::from_secs(1)
}

/// How long after the heal every name with a live contender must have a
/// leader: the longest TTL (a dead leader's key expires) plus expiry slack,
/// then a silent queue watch noticed within the probe interval plus a
/// request timeout, the retry waiting at most the backoff cap, and 4 s for
/// the round trips of a join.
pub fn election_bound(case: &Case) -> Duration {
    let o = coord::SessionOptions::default();
    let ttl = case
        .contenders
        .iter()
        .map(|c| c.ttl)
        .max()
        .unwrap_or(2)
        .max(2);
    Duration::from_secs(ttl)
        + EXPIRY_SLACK
        + o.probe_interval
        + o.request_timeout
        + o.backoff.cap
        + Duration::from_secs(4)
}

/// Extra time after a host's TTL before its crashed key must be gone: the
/// lessor checks every 500 ms, plus 1 s of slack.
pub const EXPIRY_SLACK: Duration = Duration::from_millis(1500);

/// How long the run stays healed before the hosts are stopped, beyond the
/// bounds, so the checker sees a settled stretch.
pub const SETTLED: Duration = Duration::from_secs(10);
