//! coord's metrics, through the `metrics` facade: the application picks
//! the exporter (coordctl serves Prometheus' text format). Without an
//! exporter installed, recording costs a lookup and does nothing.
//!
//! Every name, its labels and unit (the README's "Metrics" section lists
//! them too). No label holds a host id, key or lease, so cardinality stays
//! bounded whatever the fleet.
//!
//! | name | kind | labels | unit |
//! |---|---|---|---|
//! | `coord_lease_registrations_total` | counter | `handle` | first registrations |
//! | `coord_lease_heals_total` | counter | `handle`, `resumed` | registrations after a loss |
//! | `coord_lease_losses_total` | counter | `handle`, `reason` | leases declared lost |
//! | `coord_lease_remaining_seconds` | gauge | `handle` | seconds the lease provably lives, as of the handle's last step |
//! | `coord_keepalive_rtt_seconds` | histogram | | keep-alive send to its reply |
//! | `coord_watcher_events_total` | counter | `kind` | events handed to watchers |
//! | `coord_watcher_resyncs_total` | counter | `reason` | views rebuilt from a fresh listing |
//! | `coord_watcher_revision` | gauge | | etcd revision of the last watcher event (lag: etcd's revision minus this) |
//! | `coord_elections_won_total` | counter | | campaigns and locks that began leading |
//! | `coord_elections_lost_total` | counter | `reason` | leaderships and campaigns lost against the holder's will |
//! | `coord_campaign_wait_seconds` | histogram | | campaign (or lock) start to leading |
//! | `coord_failover_seconds` | histogram | | at an observer: no leader to a new leader |
//!
//! Label values: `handle` is `liveness` or `session`; a loss `reason` is
//! `stream_closed`, `lease_expired` or `keepalive_timeout` (leases) and
//! `key_deleted`, `lease_lost` or `session_closed` (elections); `resumed`
//! is `true` or `false`; `kind` is `up`, `updated`, `down`, `synced`,
//! `resynced` or `retrying`; a resync `reason` is `compacted`,
//! `revision_went_back`, `history_diverged` or `cluster_changed` (see
//! [`ResyncReason`]).

use std::time::Duration;

use coord_core::election::Loss;
use coord_core::lease::LostReason;
use coord_core::watcher::ResyncReason;

/// First registrations of a lease (`handle`).
pub const LEASE_REGISTRATIONS: &str = "coord_lease_registrations_total";
/// Registrations after a loss (`handle`, `resumed`).
pub const LEASE_HEALS: &str = "coord_lease_heals_total";
/// Leases declared lost (`handle`, `reason`).
pub const LEASE_LOSSES: &str = "coord_lease_losses_total";
/// Seconds the lease provably lives (`handle`).
pub const LEASE_REMAINING: &str = "coord_lease_remaining_seconds";
/// Keep-alive round trips, in seconds.
pub const KEEPALIVE_RTT: &str = "coord_keepalive_rtt_seconds";
/// Watcher events (`kind`).
pub const WATCHER_EVENTS: &str = "coord_watcher_events_total";
/// Watcher resyncs (`reason`).
pub const WATCHER_RESYNCS: &str = "coord_watcher_resyncs_total";
/// Revision of the last watcher event.
pub const WATCHER_REVISION: &str = "coord_watcher_revision";
/// Campaigns and locks that began leading.
pub const ELECTIONS_WON: &str = "coord_elections_won_total";
/// Leaderships and campaigns lost (`reason`).
pub const ELECTIONS_LOST: &str = "coord_elections_lost_total";
/// Campaign start to leading, in seconds.
pub const CAMPAIGN_WAIT: &str = "coord_campaign_wait_seconds";
/// No leader to a new leader at an observer, in seconds.
pub const FAILOVER: &str = "coord_failover_seconds";

/// Every metric's name, for exporters that want them described up front.
pub const NAMES: [&str; 12] = [
    LEASE_REGISTRATIONS,
    LEASE_HEALS,
    LEASE_LOSSES,
    LEASE_REMAINING,
    KEEPALIVE_RTT,
    WATCHER_EVENTS,
    WATCHER_RESYNCS,
    WATCHER_REVISION,
    ELECTIONS_WON,
    ELECTIONS_LOST,
    CAMPAIGN_WAIT,
    FAILOVER,
];

pub(crate) fn lease_registered(handle: &'static str) {
    metrics::counter!(LEASE_REGISTRATIONS, "handle" => handle).increment(1);
}

pub(crate) fn lease_healed(handle: &'static str, resumed: bool) {
    let resumed = if resumed { "true" } else { "false" };
    metrics::counter!(LEASE_HEALS, "handle" => handle, "resumed" => resumed).increment(1);
}

pub(crate) fn lease_lost(handle: &'static str, reason: &LostReason) {
    let reason = match reason {
        LostReason::StreamClosed(_) => "stream_closed",
        LostReason::LeaseExpired => "lease_expired",
        LostReason::KeepAliveTimeout => "keepalive_timeout",
        _ => "other",
    };
    metrics::counter!(LEASE_LOSSES, "handle" => handle, "reason" => reason).increment(1);
}

pub(crate) fn lease_remaining(handle: &'static str, remaining: Option<Duration>) {
    metrics::gauge!(LEASE_REMAINING, "handle" => handle)
        .set(remaining.map_or(0.0, |r| r.as_secs_f64()));
}

pub(crate) fn keepalive_rtt(rtt: Duration) {
    metrics::histogram!(KEEPALIVE_RTT).record(rtt.as_secs_f64());
}

pub(crate) fn watcher_event(kind: &'static str, revision: Option<i64>) {
    metrics::counter!(WATCHER_EVENTS, "kind" => kind).increment(1);
    if let Some(revision) = revision {
        // A gauge holds an f64: exact for any revision below 2^53.
        #[allow(clippy::cast_precision_loss)]
        metrics::gauge!(WATCHER_REVISION).set(revision as f64);
    }
}

pub(crate) fn watcher_resynced(reason: &ResyncReason) {
    let reason = match reason {
        ResyncReason::Compacted { .. } => "compacted",
        ResyncReason::RevisionWentBack { .. } => "revision_went_back",
        ResyncReason::HistoryDiverged { .. } => "history_diverged",
        ResyncReason::ClusterChanged { .. } => "cluster_changed",
        _ => "other",
    };
    metrics::counter!(WATCHER_RESYNCS, "reason" => reason).increment(1);
}

pub(crate) fn election_won(waited: Duration) {
    metrics::counter!(ELECTIONS_WON).increment(1);
    metrics::histogram!(CAMPAIGN_WAIT).record(waited.as_secs_f64());
}

pub(crate) fn election_lost(loss: &Loss) {
    let reason = match loss {
        Loss::KeyDeleted => "key_deleted",
        Loss::LeaseLost(_) => "lease_lost",
        Loss::SessionClosed => "session_closed",
        _ => "other",
    };
    metrics::counter!(ELECTIONS_LOST, "reason" => reason).increment(1);
}

pub(crate) fn failover(took: Duration) {
    metrics::histogram!(FAILOVER).record(took.as_secs_f64());
}
