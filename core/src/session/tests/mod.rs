use std::time::Duration;

use super::*;
use crate::election::{Answer, Loss};
use crate::ids::{FencingToken, Revision};
use crate::io::{
    Compare, CompareOp, CompareTarget, Get, Granted, TxnOp, TxnOpResponse, TxnResponse,
};
use crate::kv::{KeyValue, WatchEvent};
use crate::lease::{LostReason, RevokeOutcome};
use crate::outcome::{AttemptFailure, Failure, Outcome, Retry};

const LEASE: LeaseId = LeaseId(0x70);
const LEASE2: LeaseId = LeaseId(0x71);
const NAME: &[u8] = b"/e/";

fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn name() -> Key {
    Key(NAME.to_vec())
}

fn key_of(lease: LeaseId) -> Key {
    crate::election::candidate_key(&name(), lease)
}

fn kv(lease: LeaseId, value: &str, create: i64) -> KeyValue {
    KeyValue {
        key: key_of(lease),
        value: value.as_bytes().to_vec(),
        create_revision: Revision(create),
        mod_revision: Revision(create),
        lease,
    }
}

fn drain(s: &mut Session) -> Vec<Output> {
    std::iter::from_fn(|| s.poll()).collect()
}

fn events(out: &[Output]) -> Vec<Event> {
    out.iter()
        .filter_map(|o| match o {
            outbox::Output::Event(e) => Some(e.clone()),
            outbox::Output::Command(_) => None,
        })
        .collect()
}

fn commands(out: &[Output]) -> Vec<Command> {
    out.iter()
        .filter_map(|o| match o {
            outbox::Output::Command(c) => Some(c.clone()),
            outbox::Output::Event(_) => None,
        })
        .collect()
}

/// The only transaction among `out`.
fn the_txn(out: &[Output]) -> (OpId, Txn) {
    let txns: Vec<(OpId, Txn)> = commands(out)
        .into_iter()
        .filter_map(|c| match c {
            Command::Txn { op, txn } => Some((op, txn)),
            _ => None,
        })
        .collect();
    assert_eq!(txns.len(), 1, "{out:?}");
    txns[0].clone()
}

fn io(s: &mut Session, now: u64, c: Completion) {
    s.handle(t(now), Input::Io(c)).unwrap();
}

fn config() -> SessionConfig {
    let mut c = SessionConfig::new(3);
    c.lease.ttl = Duration::from_secs(9);
    c.lease.refresh = Duration::from_secs(3);
    c.lease.request_timeout = Duration::from_secs(2);
    c
}

/// A session holding LEASE at t=3 (ops 1: grant, 2: keep-alive stream).
fn session() -> Session {
    session_with(config())
}

/// [`session`] on `config`.
fn session_with(config: SessionConfig) -> Session {
    let mut s = Session::new(config).unwrap();
    s.handle(t(0), Input::Start).unwrap();
    let _ = drain(&mut s);
    io(
        &mut s,
        1,
        Completion::Granted {
            op: OpId(1),
            outcome: Outcome::Ok(Granted {
                lease: LEASE,
                ttl_secs: 9,
            }),
        },
    );
    assert_eq!(
        commands(&drain(&mut s)),
        vec![Command::OpenKeepAlive {
            op: OpId(2),
            lease: LEASE
        }]
    );
    io(
        &mut s,
        3,
        Completion::KeepAliveReply {
            stream: OpId(2),
            ttl_secs: 9,
        },
    );
    let _ = drain(&mut s);
    assert_eq!(s.lease(), Some(LEASE));
    s
}

/// After a loss, lets the session grant `lease` and confirm it.
fn reregister(s: &mut Session, lease: LeaseId) {
    let at = s.poll_timeout().unwrap();
    s.handle(at, Input::Timeout).unwrap();
    let grant = commands(&drain(s))
        .into_iter()
        .find_map(|c| match c {
            Command::Grant { op, .. } => Some(op),
            _ => None,
        })
        .expect("a new grant");
    io(
        s,
        at.as_millis() + 1,
        Completion::Granted {
            op: grant,
            outcome: Outcome::Ok(Granted { lease, ttl_secs: 9 }),
        },
    );
    let open = commands(&drain(s))
        .into_iter()
        .find_map(|c| match c {
            Command::OpenKeepAlive { op, .. } => Some(op),
            _ => None,
        })
        .expect("a keep-alive");
    io(
        s,
        at.as_millis() + 2,
        Completion::KeepAliveReply {
            stream: open,
            ttl_secs: 9,
        },
    );
}

fn campaign(s: &mut Session, now: u64, id: u64, mode: Mode) -> Vec<Output> {
    s.handle(
        t(now),
        Input::Campaign {
            id: ElectionId(id),
            name: name(),
            value: b"me".to_vec(),
            mode,
        },
    )
    .unwrap();
    drain(s)
}

/// The answer to a join: `succeeded`, then the queue as read in it.
fn joined(op: OpId, succeeded: bool, queue: Vec<KeyValue>, revision: i64) -> Completion {
    let mut responses = Vec::new();
    if succeeded {
        responses.push(TxnOpResponse::Put);
    }
    responses.push(TxnOpResponse::Get(queue));
    Completion::Txn {
        op,
        outcome: Outcome::Ok(TxnResponse {
            cluster: crate::ClusterId::default(),
            succeeded,
            revision: Revision(revision),
            responses,
        }),
    }
}

/// Campaign 1 asks at `now` to proclaim `value` as request `request`;
/// everything it issued.
fn proclaim(s: &mut Session, now: u64, request: u64, value: &str) -> Vec<Output> {
    s.handle(
        t(now),
        Input::Proclaim {
            id: ElectionId(1),
            request,
            value: value.as_bytes().to_vec(),
        },
    )
    .unwrap();
    drain(s)
}

/// A session whose campaign 1 (on LEASE, token 20) leads alone since
/// t = 11.
fn leading() -> Session {
    leading_watched().0
}

/// [`leading`], with the stream of its queue's watch.
fn leading_watched() -> (Session, OpId) {
    let mut s = session();
    let (op, _) = the_txn(&campaign(&mut s, 10, 1, Mode::Wait));
    io(&mut s, 11, joined(op, true, vec![kv(LEASE, "me", 20)], 20));
    let (stream, _) = the_watch(&drain(&mut s));
    (s, stream)
}

/// etcd answers the session's keep-alive at `now` with TTL 0 (the lease
/// is gone); what the session does.
fn lease_gone(s: &mut Session, now: u64) -> Vec<Output> {
    io(
        s,
        now,
        Completion::KeepAliveReply {
            stream: OpId(2),
            ttl_secs: 0,
        },
    );
    drain(s)
}

/// A session whose campaign 1 (token 20) is queued since t = 11 behind
/// the first candidate, returned with the queue watch's stream.
fn queued_behind_first() -> (Session, OpId, KeyValue) {
    let mut s = session();
    let (op, _) = the_txn(&campaign(&mut s, 10, 1, Mode::Wait));
    let first = kv(LeaseId(0x10), "a", 5);
    io(
        &mut s,
        11,
        joined(op, true, vec![first.clone(), kv(LEASE, "me", 20)], 20),
    );
    let (stream, _) = the_watch(&drain(&mut s));
    (s, stream, first)
}

/// Fires the session's next deadline; the one transaction it sent.
fn next_attempt(s: &mut Session) -> OpId {
    let at = s.poll_timeout().unwrap();
    s.handle(at, Input::Timeout).unwrap();
    the_txn(&drain(s)).0
}

fn election_events(out: &[Output], id: u64) -> Vec<ElectionEvent> {
    events(out)
        .into_iter()
        .filter_map(|e| match e {
            Event::Election { id: i, event } if i == ElectionId(id) => Some(event),
            _ => None,
        })
        .collect()
}

/// The watch a queued or leading campaign opened.
fn the_watch(out: &[Output]) -> (OpId, Revision) {
    commands(out)
        .into_iter()
        .find_map(|c| match c {
            Command::Watch {
                op,
                key,
                prefix: true,
                start_revision,
            } if key == name() => Some((op, start_revision)),
            _ => None,
        })
        .expect("a watch of the queue")
}

/// The creation of watch `stream` at `revision`.
fn created(stream: OpId, revision: i64) -> Completion {
    Completion::WatchMessage {
        cluster: crate::ClusterId::default(),
        stream,
        kind: crate::io::MessageKind::Created,
        events: Vec::new(),
        revision: Revision(revision),
    }
}

fn deleted(stream: OpId, kv: KeyValue, revision: i64) -> Completion {
    Completion::WatchMessage {
        cluster: crate::ClusterId::default(),
        stream,
        kind: crate::io::MessageKind::Events,
        events: vec![WatchEvent::Delete {
            key: kv.key.clone(),
            revision: Revision(revision),
            prev: Some(kv),
        }],
        revision: Revision(revision),
    }
}

#[test]
fn candidate_keys_are_go_concurrency_keys() {
    assert_eq!(key_of(LeaseId(0x694d_7a0b_1c2d)).0, b"/e/694d7a0b1c2d");
    // Go prints a negative int64 with %x as a signed number.
    assert_eq!(key_of(LeaseId(-255)).0, b"/e/-ff");
}

#[test]
fn a_lost_lease_ends_every_campaign_and_later_ones_use_the_new_lease() {
    let mut s = leading();
    // etcd says the lease is gone (revoked from outside).
    let out = lease_gone(&mut s, 12);
    assert_eq!(
        election_events(&out, 1),
        vec![ElectionEvent::Lost {
            reason: Loss::LeaseLost(LostReason::LeaseExpired)
        }]
    );
    assert_eq!(s.lease(), None);
    // A campaign asked for while healing waits for the next lease...
    let out = campaign(&mut s, 13, 2, Mode::Wait);
    assert!(
        !commands(&out)
            .iter()
            .any(|c| matches!(c, Command::Txn { .. })),
        "no dead lease is handed out: {out:?}"
    );
    assert_eq!(s.standing(ElectionId(2)), Standing::Pending);
    reregister(&mut s, LEASE2);
    // ...and joins with it.
    let (_, txn) = the_txn(&drain(&mut s));
    assert_eq!(
        txn.compares,
        vec![Compare::create_revision(
            key_of(LEASE2),
            CompareOp::Equal,
            Revision(0)
        )]
    );
}

#[test]
fn a_lease_lost_by_its_deadline_is_revoked_so_its_keys_block_nobody() {
    let mut s = leading();
    // No keep-alive reply at all: the deadline passes.
    let mut revoked = false;
    let mut lost = false;
    for _ in 0..20 {
        let at = s.poll_timeout().unwrap();
        s.handle(at, Input::Timeout).unwrap();
        let out = drain(&mut s);
        lost |= election_events(&out, 1).contains(&ElectionEvent::Lost {
            reason: Loss::LeaseLost(LostReason::KeepAliveTimeout),
        });
        revoked |= commands(&out)
            .iter()
            .any(|c| matches!(c, Command::Revoke { lease, .. } if *lease == LEASE));
        if lost {
            break;
        }
    }
    assert!(lost, "the leader was told");
    assert!(revoked, "the old lease is revoked, not left to linger");
}

#[test]
fn one_campaign_per_name_and_ids_are_never_reused() {
    let mut s = session();
    let _ = campaign(&mut s, 10, 1, Mode::Wait);
    let again = s.handle(
        t(11),
        Input::Campaign {
            id: ElectionId(2),
            name: name(),
            value: vec![],
            mode: Mode::Wait,
        },
    );
    assert_eq!(again, Err(CampaignError::AlreadyCampaigning(name()).into()));
    let reused = s.handle(
        t(11),
        Input::Campaign {
            id: ElectionId(1),
            name: Key(b"/other/".to_vec()),
            value: vec![],
            mode: Mode::Wait,
        },
    );
    assert_eq!(reused, Err(CampaignError::IdTaken(1).into()));
    assert_eq!(
        s.handle(t(11), Input::Leave { id: ElectionId(9) }),
        Err(SessionError::UnknownElection)
    );
}

#[test]
fn close_ends_every_campaign_then_revokes_the_lease() {
    let mut s = leading();
    s.handle(t(12), Input::Close).unwrap();
    let out = drain(&mut s);
    assert_eq!(
        election_events(&out, 1),
        vec![ElectionEvent::Lost {
            reason: Loss::SessionClosed
        }]
    );
    let revoke = commands(&out)
        .into_iter()
        .find_map(|c| match c {
            Command::Revoke { op, lease } if lease == LEASE => Some(op),
            _ => None,
        })
        .expect("the lease is revoked");
    io(
        &mut s,
        13,
        Completion::Revoked {
            op: revoke,
            outcome: Outcome::Ok(()),
        },
    );
    let out = drain(&mut s);
    assert!(events(&out).contains(&Event::Lease(lease::Event::Closed {
        revoke: RevokeOutcome::Revoked(LEASE)
    })));
    assert!(s.is_closed());
    assert_eq!(
        s.handle(
            t(14),
            Input::Campaign {
                id: ElectionId(5),
                name: name(),
                value: vec![],
                mode: Mode::Wait
            }
        ),
        Err(CampaignError::Closed.into())
    );
}

#[test]
fn a_session_is_closed_only_once_its_campaigns_requests_are_answered() {
    let mut s = leading();
    let (proclaim, _) = the_txn(&proclaim(&mut s, 12, 7, "v2"));
    s.handle(t(13), Input::Close).unwrap();
    let revoke = commands(&drain(&mut s))
        .into_iter()
        .find_map(|c| match c {
            Command::Revoke { op, .. } => Some(op),
            _ => None,
        })
        .expect("the lease is revoked");
    io(
        &mut s,
        14,
        Completion::Revoked {
            op: revoke,
            outcome: Outcome::Ok(()),
        },
    );
    let _ = drain(&mut s);
    // The lease is closed, but the proclaim's answer is still owed.
    assert!(!s.is_closed());
    assert_eq!(s.elections(), 1);
    io(
        &mut s,
        15,
        Completion::Txn {
            op: proclaim,
            outcome: Outcome::Err(Failure::Unavailable("closed".into())),
        },
    );
    let out = drain(&mut s);
    assert!(
        matches!(
            election_events(&out, 1)[..],
            [ElectionEvent::Answered { request: 7, .. }]
        ),
        "{out:?}"
    );
    assert!(s.is_closed());
}

mod election;

mod election_stray;

#[test]
fn a_join_sent_in_a_silence_is_given_up_when_etcd_returns_and_retried_soon() {
    let mut s = session();
    let out = campaign(&mut s, 10, 1, Mode::Wait);
    let (join, _) = the_txn(&out);
    assert!(s.awaits_etcd(), "a join in flight waits on etcd");
    // etcd answers a probe sent after the join went out: the join is given
    // up at once (not at its deadline, 2 s later), and retried within half
    // a second (the wait cut short).
    s.handle(t(500), Input::Returned { probe_sent: t(400) })
        .unwrap();
    let out = drain(&mut s);
    assert!(
        commands(&out).contains(&Command::Abandon { op: join }),
        "{out:?}"
    );
    // (A keep-alive goes out at once too, to prove the stream.)
    let (retry, again) = loop {
        let at = s.poll_timeout().unwrap();
        assert!(at <= t(1_000), "no join retried by {at}");
        s.handle(at, Input::Timeout).unwrap();
        let out = drain(&mut s);
        if commands(&out)
            .iter()
            .any(|c| matches!(c, Command::Txn { .. }))
        {
            break (at, the_txn(&out).0);
        }
    };
    assert_ne!(again, join);
    // A join sent after the probe is left alone.
    s.handle(
        t(retry.as_millis() + 5),
        Input::Returned {
            probe_sent: t(retry.as_millis() - 1),
        },
    )
    .unwrap();
    assert!(!commands(&drain(&mut s)).contains(&Command::Abandon { op: again }));
}

#[test]
fn campaigns_draw_seeds_of_their_own_as_distinct_as_their_sessions() {
    use std::collections::BTreeSet;
    let by_id: BTreeSet<u64> = (1..=1000)
        .map(|id| campaign_seed(7, ElectionId(id)))
        .collect();
    assert_eq!(
        by_id.len(),
        1000,
        "two campaigns of a session drew one seed"
    );
    let by_session: BTreeSet<u64> = (0..1000)
        .map(|seed| campaign_seed(seed, ElectionId(1)))
        .collect();
    assert_eq!(
        by_session.len(),
        1000,
        "two sessions' first campaigns drew one seed"
    );
    for seed in [0, 7, u64::MAX] {
        assert_ne!(
            campaign_seed(seed, ElectionId(1)),
            seed,
            "a campaign shares its session's seed"
        );
    }
}

#[test]
fn a_sessions_limits_are_allowed_and_a_step_beyond_refused() {
    let ms = Duration::from_millis;
    for (interval, allowed) in crate::lease::PROBE_INTERVAL_EDGES {
        let mut c = config();
        c.probe_interval = interval;
        let want = (!allowed).then_some(ConfigError::ProbeIntervalOutOfRange(interval));
        assert_eq!(c.validate().err(), want, "{interval:?}");
        assert_eq!(Session::new(c).err(), want, "{interval:?}");
    }
    // The lease's own limits hold too.
    let mut c = config();
    c.lease.ttl = ms(999);
    c.lease.refresh = ms(10);
    assert_eq!(
        c.validate().err(),
        Some(ConfigError::TtlOutOfRange(ms(999)))
    );
}

#[test]
fn a_live_session_says_until_when_its_lease_lives_and_counts_its_campaigns() {
    let mut s = session();
    assert!(!s.is_closed(), "a live session with no campaign");
    // Opened (and its first keep-alive sent) at t=1, answered with 9 s.
    assert_eq!(s.expires_at(), Some(t(9_001)));
    assert_eq!(s.elections(), 0);
    let _ = campaign(&mut s, 10, 1, Mode::Wait);
    assert_eq!(s.elections(), 1);
}
