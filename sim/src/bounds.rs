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

use coord::{LivenessOptions, ProbeConfig};

/// The round trips of a registration (grant, put, keep-alive open), the
/// simulated network's latency and queueing in a fleet, and the 100 ms
/// sampling that observes it.
pub const REGISTRATION_MS: u64 = 500;

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
            HealPath::Unanswered => "unanswered requests",
            HealPath::UnansweredBlip => "unanswered requests (blip)",
            HealPath::Wiped => "etcd wiped",
            HealPath::GlobalHeal => "global heal",
            HealPath::Revoked => "lease revoked outside",
        }
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The configured (nominal) parameters the bounds derive from.
#[derive(Debug, Clone, Default)]
pub struct Nominal {
    /// The hosts' options (the TTL is per host).
    pub liveness: LivenessOptions,
    /// Each process's prober.
    pub probe: ProbeConfig,
}

impl Nominal {
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
            HealPath::UnansweredBlip => request + ms(b.cap),
            HealPath::Wiped => fast_cap.min(probe + cut).max(refresh) + fast_cap,
            HealPath::Revoked => refresh + initial,
        };
        wait + REGISTRATION_MS
    }

    /// How long after its lease is revoked from outside a host may still
    /// report it: until its next keep-alive is answered, one keep-alive
    /// interval plus the sampling.
    pub fn learns_revoke_ms(&self, ttl_secs: u64) -> u64 {
        self.refresh_ms(ttl_secs) + 2 * ms(crate::history::SAMPLE_EVERY)
    }
}
