//! The public election and lock calls against etcd's truth. The contender
//! processes drive every leadership through `Leadership` itself
//! (`is_leader`, `lost`, `proclaim`, `txn`, `resign`, `unlock`, and its
//! drop) and read through `Election::leader`, `try_campaign` and the
//! owning handle's `close`; each call's result is recorded and judged here
//! against etcd's change log and lease log:
//!
//! - **is_leader tells the truth**: a new leadership says it leads (when
//!   its process and etcd were undisturbed) and has not ended; one whose
//!   `lost()` fired, or that resigned, never says it leads; a probe never
//!   says both "leading" and "ended"; a guarded write that etcd applied was
//!   not preceded by "not leading" in an undisturbed process;
//! - **lost tells the truth**: `lost()` completes only once the leadership
//!   has ended, with the loss its handle then reports; never "resigned"
//!   for a handle that did not resign, never "session closed" before the
//!   process closed its session, and "key deleted" only once etcd deleted
//!   that key; a campaign that fails as lost with its key deleted had a
//!   key of its deleted by etcd since it began;
//! - **resign releases**: an undisturbed `resign()`/`unlock()` that
//!   returns `Ok` has deleted the key by then, and `lost()` says
//!   "resigned"; a dropped leadership's key is gone within a request
//!   timeout + 1 s;
//! - **proclaim applies**: a `proclaim` that returns `Ok` put its value on
//!   its own key (that create revision) by then;
//! - **leader() is linearizable**: `Election::leader` returns the name's
//!   oldest key (key, create revision, value) as etcd had it at some
//!   instant between the call and its return;
//! - **a try on an empty queue wins**: an undisturbed try that saw the
//!   name's queue empty from its start to its answer did not lose;
//! - **close revokes**: an undisturbed `close()` of the handle owning a
//!   session that returns `Ok` has ended the session's lease by then.

use std::collections::BTreeMap;

use crate::check::contenders::{disturbances, owner, prompt, undisturbed, ContenderEvents};
use crate::check::{lease_log, Invariant, Verdict};
use crate::history::{Aftermath, ContenderEvent, Entry, History, LogEntry, RESIGNED};

/// The loss `lost()` reports for a closed session.
const SESSION_CLOSED: &str = "the session was closed";
/// The loss `lost()` reports for a deleted key.
const KEY_DELETED: &str = "its key was deleted";

/// A queue's leader as compared: key, create revision, value.
type Oldest = Option<(String, i64, Vec<u8>)>;

/// Every change of each election or lock queue, by name (fenced
/// resources left out).
fn queues(log: &[LogEntry]) -> BTreeMap<&str, Vec<&LogEntry>> {
    let mut out: BTreeMap<&str, Vec<&LogEntry>> = BTreeMap::new();
    for e in log {
        if e.key.starts_with("/res/") {
            continue;
        }
        if let Some((name, _)) = e.key.split_once('/') {
            out.entry(name).or_default().push(e);
        }
    }
    out
}

/// The oldest key of a queue after each change of `changes` within
/// `[from, to]`, and before the first of them: every leader a read over
/// that span may linearize to.
fn leaders_over(changes: &[&LogEntry], from: u64, to: u64) -> Vec<Oldest> {
    let mut queue: BTreeMap<&str, (i64, &[u8])> = BTreeMap::new();
    let oldest = |q: &BTreeMap<&str, (i64, &[u8])>| -> Oldest {
        q.iter()
            .min_by_key(|(_, (create, _))| *create)
            .map(|(k, (create, value))| (k.to_string(), *create, value.to_vec()))
    };
    let mut out = Vec::new();
    let mut opened = false;
    for e in changes {
        if e.at_ms > to {
            break;
        }
        if e.at_ms >= from && !opened {
            out.push(oldest(&queue));
            opened = true;
        }
        if e.present {
            queue.insert(&e.key, (e.create_revision, &e.value));
        } else {
            queue.remove(e.key.as_str());
        }
        if opened {
            out.push(oldest(&queue));
        }
    }
    if !opened {
        out.push(oldest(&queue));
    }
    out
}

/// When etcd deleted the incarnation `(key, create revision)`, if it did.
fn deleted_at(log: &[LogEntry], key: &str, token: i64) -> Option<u64> {
    log.iter()
        .find(|e| !e.present && e.key == key && e.create_revision == token)
        .map(|e| e.at_ms)
}

/// Every key removed from outside (deleted, or its lease revoked): when,
/// and which.
fn removals(history: &History) -> Vec<(u64, &str)> {
    history
        .records
        .iter()
        .filter_map(|r| match &r.what {
            Entry::KeyRemovedOutside { key, .. } => Some((r.at_ms, key.as_str())),
            _ => None,
        })
        .collect()
}

/// Whether `key` was removed from outside within `[from, to]`.
fn removed_outside(removals: &[(u64, &str)], key: &str, from: u64, to: u64) -> bool {
    removals
        .iter()
        .any(|(at, k)| *at >= from && *at <= to && *k == key)
}

/// Checks every public-call invariant of the history and adds to `v`.
pub(super) fn check(
    history: &History,
    events: &ContenderEvents,
    log: &[LogEntry],
    owners: &BTreeMap<i64, u64>,
    contenders: usize,
    v: &mut Verdict,
) {
    let disturbed: Vec<Vec<(u64, u64)>> =
        (0..contenders).map(|c| disturbances(history, c)).collect();
    let queues = queues(log);
    // When the processes were told to stop (and so to close their
    // sessions).
    let stop_at = history
        .records
        .iter()
        .find(|r| matches!(r.what, Entry::StopAll))
        .map(|r| r.at_ms);
    let removals = removals(history);
    let leases = lease_log(history);
    let none = Vec::new();
    for r in &history.records {
        let Entry::Contender {
            contender: c,
            name,
            event,
            ..
        } = &r.what
        else {
            continue;
        };
        let (c, at) = (*c, r.at_ms);
        let calm = |from: u64, to: u64| disturbed.get(c).is_none_or(|d| undisturbed(d, from, to));
        match event {
            ContenderEvent::Elected {
                key, leads, ended, ..
            } => {
                v.checks += 1;
                if *ended || (!leads && calm(at, at)) {
                    v.violate(
                        Invariant::IsLeaderTruth,
                        at,
                        None,
                        format!("contender {c} elected with {key} for {name}: is_leader() {leads}, has_ended() {ended}"),
                    );
                }
            }
            ContenderEvent::Write {
                token,
                outcome: crate::history::WriteOutcome::Applied,
                leads: false,
                ..
            } if calm(at, at) => {
                v.checks += 1;
                v.violate(
                    Invariant::IsLeaderTruth,
                    at,
                    None,
                    format!("contender {c} said it did not lead {name} (token {token}), undisturbed, and etcd then applied its guarded write"),
                );
            }
            ContenderEvent::Lost { reason, after } => {
                v.checks += 1;
                lost_truth(events, log, c, name, at, reason, after, stop_at, v);
            }
            ContenderEvent::Failed { error, lost: true } if error.ends_with(KEY_DELETED) => {
                v.checks += 1;
                let began = events
                    .of(c, name)
                    .filter(|(t, e)| *t <= at && matches!(e, ContenderEvent::Started { .. }))
                    .last()
                    .map_or(0, |(t, _)| t);
                let prefix = format!("{name}/");
                let deleted = log.iter().any(|e| {
                    !e.present
                        && e.at_ms >= began
                        && e.at_ms <= at
                        && e.key.starts_with(&prefix)
                        && owner(owners, e.lease) == Some(c)
                });
                if !deleted {
                    v.violate(
                        Invariant::LostTruth,
                        at,
                        None,
                        format!(
                            "contender {c}'s campaign for {name} failed as lost, its key deleted, though etcd deleted no key of its since the campaign began at {began} ms"
                        ),
                    );
                }
            }
            ContenderEvent::Resigned { ok, after } => {
                v.checks += 1;
                let began = events
                    .of(c, name)
                    .filter(|(t, e)| *t <= at && matches!(e, ContenderEvent::Resigning))
                    .last()
                    .map_or(at, |(t, _)| t);
                let held = held_before(events, c, name, at);
                resign_truth(
                    &removals,
                    log,
                    c,
                    name,
                    (began, at),
                    *ok,
                    after,
                    held,
                    &calm,
                    v,
                );
            }
            ContenderEvent::Dropped { token, key } => {
                let due = at + prompt();
                if !calm(at, due) || removed_outside(&removals, key, at, due) {
                    continue;
                }
                v.checks += 1;
                if deleted_at(log, key, *token).is_none_or(|t| t > due) {
                    v.violate(
                        Invariant::ResignReleases,
                        due,
                        None,
                        format!("contender {c} dropped its leadership of {name} ({key}, token {token}) at {at} ms; the key was still in etcd at {due} ms"),
                    );
                }
            }
            ContenderEvent::Proclaimed {
                token,
                key,
                value,
                ok: true,
            } => {
                v.checks += 1;
                let put = log.iter().any(|e| {
                    e.present
                        && e.at_ms <= at
                        && e.key == *key
                        && e.create_revision == *token
                        && e.value == *value
                });
                if !put {
                    v.violate(
                        Invariant::ProclaimApplied,
                        at,
                        None,
                        format!(
                            "contender {c}'s proclaim of {:?} on {key} (token {token}) returned Ok; etcd never put it",
                            String::from_utf8_lossy(value)
                        ),
                    );
                }
            }
            ContenderEvent::LeaderRead { since_ms, leader } => {
                v.checks += 1;
                let changes = queues.get(name.as_str()).unwrap_or(&none);
                let possible = leaders_over(changes, *since_ms, at);
                if !possible.contains(leader) {
                    let shown: Vec<_> = possible
                        .iter()
                        .map(|l| l.as_ref().map(|(k, t, _)| (k.as_str(), *t)))
                        .collect();
                    v.violate(
                        Invariant::LeaderReadTrue,
                        at,
                        None,
                        format!(
                            "contender {c}'s leader() of {name} over [{since_ms}, {at}] ms returned {:?}; etcd's leaders then: {shown:?}",
                            leader.as_ref().map(|(k, t, _)| (k.as_str(), *t))
                        ),
                    );
                }
            }
            ContenderEvent::TryLost => {
                let Some((began, _)) = events
                    .of(c, name)
                    .filter(|(t, e)| *t <= at && matches!(e, ContenderEvent::Started { .. }))
                    .last()
                else {
                    continue;
                };
                if !calm(began, at) {
                    continue;
                }
                v.checks += 1;
                let changes = queues.get(name.as_str()).unwrap_or(&none);
                if leaders_over(changes, began, at).iter().all(Option::is_none) {
                    v.violate(
                        Invariant::TryWinsEmptyQueue,
                        at,
                        None,
                        format!("contender {c}'s try for {name} lost, though the queue was empty from its start at {began} ms to its answer at {at} ms"),
                    );
                }
            }
            ContenderEvent::Closed {
                ok: true,
                lease: Some(lease),
            } => {
                let began = stop_at.unwrap_or(at);
                if !calm(began, at) {
                    continue;
                }
                v.checks += 1;
                let ended = leases
                    .and_then(|l| l.get(lease))
                    .and_then(|l| l.ended_at)
                    .is_some_and(|e| e <= at);
                if !ended {
                    v.violate(
                        Invariant::CloseRevokes,
                        at,
                        None,
                        format!("contender {c}'s close() returned Ok while its session's lease {lease:x} was still in etcd"),
                    );
                }
            }
            _ => {}
        }
    }
    samples_truth(history, v);
}

/// The (key, token) of the leadership of `name` that contender `c` last
/// reported elected before `at`.
fn held_before(events: &ContenderEvents, c: usize, name: &str, at: u64) -> Option<(String, i64)> {
    events
        .of(c, name)
        .filter(|(t, _)| *t <= at)
        .filter_map(|(_, e)| match e {
            ContenderEvent::Elected { key, token, .. } => Some((key.clone(), *token)),
            _ => None,
        })
        .last()
}

#[allow(clippy::too_many_arguments)]
fn lost_truth(
    events: &ContenderEvents,
    log: &[LogEntry],
    c: usize,
    name: &str,
    at: u64,
    reason: &str,
    after: &Aftermath,
    stop_at: Option<u64>,
    v: &mut Verdict,
) {
    let mut wrong = Vec::new();
    if reason == RESIGNED {
        wrong.push("lost() said resigned, though the handle did not resign".to_string());
    }
    if !after.ended || after.leads {
        wrong.push(format!(
            "after lost() fired: has_ended() {}, is_leader() {}",
            after.ended, after.leads
        ));
    }
    if after.ended && after.loss.as_deref() != Some(reason) {
        wrong.push(format!(
            "lost() said {reason:?}, then {:?}",
            after.loss.as_deref()
        ));
    }
    if reason == SESSION_CLOSED && stop_at.is_none_or(|t| at < t) {
        wrong.push("lost() said the session was closed, before anything closed it".into());
    }
    if reason == KEY_DELETED {
        if let Some((key, token)) = held_before(events, c, name, at) {
            if deleted_at(log, &key, token).is_none_or(|t| t > at) {
                wrong.push(format!(
                    "lost() said its key was deleted, while {key} (token {token}) was in etcd"
                ));
            }
        }
    }
    if !wrong.is_empty() {
        v.violate(
            Invariant::LostTruth,
            at,
            None,
            format!("contender {c}'s leadership of {name}: {}", wrong.join("; ")),
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn resign_truth(
    removals: &[(u64, &str)],
    log: &[LogEntry],
    c: usize,
    name: &str,
    (began, at): (u64, u64),
    ok: bool,
    after: &Aftermath,
    held: Option<(String, i64)>,
    calm: &dyn Fn(u64, u64) -> bool,
    v: &mut Verdict,
) {
    let mut wrong = Vec::new();
    if ok && after.leads {
        wrong.push("is_leader() still true after resign() returned Ok".to_string());
    }
    // An undisturbed resign of a leadership nobody removed from outside
    // deletes the key and ends the leadership as resigned.
    let clean = ok
        && calm(began, at)
        && held.as_ref().is_some_and(|(key, _)| {
            !removed_outside(removals, key, began.saturating_sub(prompt()), at)
        });
    if clean {
        if let Some((key, token)) = &held {
            if deleted_at(log, key, *token).is_none_or(|t| t > at) {
                wrong.push(format!(
                    "resign() returned Ok at {at} ms while {key} (token {token}) was still in etcd"
                ));
            }
        }
        if after.loss.as_deref() != Some(RESIGNED) {
            wrong.push(format!(
                "after resign() returned Ok, has_ended() {} and lost() {:?}",
                after.ended,
                after.loss.as_deref()
            ));
        }
    }
    if !wrong.is_empty() {
        v.violate(
            Invariant::ResignReleases,
            at,
            None,
            format!(
                "contender {c}'s resign of {name} (began at {began} ms): {}",
                wrong.join("; ")
            ),
        );
    }
}

/// Every sampled probe: one that says it leads has not ended.
fn samples_truth(history: &History, v: &mut Verdict) {
    for r in &history.records {
        let Entry::ContenderSample(contenders) = &r.what else {
            continue;
        };
        for (c, s) in contenders.iter().enumerate() {
            for (name, _, _, _) in &s.believes {
                v.checks += 1;
                let ended = s
                    .leaderships
                    .iter()
                    .any(|(n, _, ended)| n == name && *ended);
                if ended {
                    v.violate(
                        Invariant::IsLeaderTruth,
                        r.at_ms,
                        None,
                        format!("contender {c}'s probe of {name} says it leads and has ended"),
                    );
                }
            }
        }
    }
}
