//! Criterion benchmarks of the core machines' steady state, with no I/O:
//! the cost the machine itself adds per input.
//!
//! - `watcher/event_1000_hosts`: one watch message with one put (a host's
//!   record changed) to a watcher holding 1,000 hosts, its outputs drained;
//! - `liveness/keep_alive_cycle`: a registered host's keep-alive: the
//!   refresh timeout (a `SendKeepAlive`), then etcd's reply.
//!
//! Run: `cargo bench -p coord-core --bench machines`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;

use coord_core::io::{Command, Completion, Granted, Listing, MessageKind, TxnResponse};
use coord_core::kv::{KeyValue, WatchEvent};
use coord_core::liveness::{Liveness, LivenessConfig};
use coord_core::machine::Input;
use coord_core::outbox::Output;
use coord_core::outcome::Outcome;
use coord_core::watcher::{Watcher, WatcherConfig};
use coord_core::{ClusterId, Instant, Key, LeaseId, OpId, Revision};
use criterion::{criterion_group, criterion_main, Criterion};

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
    let kvs = (0..HOSTS).map(|h| kv(h, 0, 2)).collect();
    m.handle(
        Instant::from_millis(1),
        Input::Io(Completion::Listed {
            op: OpId(1),
            outcome: Outcome::Ok(Listing {
                cluster: ClusterId::default(),
                more: false,
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

criterion_group!(benches, watcher, liveness);
criterion_main!(benches);
