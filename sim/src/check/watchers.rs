//! Watcher invariants (see [`crate::check`]): sound replay, convergence
//! after the heal, completeness while undisturbed; and watcher lag.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::check::bounds::{ms, says_stale_bound, watcher_bound, Nominal, WatchPath};
use crate::check::{Invariant, Verdict};
use crate::faults::schedule::{Fault, Target, WATCHERS};
use crate::history::{
    host_index, Condition, Entry, History, HostView, KeyChange, SeenRecord, WatcherEventKind,
    WatcherEventRecord, WatcherSample,
};

/// What disturbed watcher `w`, as (start, end, path): its own restarts,
/// partitions and pauses, etcd leader changes, wipes, unanswered
/// requests, compactions (a resume across one lists again), and lagging
/// watch members of its own. A disturbance still on at the end of the
/// history ends at `u64::MAX`.
pub(crate) fn watcher_disturbances(history: &History, w: usize) -> Vec<(u64, u64, WatchPath)> {
    let request_timeout = Nominal::default().watcher.request_timeout;
    let mut out: Vec<(u64, u64, WatchPath)> = history
        .records
        .iter()
        .filter_map(|r| match &r.what {
            Entry::Fault(Fault::Wipe { down_ms: ms, .. }) => {
                Some((r.at_ms, r.at_ms + ms, WatchPath::Wiped))
            }
            Entry::Fault(Fault::LeaderChange { unavailable_ms: ms }) => {
                Some((r.at_ms, r.at_ms + ms, WatchPath::LeaderChange))
            }
            Entry::Fault(Fault::DropReplies { ms }) => {
                let path = if Duration::from_millis(*ms) < request_timeout {
                    WatchPath::UnansweredBlip
                } else {
                    WatchPath::Unanswered
                };
                Some((r.at_ms, r.at_ms + ms, path))
            }
            Entry::Fault(Fault::Compact) => Some((r.at_ms, r.at_ms, WatchPath::Compact)),
            Entry::Fault(Fault::LaggingWatch { watcher }) if *watcher == w => {
                Some((r.at_ms, r.at_ms, WatchPath::LaggingMember))
            }
            _ => None,
        })
        .collect();
    let mut own = |path: WatchPath, spans: Vec<(u64, u64)>| {
        out.extend(spans.into_iter().map(|(s, e)| (s, e, path)));
    };
    own(
        WatchPath::Restart,
        history.spans(
            |what| matches!(what, Entry::Fault(Fault::Crash { target: Target::Watcher(watcher), .. }) if *watcher == w),
            |what| matches!(what, Entry::WatcherRestarted { watcher } if *watcher == w),
        ),
    );
    own(
        WatchPath::Partition,
        history.spans(
            |what| matches!(what, Entry::Fault(Fault::Partition { target: Target::Watcher(watcher), .. }) if *watcher == w),
            |what| matches!(what, Entry::WatcherPartitionEnded { watcher } if *watcher == w),
        ),
    );
    own(
        WatchPath::Pause,
        history.spans(
            |what| matches!(what, Entry::Fault(Fault::Pause { target: Target::Watcher(watcher), .. }) if *watcher == w),
            |what| matches!(what, Entry::WatcherResumed { watcher } if *watcher == w),
        ),
    );
    out
}

/// A watcher process's `disturbances` and its start, deferred (see
/// [`deferred`]), each with its catch-up bound for a prefix of `keys` keys:
/// (start, end, path, bound).
pub(crate) fn bounded(
    mut disturbances: Vec<(u64, u64, WatchPath)>,
    keys: usize,
) -> Vec<(u64, u64, WatchPath, u64)> {
    disturbances.push((0, 0, WatchPath::Restart));
    let nominal = Nominal::default();
    let mut out: Vec<(u64, u64, WatchPath, u64)> = deferred(disturbances)
        .into_iter()
        .map(|(s, e, p)| (s, e, p, nominal.catch_up_ms(p, keys)))
        .collect();
    // A disturbance that begins while a listing may still run (within the
    // catch-up of a path that lists) breaks it, and the listing starts
    // over from its first page after it: its catch-up lists too.
    let listings: Vec<(u64, u64)> = out
        .iter()
        .filter(|(_, _, p, _)| p.lists())
        .map(|(s, e, _, b)| (*s, e.saturating_add(*b)))
        .collect();
    for (s, _, p, bound) in &mut out {
        if !p.lists() && listings.iter().any(|(a, z)| *a <= *s && *s <= *z) {
            *bound = bound.saturating_add(nominal.listing_ms(keys));
        }
    }
    out
}

/// `disturbances` with each that ended while the watcher could not act
/// (paused, or its consumer stalled: its timers wait while the consumer
/// does not read) ending instead when it could act again: only then does
/// it notice a broken stream or a compaction, and catch up. A compaction
/// during any other disturbance ends with it too: the re-list it forces
/// comes when the watcher resumes.
fn deferred(mut disturbances: Vec<(u64, u64, WatchPath)>) -> Vec<(u64, u64, WatchPath)> {
    let spans: Vec<(u64, u64, WatchPath)> = disturbances.clone();
    for (_, e, p) in &mut disturbances {
        // Whether a span of kind `q` holds this disturbance's catch-up
        // back until it ends.
        let holds = |q: WatchPath| match *p {
            WatchPath::Pause | WatchPath::Stall => false,
            WatchPath::Compact => q != WatchPath::Compact,
            _ => matches!(q, WatchPath::Pause | WatchPath::Stall),
        };
        // Spans may overlap: follow them to the last.
        while let Some(later) = spans
            .iter()
            .filter(|(s2, e2, q)| holds(*q) && *s2 <= *e && *e < *e2)
            .map(|(_, e2, _)| *e2)
            .max()
        {
            *e = later;
        }
    }
    disturbances
}

/// Stalls (start, end) of watcher `w`'s consumer; one still on at the end
/// of the history ends at `u64::MAX`.
fn consumer_stalls(history: &History, w: usize) -> Vec<(u64, u64)> {
    history.spans(
        |what| matches!(what, Entry::Fault(Fault::ConsumerStall { watcher, .. }) if *watcher == w),
        |what| matches!(what, Entry::ConsumerStallEnded { watcher } if *watcher == w),
    )
}

/// Windows during which a stale member answered serializable reads.
fn stale_read_windows(history: &History) -> Vec<(u64, u64)> {
    history
        .records
        .iter()
        .filter_map(|r| match &r.what {
            Entry::Fault(Fault::StaleReads { ms, .. }) => Some((r.at_ms, r.at_ms + ms)),
            _ => None,
        })
        .collect()
}

/// A stalled consumer breaks nothing: a watcher with no other disturbance
/// from a watcher bound before a stall of its consumer until the retry
/// (its own faults, etcd-wide faults, a stale member) never retries during
/// the stall or in the 2 s after it (while it hands over what it kept).
/// Coord's own timers wait while the consumer does not read, so its
/// streams are not judged silent. Each quiet stall counts as a check.
fn check_stalls(
    history: &History,
    others: &[Vec<(u64, u64, WatchPath)>],
    stalls: &[Vec<(u64, u64)>],
    v: &mut Verdict,
) {
    let bound = ms(watcher_bound());
    let stale = stale_read_windows(history);
    for (w, (others, stalls)) in others.iter().zip(stalls).enumerate() {
        let quiet = |s: u64, t: u64| {
            others
                .iter()
                .map(|(ds, de, _)| (ds, de))
                .chain(stale.iter().map(|(ds, de)| (ds, de)))
                .all(|(ds, de)| de.saturating_add(bound) < s || *ds > t)
        };
        v.checks += stalls
            .iter()
            .filter(|(s, e)| quiet(*s, e.saturating_add(2000)))
            .count() as u64;
        for r in &history.records {
            let Entry::WatcherEvent { watcher, event } = &r.what else {
                continue;
            };
            if *watcher != w || event.kind != WatcherEventKind::Retrying {
                continue;
            }
            let t = r.at_ms;
            let during = stalls
                .iter()
                .find(|(s, e)| *s <= t && t <= e.saturating_add(2000) && quiet(*s, t));
            if let Some((s, e)) = during {
                v.violate(
                    Invariant::StallBreaksNothing,
                    t,
                    None,
                    format!(
                        "watcher {w}: retried during its consumer's stall ({s}-{e} ms) with nothing else disturbing it"
                    ),
                );
            }
        }
    }
}

pub(crate) fn watchers(
    history: &History,
    fleet: usize,
    heal_at: Option<u64>,
    stop_all_at: Option<u64>,
    v: &mut Verdict,
) {
    let bound = ms(watcher_bound());
    // When each revision was made, in the order made: revisions start over
    // after a wipe, so the map is built as time passes (a revision then
    // means the latest one made with that number).
    let made: Vec<(i64, u64)> = history
        .records
        .iter()
        .find_map(|r| match &r.what {
            Entry::RevisionTimes(t) => Some(t.clone()),
            _ => None,
        })
        .unwrap_or_default();
    let mut revision_times: BTreeMap<i64, u64> = BTreeMap::new();
    let mut made_applied = 0;
    let own: Vec<Vec<(u64, u64, WatchPath)>> = (0..WATCHERS)
        .map(|w| watcher_disturbances(history, w))
        .collect();
    let stalls: Vec<Vec<(u64, u64)>> = (0..WATCHERS).map(|w| consumer_stalls(history, w)).collect();
    check_stalls(history, &own, &stalls, v);
    // Everything a watcher must catch up after, each with its own bound:
    // its start, its own faults and etcd's, and its consumer's stalls (a
    // stalled consumer takes nothing: its view lags for the stall).
    let disturbed: Vec<Vec<(u64, u64, WatchPath, u64)>> = own
        .into_iter()
        .zip(&stalls)
        .map(|(mut d, s)| {
            d.extend(s.iter().map(|(s, e)| (*s, *e, WatchPath::Stall)));
            bounded(d, fleet)
        })
        .collect();
    let settled = |w: usize, t: u64| {
        disturbed[w]
            .iter()
            .all(|(s, e, _, b)| e.saturating_add(*b) < t || *s > t)
    };
    // Per watcher, each end of a disturbance that left nothing else of
    // its on or within its bound: (end, path, bound), in time order; the
    // time the watcher's view then takes to be complete is measured
    // against its bound.
    let mut clears: Vec<Vec<(u64, WatchPath, u64)>> = disturbed
        .iter()
        .map(|d| {
            let mut c: Vec<(u64, WatchPath, u64)> = d
                .iter()
                .filter(|(_, e, _, _)| *e != u64::MAX)
                .enumerate()
                // Nothing else still on, or still within its bound: the
                // catch-up is this path's alone.
                .filter(|(i, (_, e, _, _))| {
                    !d.iter().enumerate().any(|(j, (s2, e2, _, b2))| {
                        j != *i && s2 <= e && *e <= e2.saturating_add(*b2) && !(e2 == e && s2 == e)
                    })
                })
                .map(|(_, (_, e, p, b))| (*e, *p, *b))
                .collect();
            c.sort_unstable();
            c.dedup_by_key(|c| c.0);
            c
        })
        .collect();
    // Replayed views, the last revision seen, and whether synced.
    let mut views: Vec<HostView> = vec![HostView::new(); WATCHERS];
    // The full record each watcher's events gave each host.
    let mut records: Vec<BTreeMap<usize, SeenRecord>> = vec![BTreeMap::new(); WATCHERS];
    // Every put etcd applied to a host key: (host, mod revision) -> when,
    // and what it wrote (several after wipes, which restart revisions).
    let mut puts: BTreeMap<(usize, i64), Vec<(u64, SeenRecord)>> = BTreeMap::new();
    for r in &history.records {
        if let Entry::HostPuts(all) = &r.what {
            for (at, host, record) in all {
                puts.entry((*host, record.mod_revision))
                    .or_default()
                    .push((*at, record.clone()));
            }
        }
    }
    let mut last_rev = [0i64; WATCHERS];
    // Per watcher: a `Reset` announced and its `Restored` not yet come
    // (the difference in between may have lower revisions).
    let mut resetting = [false; WATCHERS];
    // The exact truth: every host-key change, in time order.
    let changes: Vec<KeyChange> = history
        .records
        .iter()
        .find_map(|r| match &r.what {
            Entry::KeyChanges(c) => Some(c.clone()),
            _ => None,
        })
        .unwrap_or_default();
    // The same changes by etcd's history (each wipe starts one), in
    // revision order within each: what etcd held at any revision.
    let mut histories: BTreeMap<u32, Vec<&KeyChange>> = BTreeMap::new();
    for c in &changes {
        histories.entry(c.history).or_default().push(c);
    }
    // Wipes so far: the histories a view may come from.
    let mut wipes_seen = 0u32;
    // Per host, from the change log up to the current record: its key's
    // mod revision (None: absent) and when it last changed.
    let mut etcd: BTreeMap<usize, (Option<i64>, u64)> = BTreeMap::new();
    let mut applied = 0;
    // The latest sample of etcd (for convergence).
    let mut truth_now: Option<HostView> = None;
    let convergence_at = heal_at.map(|h| h + bound);
    // Per watcher: since when its view has been stale while it said
    // `Watching`.
    let mut silent_since: Vec<Option<u64>> = vec![None; WATCHERS];
    // Per watcher: when it last resumed from a pause or restarted (it
    // cannot notice anything while paused).
    let mut awake_since: Vec<u64> = vec![0; WATCHERS];
    // Per watcher: whether its consumer is stalled (its view then waits).
    let mut stalled = [false; WATCHERS];
    // Per watcher: wipes since its start not yet matched by a restore it
    // reported (a restore reported without one is a view gone back for
    // nothing, e.g. a stale member's listing taken for etcd's truth; one
    // restore may cover several wipes).
    let mut wiped = [0u32; WATCHERS];
    // Per watcher: compactions since its start not yet matched by a
    // `Resynced` (each compaction makes a watcher re-list at most once: a
    // listing is never behind the compaction it was read for, so a re-list
    // without a new compaction is a loop).
    let mut compactions = [0u32; WATCHERS];
    let mut compacted_ever = false;
    let mut convergence_checked = false;
    for r in &history.records {
        for (rev, t) in made[made_applied..]
            .iter()
            .take_while(|(_, t)| *t <= r.at_ms)
        {
            revision_times.insert(*rev, *t);
            made_applied += 1;
        }
        match &r.what {
            Entry::Fault(Fault::Wipe { .. }) => {
                wipes_seen += 1;
                for n in &mut wiped {
                    *n += 1;
                }
            }
            Entry::Fault(Fault::Compact) => {
                compacted_ever = true;
                for n in &mut compactions {
                    *n += 1;
                }
            }
            Entry::Fault(Fault::ConsumerStall { watcher, .. }) => {
                if let Some(s) = stalled.get_mut(*watcher) {
                    *s = true;
                }
            }
            Entry::ConsumerStallEnded { watcher } => {
                if let (Some(s), Some(a)) =
                    (stalled.get_mut(*watcher), awake_since.get_mut(*watcher))
                {
                    *s = false;
                    *a = r.at_ms;
                }
            }
            Entry::WatcherResumed { watcher } => {
                if let Some(a) = awake_since.get_mut(*watcher) {
                    *a = r.at_ms;
                }
            }
            Entry::WatcherRestarted { watcher } => {
                // A new watcher: it starts from a snapshot.
                let w = *watcher;
                if let Some(a) = awake_since.get_mut(w) {
                    *a = r.at_ms;
                }
                if w < WATCHERS {
                    views[w].clear();
                    records[w].clear();
                    last_rev[w] = 0;
                    resetting[w] = false;
                    wiped[w] = 0;
                    // Its first listing may come from a member behind the
                    // last compaction: one re-list for it.
                    compactions[w] = u32::from(compacted_ever);
                }
            }
            Entry::WatcherEvent { watcher, event } => {
                let w = *watcher;
                let Some(view) = views.get_mut(w) else {
                    continue;
                };
                match event.kind {
                    WatcherEventKind::Retrying => continue,
                    WatcherEventKind::Resynced => {
                        v.checks += 1;
                        if compactions[w] == 0 {
                            v.violate(
                                Invariant::WatcherSound,
                                r.at_ms,
                                None,
                                format!(
                                    "watcher {w}: re-listed at revision {} after a compaction it had already re-listed for",
                                    event.revision
                                ),
                            );
                        }
                        compactions[w] = compactions[w].saturating_sub(1);
                    }
                    // A restore is announced before its difference:
                    // revisions start over here, and only here.
                    WatcherEventKind::Reset => {
                        v.checks += 1;
                        if wiped[w] == 0 {
                            v.violate(
                                Invariant::WatcherSound,
                                r.at_ms,
                                None,
                                format!(
                                    "watcher {w}: reported a restore at revision {} (from {}) but etcd was not restored",
                                    event.revision, last_rev[w]
                                ),
                            );
                        }
                        wiped[w] = wiped[w].saturating_sub(1);
                        resetting[w] = true;
                        last_rev[w] = event.revision;
                    }
                    // The restore's difference is complete.
                    WatcherEventKind::Restored => {
                        v.checks += 1;
                        if !std::mem::take(&mut resetting[w]) {
                            v.violate(
                                Invariant::WatcherSound,
                                r.at_ms,
                                None,
                                format!(
                                    "watcher {w}: a restore's resync at revision {} was not announced before its difference",
                                    event.revision
                                ),
                            );
                        }
                    }
                    _ if event.revision < last_rev[w] => {
                        v.violate(
                            Invariant::WatcherSound,
                            r.at_ms,
                            None,
                            format!(
                                "watcher {w}: revision went back from {} to {} without a reset announced first",
                                last_rev[w], event.revision
                            ),
                        );
                    }
                    _ => {}
                }
                last_rev[w] = last_rev[w].max(event.revision);
                v.checks += 1;
                let host = event.host.clone().unwrap_or_default();
                // A host that is not in the fleet was invented.
                let index = host_index(&host).unwrap_or(usize::MAX);
                let ok = match event.kind {
                    WatcherEventKind::Up => {
                        index != usize::MAX
                            && view
                                .insert(index, event.mod_revision.unwrap_or(0))
                                .is_none()
                    }
                    WatcherEventKind::Updated => view
                        .insert(index, event.mod_revision.unwrap_or(0))
                        .is_some(),
                    WatcherEventKind::Down => view.remove(&index).is_some(),
                    WatcherEventKind::Synced
                    | WatcherEventKind::Resynced
                    | WatcherEventKind::Reset
                    | WatcherEventKind::Restored
                    | WatcherEventKind::Retrying => true,
                };
                if !ok {
                    v.violate(
                        Invariant::WatcherSound,
                        r.at_ms,
                        None,
                        format!(
                            "watcher {w}: {:?} for {host} does not apply to its view",
                            event.kind
                        ),
                    );
                }
                // Bookmarkable: at a bookmark, every change up to its
                // revision is in the view, and none after it.
                if matches!(
                    event.kind,
                    WatcherEventKind::Synced
                        | WatcherEventKind::Resynced
                        | WatcherEventKind::Restored
                ) {
                    v.checks += 1;
                    if let Some(problem) =
                        bookmark_problem(view, event.revision, &histories, wipes_seen)
                    {
                        v.violate(
                            Invariant::WatcherBookmarks,
                            r.at_ms,
                            None,
                            format!(
                                "watcher {w}: {:?} at revision {}: {problem}",
                                event.kind, event.revision
                            ),
                        );
                    }
                }
                // Unique: an `Updated` always brings a record other than
                // the one it replaces (a replayed put brings none).
                if event.kind == WatcherEventKind::Updated {
                    v.checks += 1;
                    if event.record.is_some() && event.record == event.previous {
                        v.violate(
                            Invariant::WatcherSound,
                            r.at_ms,
                            None,
                            format!(
                                "watcher {w}: Updated for {host} repeats the record it replaces, {:?}",
                                event.record
                            ),
                        );
                    }
                }
                if let Some(problem) = check_record(r.at_ms, index, event, &mut records[w], &puts) {
                    v.checks += 1;
                    v.violate(
                        Invariant::WatcherRecords,
                        r.at_ms,
                        None,
                        format!("watcher {w}: {:?} for {host}: {problem}", event.kind),
                    );
                } else if event.record.is_some() {
                    v.checks += 1;
                }
                let live = matches!(
                    event.kind,
                    WatcherEventKind::Up | WatcherEventKind::Updated | WatcherEventKind::Down
                );
                if live && settled(w, r.at_ms) {
                    if let Some(made) = revision_times.get(&event.revision) {
                        v.lag_ms.push(r.at_ms.saturating_sub(*made));
                    }
                }
            }
            Entry::Sample(hosts) => {
                truth_now = Some(
                    hosts
                        .iter()
                        .enumerate()
                        .filter_map(|(i, s)| s.key_mod_revision.map(|m| (i, m)))
                        .collect(),
                );
            }
            Entry::WatcherSample(samples) => {
                let at = r.at_ms;
                for c in changes[applied..].iter().take_while(|c| c.at_ms <= at) {
                    etcd.insert(c.host, (c.present.then_some(c.revision), c.at_ms));
                    applied += 1;
                }
                let Some(truth) = truth_now.as_ref() else {
                    continue;
                };
                if !convergence_checked
                    && convergence_at.is_some_and(|c| at >= c)
                    && stop_all_at.is_none_or(|s| at < s)
                {
                    convergence_checked = true;
                    check_converged(at, truth, &views, samples, v);
                }
                for (w, view) in views.iter().enumerate() {
                    let since = if stalled[w] { u64::MAX } else { awake_since[w] };
                    check_says_stale(
                        (w, since),
                        at,
                        &etcd,
                        view,
                        samples.get(w),
                        &mut silent_since,
                        v,
                    );
                }
                for w in 0..WATCHERS {
                    let alive = samples
                        .get(w)
                        .is_some_and(|s| s.condition == Condition::Alive);
                    if !alive {
                        continue;
                    }
                    let missing = first_missing(at, &etcd, &views[w]);
                    caught_up(at, missing.is_none(), &disturbed[w], &mut clears[w], v);
                    if !settled(w, at) {
                        continue;
                    }
                    v.checks += 1;
                    if let Some((host, truth)) = missing {
                        v.violate(
                            Invariant::WatcherComplete,
                            at,
                            None,
                            format!(
                                "watcher {w}: host-{host} is {truth:?} in etcd (unchanged for 1 s) but {:?} in its view",
                                views[w].get(&host)
                            ),
                        );
                    }
                }
            }
            _ => {}
        }
    }
}

/// What is wrong with `view` as etcd's hosts at `revision`, or `None` if
/// some history etcd has had by now (at most `wipes` wipes into it; a
/// watcher may not have noticed the latest yet) held exactly those hosts,
/// at those mod revisions, at that revision.
fn bookmark_problem(
    view: &HostView,
    revision: i64,
    histories: &BTreeMap<u32, Vec<&KeyChange>>,
    wipes: u32,
) -> Option<String> {
    let at = |changes: &[&KeyChange]| {
        let mut hosts = HostView::new();
        for c in changes.iter().take_while(|c| c.revision <= revision) {
            match c.present {
                true => hosts.insert(c.host, c.revision),
                false => hosts.remove(&c.host),
            };
        }
        hosts
    };
    let none = Vec::new();
    let held: Vec<HostView> = (0..=wipes)
        .map(|h| at(histories.get(&h).unwrap_or(&none)))
        .collect();
    (!held.iter().any(|hosts| hosts == view))
        .then(|| format!("its view is {view:?}, etcd held {held:?} (by history)"))
}

/// Every field of a host event against etcd's truth: an `Up` or `Updated`
/// reports a record etcd really wrote (key, mod revision, lease and value
/// of one put made by then, the mod revision at most the event's); an
/// `Updated`'s previous record and a `Down`'s last-seen record are exactly
/// what the watcher's events last gave that host. Updates `records`.
fn check_record(
    at: u64,
    host: usize,
    event: &WatcherEventRecord,
    records: &mut BTreeMap<usize, SeenRecord>,
    puts: &BTreeMap<(usize, i64), Vec<(u64, SeenRecord)>>,
) -> Option<String> {
    let record = event.record.as_ref();
    match event.kind {
        WatcherEventKind::Up | WatcherEventKind::Updated => {
            let Some(record) = record else {
                return Some("no record".into());
            };
            let problem = if event.mod_revision != Some(record.mod_revision)
                || record.mod_revision > event.revision
            {
                Some(format!(
                    "record at revision {} in an event at revision {}",
                    record.mod_revision, event.revision
                ))
            } else if !puts
                .get(&(host, record.mod_revision))
                .is_some_and(|ps| ps.iter().any(|(t, p)| *t <= at && p == record))
            {
                Some(format!("reports {record:?}, which etcd never wrote"))
            } else if event.kind == WatcherEventKind::Updated
                && event.previous.as_ref() != records.get(&host)
            {
                Some(format!(
                    "previous {:?}, but its events gave {:?}",
                    event.previous,
                    records.get(&host)
                ))
            } else {
                None
            };
            records.insert(host, record.clone());
            problem
        }
        WatcherEventKind::Down => {
            let last = records.remove(&host);
            (record != last.as_ref())
                .then(|| format!("last seen {record:?}, but its events gave {last:?}"))
        }
        WatcherEventKind::Synced
        | WatcherEventKind::Resynced
        | WatcherEventKind::Reset
        | WatcherEventKind::Restored
        | WatcherEventKind::Retrying => None,
    }
}

/// Never a silent stale view: a live watcher whose replayed view disagrees
/// with a host etcd has held unchanged for [`says_stale_bound`] (counted
/// from the watcher's last resume or restart, if later: paused, it cannot
/// notice anything) must not keep saying `Watching` for more than a
/// second.
fn check_says_stale(
    (w, awake_since): (usize, u64),
    at: u64,
    etcd: &BTreeMap<usize, (Option<i64>, u64)>,
    view: &HostView,
    sample: Option<&WatcherSample>,
    silent_since: &mut [Option<u64>],
    v: &mut Verdict,
) {
    let says_current =
        sample.is_some_and(|s| s.condition == Condition::Alive && s.says_current == Some(true));
    let settled = ms(says_stale_bound());
    let stale = etcd.iter().find(|(h, (truth, changed))| {
        (*changed).max(awake_since).saturating_add(settled) <= at && view.get(h).copied() != *truth
    });
    let (Some((host, (truth, _))), true) = (stale, says_current) else {
        silent_since[w] = None;
        return;
    };
    v.checks += 1;
    let since = *silent_since[w].get_or_insert(at);
    if at >= since + 1000 {
        v.violate(
            Invariant::WatcherSaysStale,
            at,
            None,
            format!(
                "watcher {w}: host-{host} is {truth:?} in etcd but {:?} in its view, and its status says Watching since {since} ms",
                view.get(host)
            ),
        );
        silent_since[w] = Some(at);
    }
}

fn check_converged(
    at: u64,
    truth: &HostView,
    views: &[HostView],
    samples: &[WatcherSample],
    v: &mut Verdict,
) {
    for (w, view) in views.iter().enumerate() {
        v.checks += 2;
        if view != truth {
            v.violate(
                Invariant::WatcherConverges,
                at,
                None,
                format!("watcher {w}: replayed events give {view:?}, etcd has {truth:?}"),
            );
        }
        let driver_view = samples.get(w).and_then(|s| s.view.as_deref());
        if driver_view != Some(truth) {
            v.violate(
                Invariant::WatcherConverges,
                at,
                None,
                format!("watcher {w}: view() is {driver_view:?}, etcd has {truth:?}"),
            );
        }
    }
}

/// The first host whose key has not changed for the last second (per
/// etcd's exact change log, folded into `etcd` up to `at`) but is not in
/// the replayed view exactly as etcd has it: (host, etcd's mod revision).
fn first_missing(
    at: u64,
    etcd: &BTreeMap<usize, (Option<i64>, u64)>,
    view: &HostView,
) -> Option<(usize, Option<i64>)> {
    // Hosts etcd never had but the view does: absent, and never changed.
    let unseen = view.keys().filter(|h| !etcd.contains_key(h));
    etcd.iter()
        .map(|(h, (truth, t))| (*h, *truth, Some(*t)))
        .chain(unseen.map(|h| (*h, None, None)))
        .filter(|(_, _, changed_at)| !changed_at.is_some_and(|t| t + 1000 > at))
        .find(|(host, truth, _)| view.get(host).copied() != *truth)
        .map(|(host, truth, _)| (host, truth))
}

/// Times a watcher's catch-up after each clear in `clears` (see
/// [`watchers`]): the first sample at or after the clear where its view is
/// `complete`, unless another disturbance of it began meanwhile. Each is
/// recorded by path and as a share of its path's bound.
fn caught_up(
    at: u64,
    complete: bool,
    disturbed: &[(u64, u64, WatchPath, u64)],
    clears: &mut Vec<(u64, WatchPath, u64)>,
    v: &mut Verdict,
) {
    clears.retain(|(e, path, bound)| {
        if *e > at {
            return true;
        }
        if disturbed.iter().any(|(s, _, _, _)| e < s && *s <= at) {
            return false;
        }
        if !complete {
            return true;
        }
        let took = at - e;
        v.catch_up_by_kind.push((path.label(), took));
        v.catch_up_permille_of_bound
            .push(took * 1000 / bound.max(&1));
        false
    });
}
