//! A watcher process: the real `HostWatcher` on a node of its own, and its
//! consumer (which may stall), recorded as they go.

use std::sync::Arc;
use std::time::Duration;

use coord::{HostEvent, HostMetadata, HostWatcher, WatcherOptions};
use madsim::time::sleep;

use crate::history::{
    host_index, Entry, HostView, SeenRecord, WatcherEventKind, WatcherEventRecord,
};

use crate::faults::schedule::Generator;
use crate::world::fleet::{fleet, Variant, World};

/// The options every simulated watcher uses: coord's defaults, a seed,
/// retrying the first snapshot, and pages of 1-3 keys, so every listing of
/// a fleet is read in several pages (and compactions land between them).
pub fn watcher_options(seed: u64) -> WatcherOptions {
    WatcherOptions::default()
        .with_seed(seed)
        .with_retry_first_snapshot(true)
        .with_page_size(1 + u32::try_from(seed % 3).unwrap_or(0))
}

/// The options of watcher `i` in a case of `generator`: from V6 on,
/// watcher 0 lists serializably (a stale member may answer it) and every
/// buffer holds one event (a stalled consumer soon fills it, so the
/// watcher stops reading its stream); from V7 on, watcher 1's loop runs
/// inside its consumer's `next()`.
pub(crate) fn watcher_options_for(i: usize, mixed: u64, generator: Generator) -> WatcherOptions {
    let opts = watcher_options(mixed);
    match generator {
        Generator::V1 | Generator::V2 | Generator::V3 | Generator::V4 | Generator::V5 => opts,
        Generator::V6 => opts.with_serializable(i == 0).with_buffer(1),
        Generator::V7 | Generator::V8 | Generator::V9 | Generator::V10 => opts
            .with_serializable(i == 0)
            .with_buffer(1)
            .with_driving(if i == 1 {
                coord::Driving::InNext
            } else {
                coord::Driving::Adaptive
            }),
    }
}

/// Waits while watcher `i`'s consumer is stalled.
pub(crate) async fn consumer_stall(w: &World, i: usize) {
    loop {
        let until = fleet(&w.fleet).watchers[i].stall_until;
        let now = w.now();
        if now >= until {
            return;
        }
        // In steps: the heal may end the stall early.
        sleep(Duration::from_millis((until - now).min(100))).await;
    }
}

/// One watcher process: records every event its consumer takes, and
/// publishes its `view()` for the observer; it also observes every
/// election name and records what it sees.
pub(crate) async fn watcher_agent<W: Variant>(
    w: World,
    wrap: W,
    (i, seed, generator): (usize, u64, Generator),
    names: Vec<String>,
) {
    let id = (1 << 48) | u64::try_from(i).unwrap_or(0);
    let Some(etcd) = w.client(id).await else {
        return;
    };
    let api = wrap.wrap(etcd);
    let mixed = seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for name in names {
        let opts = coord::SessionOptions::default().with_seed(
            name.bytes()
                .fold(mixed, |h, b| h.wrapping_mul(31) ^ u64::from(b)),
        );
        let Ok(mut observe) = coord::Observe::start_with(api.clone(), &name, &opts) else {
            continue;
        };
        let w = w.clone();
        madsim::task::spawn(async move {
            while let Some(seen) = observe.next().await {
                w.record(Entry::Observed {
                    watcher: i,
                    name: name.clone(),
                    leader: seen.leader.map(|l| (l.key.to_string(), l.token.0, l.value)),
                    revision: seen.revision.0,
                    reset: seen.reset.is_some(),
                });
            }
        });
    }
    let opts = wrap.watcher_options(watcher_options_for(i, mixed, generator));
    let Ok(mut watcher) = HostWatcher::<HostMetadata>::new(api, opts).await else {
        return;
    };
    loop {
        // The view changes only as events are taken: publish it then. A
        // key that is not a simulated host is published as index MAX, which
        // no host has, so the checker sees the invention.
        let view: HostView = watcher
            .view()
            .into_iter()
            .map(|(h, r)| (host_index(&h).unwrap_or(usize::MAX), r.mod_revision.0))
            .collect();
        {
            let mut f = fleet(&w.fleet);
            f.watchers[i].view = Some(Arc::new(view));
            f.watchers[i].status.get_or_insert_with(|| watcher.status());
        }
        consumer_stall(&w, i).await;
        let Some(event) = watcher.next().await else {
            return;
        };
        let seen = |r: &coord::HostRecord<HostMetadata>| SeenRecord {
            mod_revision: r.mod_revision.0,
            lease: r.lease.0,
            raw: r.raw.clone(),
        };
        let bare = |kind, revision: coord::Revision| WatcherEventRecord {
            kind,
            host: None,
            mod_revision: None,
            revision: revision.0,
            record: None,
            previous: None,
        };
        let record = match event {
            HostEvent::Up {
                host,
                record,
                revision,
            } => WatcherEventRecord {
                kind: WatcherEventKind::Up,
                host: Some(host),
                mod_revision: Some(record.mod_revision.0),
                revision: revision.0,
                record: Some(seen(&record)),
                previous: None,
            },
            HostEvent::Updated {
                host,
                record,
                previous,
                revision,
            } => WatcherEventRecord {
                kind: WatcherEventKind::Updated,
                host: Some(host),
                mod_revision: Some(record.mod_revision.0),
                revision: revision.0,
                record: Some(seen(&record)),
                previous: Some(seen(&previous)),
            },
            HostEvent::Down {
                host,
                last_seen,
                revision,
            } => WatcherEventRecord {
                kind: WatcherEventKind::Down,
                host: Some(host),
                mod_revision: None,
                revision: revision.0,
                record: Some(seen(&last_seen)),
                previous: None,
            },
            HostEvent::Synced { revision } => bare(WatcherEventKind::Synced, revision),
            HostEvent::Reset { revision, .. } => bare(WatcherEventKind::Reset, revision),
            HostEvent::Resynced { revision, reason } => bare(
                match reason {
                    coord::ResyncReason::Compacted { .. } => WatcherEventKind::Resynced,
                    coord::ResyncReason::RevisionWentBack { .. }
                    | coord::ResyncReason::HistoryDiverged { .. }
                    | coord::ResyncReason::ClusterChanged { .. } => WatcherEventKind::Restored,
                    other => panic!("a resync reason the checker cannot judge: {other:?}"),
                },
                revision,
            ),
            HostEvent::Retrying { .. } => bare(WatcherEventKind::Retrying, coord::Revision(0)),
            other => panic!("a watcher event the checker cannot judge: {other:?}"),
        };
        w.record(Entry::WatcherEvent {
            watcher: i,
            event: record,
        });
    }
}
