//! Criterion benchmarks of the core machines' steady state, with no I/O:
//! the cost the machine itself adds per input.
//!
//! - `watcher/event_1000_hosts`: one watch message with one put (a host's
//!   record changed) to a watcher holding 1,000 hosts, its outputs drained;
//! - `liveness/keep_alive_cycle`: a registered host's keep-alive: the
//!   refresh timeout (a `SendKeepAlive`), then etcd's reply;
//! - `election/handover`: a leader resigns (its guarded delete, then
//!   etcd's answer) and the candidate queued behind it, in another
//!   session, takes the delete from its watch and leads;
//! - `pool/progress_of_one_of_N`: a session leading N names (a pool) takes
//!   a progress answer on one name's queue watch, and is asked what the
//!   run loop asks after every input (its outputs, its next deadline,
//!   whether it waits on etcd, its silences); N = 1 and 1,000: what one
//!   input costs a pool of many names.
//!
//! Run: `cargo bench -p coord-core --bench machines`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;

use coord_core::election::{candidate_key, ElectionEvent, ElectionId, Mode};
use coord_core::io::{
    Command, Completion, Granted, Listing, MessageKind, TxnOpResponse, TxnResponse,
};
use coord_core::kv::{KeyValue, WatchEvent};
use coord_core::liveness::{Liveness, LivenessConfig};
use coord_core::machine::Input;
use coord_core::outbox::Output;
use coord_core::outcome::Outcome;
use coord_core::session::{self, Session, SessionConfig};
use coord_core::watcher::{Watcher, WatcherConfig};
use coord_core::{ClusterId, Instant, Key, LeaseId, OpId, Revision};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

const PREFIX: &[u8] = b"/coord/hosts/";
const HOSTS: usize = 1_000;

fn kv(host: usize, version: u64, rev: i64) -> KeyValue {
    let id = format!("host-{host:05}");
    KeyValue {
        key: Key([PREFIX, id.as_bytes()].concat()),
        value: format!(
            r#"{{"host_uuid":"{id}","hostname":"{id}.example","hypervisor":"","version":"v{version}","started_at":0}}"#
        )
        .into_bytes(),
        create_revision: Revision(1),
        mod_revision: Revision(rev),
        lease: LeaseId(7),
    }
}

/// A watcher that listed `HOSTS` hosts and watches (stream op 2).
fn watching() -> Watcher {
    let mut m = Watcher::new(WatcherConfig::new(Key(PREFIX.to_vec()), 1)).unwrap();
    m.handle(Instant::from_millis(0), Input::Start).unwrap();
    while m.poll().is_some() {}
    let kvs: Vec<_> = (0..HOSTS).map(|h| kv(h, 0, 2)).collect();
    m.handle(
        Instant::from_millis(1),
        Input::Io(Completion::Listed {
            op: OpId(1),
            outcome: Outcome::Ok(Listing {
                cluster: ClusterId::default(),
                more: false,
                count: u64::try_from(kvs.len()).unwrap_or(0),
                kvs,
                revision: Revision(10),
            }),
        }),
    )
    .unwrap();
    while m.poll().is_some() {}
    m.handle(
        Instant::from_millis(2),
        Input::Io(Completion::WatchMessage {
            cluster: ClusterId::default(),
            stream: OpId(2),
            kind: MessageKind::Created,
            events: vec![],
            revision: Revision(10),
        }),
    )
    .unwrap();
    while m.poll().is_some() {}
    assert!(m.is_watching());
    m
}

fn watcher(c: &mut Criterion) {
    let mut m = watching();
    let mut rev = 10i64;
    c.bench_function("watcher/event_1000_hosts", |b| {
        b.iter(|| {
            rev += 1;
            let host = usize::try_from(rev).unwrap_or(0) % HOSTS;
            let event = WatchEvent::Put {
                kv: kv(host, u64::try_from(rev).unwrap_or(0), rev),
                prev: None,
            };
            m.handle(
                Instant::from_millis(3),
                Input::Io(Completion::WatchMessage {
                    cluster: ClusterId::default(),
                    stream: OpId(2),
                    kind: MessageKind::Events,
                    events: vec![event],
                    revision: Revision(rev),
                }),
            )
            .unwrap();
            let mut outputs = 0;
            while let Some(o) = m.poll() {
                black_box(&o);
                outputs += 1;
            }
            outputs
        });
    });
}

/// Answers every request of `outputs` as etcd would when all is well
/// (grants, the attaching transaction, and the keep-alive stream's first
/// reply); the completions to feed back.
fn answers<E>(outputs: Vec<Output<Command, E>>) -> Vec<Completion> {
    outputs
        .into_iter()
        .filter_map(|o| match o {
            Output::Command(Command::Grant { op, ttl_secs }) => Some(Completion::Granted {
                op,
                outcome: Outcome::Ok(Granted {
                    lease: LeaseId(7),
                    ttl_secs,
                }),
            }),
            Output::Command(Command::Txn { op, .. }) => Some(Completion::Txn {
                op,
                outcome: Outcome::Ok(TxnResponse {
                    cluster: ClusterId::default(),
                    succeeded: true,
                    revision: Revision(10),
                    responses: Vec::new(),
                }),
            }),
            Output::Command(Command::OpenKeepAlive { op, .. }) => {
                Some(Completion::KeepAliveReply {
                    stream: op,
                    ttl_secs: 10,
                })
            }
            _ => None,
        })
        .collect()
}

/// A registered host (TTL 10 s, refresh 3 s); its keep-alive stream's op.
fn registered() -> (Liveness, OpId) {
    let config = LivenessConfig::new(Key(b"/coord/hosts/h1".to_vec()), b"{}".to_vec(), 1);
    let mut m = Liveness::new(config).unwrap();
    m.handle(Instant::from_millis(0), Input::Start).unwrap();
    let mut stream = None;
    for step in 1..10 {
        let out: Vec<_> = std::iter::from_fn(|| m.poll()).collect();
        for o in &out {
            if let Output::Command(Command::OpenKeepAlive { op, .. }) = o {
                stream = Some(*op);
            }
        }
        for c in answers(out) {
            m.handle(Instant::from_millis(step), Input::Io(c)).unwrap();
        }
    }
    assert!(m.lease().is_some(), "registered");
    (m, stream.expect("a keep-alive stream"))
}

fn liveness(c: &mut Criterion) {
    let (mut m, stream) = registered();
    c.bench_function("liveness/keep_alive_cycle", |b| {
        b.iter(|| {
            let now = m.poll_timeout().unwrap();
            m.handle(now, Input::Timeout).unwrap();
            let mut sent = 0;
            while let Some(o) = m.poll() {
                sent += usize::from(matches!(o, Output::Command(Command::SendKeepAlive { .. })));
            }
            m.handle(
                now,
                Input::Io(Completion::KeepAliveReply {
                    stream,
                    ttl_secs: 10,
                }),
            )
            .unwrap();
            while let Some(o) = m.poll() {
                black_box(&o);
            }
            assert_eq!(sent, 1);
        });
    });
}

const NAME: &[u8] = b"/bench/election/";

/// A session holding lease `lease` (granted and kept alive).
fn session_with(lease: i64) -> Session {
    let mut s = Session::new(SessionConfig::new(u64::try_from(lease).unwrap_or(1))).unwrap();
    s.handle(Instant::from_millis(0), session::Input::Start)
        .unwrap();
    for step in 1..5 {
        let out: Vec<_> = std::iter::from_fn(|| s.poll()).collect();
        for o in out {
            let c = match o {
                Output::Command(Command::Grant { op, ttl_secs }) => Completion::Granted {
                    op,
                    outcome: Outcome::Ok(Granted {
                        lease: LeaseId(lease),
                        ttl_secs,
                    }),
                },
                Output::Command(Command::OpenKeepAlive { op, .. }) => Completion::KeepAliveReply {
                    stream: op,
                    ttl_secs: 10,
                },
                _ => continue,
            };
            s.handle(Instant::from_millis(step), session::Input::Io(c))
                .unwrap();
        }
    }
    assert_eq!(s.lease(), Some(LeaseId(lease)));
    s
}

fn candidate(lease: i64, create: i64) -> KeyValue {
    candidate_on(NAME, lease, create)
}

/// The key of lease `lease`'s campaign on `name`, created at `create`.
fn candidate_on(name: &[u8], lease: i64, create: i64) -> KeyValue {
    KeyValue {
        key: candidate_key(&Key(name.to_vec()), LeaseId(lease)),
        value: b"v".to_vec(),
        create_revision: Revision(create),
        mod_revision: Revision(create),
        lease: LeaseId(lease),
    }
}

/// Campaigns in `s` (election 1) and answers its join with `queue` at
/// `revision`; the op of the watch it opened, and its outputs.
fn joined(
    s: &mut Session,
    queue: Vec<KeyValue>,
    revision: i64,
) -> (OpId, Vec<Output<Command, session::Event>>) {
    joined_as(s, ElectionId(1), NAME, queue, revision)
}

/// [`joined`], as election `id` on `name`.
fn joined_as(
    s: &mut Session,
    id: ElectionId,
    name: &[u8],
    queue: Vec<KeyValue>,
    revision: i64,
) -> (OpId, Vec<Output<Command, session::Event>>) {
    s.handle(
        Instant::from_millis(10),
        session::Input::Campaign {
            id,
            name: Key(name.to_vec()),
            value: b"v".to_vec(),
            mode: Mode::Wait,
        },
    )
    .unwrap();
    answer_txn(
        s,
        11,
        revision,
        vec![TxnOpResponse::Put, TxnOpResponse::Get(queue)],
        "a join",
    );
    let out: Vec<_> = std::iter::from_fn(|| s.poll()).collect();
    let watch = out
        .iter()
        .find_map(|o| match o {
            Output::Command(Command::Watch { op, .. }) => Some(*op),
            _ => None,
        })
        .expect("a watch of the queue");
    (watch, out)
}

/// Answers the transaction `s` issues next as succeeded at `revision`
/// with `responses`, at `at` ms; `what` names it if there is none.
fn answer_txn(s: &mut Session, at: u64, revision: i64, responses: Vec<TxnOpResponse>, what: &str) {
    let op = std::iter::from_fn(|| s.poll())
        .find_map(|o| match o {
            Output::Command(Command::Txn { op, .. }) => Some(op),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{what}"));
    s.handle(
        Instant::from_millis(at),
        session::Input::Io(Completion::Txn {
            op,
            outcome: Outcome::Ok(TxnResponse {
                cluster: ClusterId::default(),
                succeeded: true,
                revision: Revision(revision),
                responses,
            }),
        }),
    )
    .unwrap();
}

fn elected(out: &[Output<Command, session::Event>]) -> bool {
    out.iter().any(|o| {
        matches!(
            o,
            Output::Event(session::Event::Election {
                event: ElectionEvent::Elected { .. },
                ..
            })
        )
    })
}

/// A leader (lease 7, leading) and a candidate queued behind it (lease 8,
/// watching the queue).
fn leader_and_successor() -> (Session, Session, OpId) {
    let mut leader = session_with(7);
    let (_, out) = joined(&mut leader, vec![candidate(7, 20)], 20);
    assert!(elected(&out), "the leader leads");
    let mut next = session_with(8);
    let (watch, out) = joined(&mut next, vec![candidate(7, 20), candidate(8, 21)], 21);
    assert!(!elected(&out), "the successor waits");
    (leader, next, watch)
}

fn election(c: &mut Criterion) {
    c.bench_function("election/handover", |b| {
        b.iter_batched(
            leader_and_successor,
            |(mut leader, mut next, watch)| {
                leader
                    .handle(
                        Instant::from_millis(20),
                        session::Input::Leave { id: ElectionId(1) },
                    )
                    .unwrap();
                answer_txn(
                    &mut leader,
                    21,
                    22,
                    vec![TxnOpResponse::Delete { deleted: 1 }],
                    "the resign's delete",
                );
                while let Some(o) = leader.poll() {
                    black_box(&o);
                }
                next.handle(
                    Instant::from_millis(22),
                    session::Input::Io(Completion::WatchMessage {
                        cluster: ClusterId::default(),
                        stream: watch,
                        kind: MessageKind::Events,
                        events: vec![WatchEvent::Delete {
                            key: candidate(7, 20).key,
                            revision: Revision(22),
                            prev: Some(candidate(7, 20)),
                        }],
                        revision: Revision(22),
                    }),
                )
                .unwrap();
                let out: Vec<_> = std::iter::from_fn(|| next.poll()).collect();
                assert!(elected(&out), "the successor leads: {out:?}");
                (leader, next)
            },
            BatchSize::SmallInput,
        );
    });
}

/// A session (lease 7) leading `names` names, and each one's queue watch.
fn leading(names: u64) -> (Session, Vec<OpId>) {
    let mut s = session_with(7);
    let mut watches = Vec::new();
    for i in 1..=names {
        let name = format!("/bench/pool/{i}/").into_bytes();
        let revision = 20 + i64::try_from(i).unwrap_or(0);
        let own = candidate_on(&name, 7, revision);
        let (watch, out) = joined_as(&mut s, ElectionId(i), &name, vec![own], revision);
        assert!(elected(&out), "name {i} led");
        watches.push(watch);
    }
    (s, watches)
}

fn pool(c: &mut Criterion) {
    for names in [1, 1_000] {
        let (mut s, watches) = leading(names);
        let mut turn = 0usize;
        c.bench_function(&format!("pool/progress_of_one_of_{names}"), |b| {
            b.iter(|| {
                turn = (turn + 1) % watches.len();
                s.handle(
                    Instant::from_millis(1_000),
                    session::Input::Io(Completion::WatchMessage {
                        cluster: ClusterId::default(),
                        stream: watches[turn],
                        kind: MessageKind::Progress,
                        events: Vec::new(),
                        revision: Revision(5_000),
                    }),
                )
                .unwrap();
                while let Some(o) = s.poll() {
                    black_box(&o);
                }
                black_box((s.poll_timeout(), s.awaits_etcd(), s.silences()));
            });
        });
    }
}

criterion_group!(benches, watcher, liveness, election, pool);
criterion_main!(benches);
