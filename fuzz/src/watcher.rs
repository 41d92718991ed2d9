//! Fuzzing `Watcher`.

use std::collections::BTreeMap;
use std::time::Duration;

use arbitrary::Arbitrary;
use coord_core::io::{Command, Completion, Listing, MessageKind};
use coord_core::kv::{KeyValue, WatchEvent};
use coord_core::mirror::ResyncReason;
use coord_core::watcher::{Event, Input, Output, StartPolicy, Watcher, WatcherConfig};
use coord_core::{ClusterId, Instant, Key, LeaseId, OpId, Outcome, Revision};

use crate::liveness::FuzzFailure;

const PREFIX: &[u8] = b"/h/";

/// A key: mostly valid hosts from a small set, sometimes anything.
#[derive(Debug, Arbitrary)]
enum FuzzKey {
    Host(u8),
    /// A short arbitrary tail: nested, empty, unsafe or not UTF-8.
    Raw([u8; 3], u8),
}

impl FuzzKey {
    fn key(&self) -> Key {
        match self {
            FuzzKey::Host(n) => Key([PREFIX, format!("h{}", n % 8).as_bytes()].concat()),
            FuzzKey::Raw(bytes, len) => {
                let len = usize::from(*len % 4);
                Key([PREFIX, &bytes[..len]].concat())
            }
        }
    }
}

#[derive(Debug, Arbitrary)]
struct FuzzKv {
    key: FuzzKey,
    value: u8,
    lease: u8,
    rev: u8,
}

impl FuzzKv {
    fn kv(&self, base: i64) -> KeyValue {
        let rev = Revision(base + i64::from(self.rev));
        KeyValue {
            key: self.key.key(),
            value: vec![self.value % 4],
            create_revision: rev,
            mod_revision: rev,
            lease: LeaseId(i64::from(self.lease % 3)),
        }
    }
}

#[derive(Debug, Arbitrary)]
enum FuzzEvent {
    Put {
        kv: FuzzKv,
        with_prev: bool,
    },
    Delete {
        key: FuzzKey,
        rev: u8,
        with_prev: bool,
    },
}

#[derive(Debug, Arbitrary)]
enum Step {
    Start,
    Close,
    Advance(u16),
    /// Lists for the `which`-th op: one page (`more` when others follow),
    /// from one of a few clusters, maybe at a revision from before (etcd
    /// restored or wiped).
    Listed {
        which: u8,
        kvs: [Option<FuzzKv>; 4],
        rev: u8,
        more: bool,
        header: Header,
    },
    ListFailed {
        which: u8,
        failure: Option<FuzzFailure>,
    },
    /// Messages on the `which`-th op's stream.
    Message {
        which: u8,
        kind: MessageKind,
        events: [Option<FuzzEvent>; 3],
        rev: u8,
        header: Header,
    },
    Closed {
        which: u8,
        failure: FuzzFailure,
    },
    /// A message on a stream the machine never opened.
    Ghost {
        op: u16,
        rev: u8,
    },
}

/// A response header: which cluster answered (0: not said), and whether
/// its revision is from before everything handed out so far.
#[derive(Debug, Arbitrary)]
struct Header {
    cluster: u8,
    back: bool,
}

impl Header {
    fn cluster(&self) -> ClusterId {
        ClusterId(u64::from(self.cluster % 3))
    }

    /// The header revision: `base + rev`, or just `rev` when from before.
    fn revision(&self, base: i64, rev: u8) -> Revision {
        if self.back {
            Revision(i64::from(rev))
        } else {
            Revision(base + i64::from(rev))
        }
    }
}

#[derive(Debug, Arbitrary)]
struct Plan {
    exclude: Option<u8>,
    start: StartPolicy,
    seed: u64,
    page_size: u8,
}

/// How many steps `data` decodes to (for checking a smoke run is not
/// vacuous).
pub fn steps(data: &[u8]) -> usize {
    crate::decode::<Plan, Step>(data).map_or(0, |(_, steps)| steps.len())
}

/// Runs one fuzz case; panics on a broken invariant.
pub fn run(data: &[u8]) -> crate::Reach {
    let Some((plan, steps)) = crate::decode::<Plan, Step>(data) else {
        return crate::Reach::default();
    };
    let mut config = WatcherConfig::new(Key(PREFIX.to_vec()), plan.seed);
    config.exclude_host = plan.exclude.map(|n| format!("h{}", n % 8));
    config.request_timeout = Duration::from_millis(500);
    config.probe_interval = Duration::from_secs(2);
    config.start = plan.start;
    config.page_size = u32::from(plan.page_size % 4) + 1;
    config.backoff.pacing = crate::pacing(plan.seed);
    let Ok(mut m) = Watcher::new(config.clone()) else {
        return crate::Reach::default();
    };
    let mut h = Harness {
        now: 0,
        ops: Vec::new(),
        // Revisions the fuzzer hands out grow, like etcd's.
        base: 0,
        replica: BTreeMap::new(),
        last_revision: Revision(0),
        resetting: None,
        closed: false,
        started: false,
        exclude: config.exclude_host,
        milestones: 0,
    };
    let n = steps.len();
    for step in steps {
        h.step(&mut m, step);
    }
    crate::Reach {
        steps: n,
        milestones: h.milestones,
    }
}

struct Harness {
    now: u64,
    ops: Vec<OpId>,
    base: i64,
    replica: BTreeMap<String, KeyValue>,
    last_revision: Revision,
    /// The reason of a `Reset` whose `Resynced` has not come yet.
    resetting: Option<ResyncReason>,
    closed: bool,
    started: bool,
    exclude: Option<String>,
    milestones: usize,
}

impl Harness {
    fn op(&self, which: u8) -> OpId {
        crate::pick(&self.ops, which)
    }

    fn step(&mut self, m: &mut Watcher, step: Step) {
        let now = Instant::from_millis(self.now);
        let input = match step {
            Step::Start => Input::Start,
            Step::Close => Input::Close,
            Step::Advance(ms) => {
                self.now += u64::from(ms);
                let now = Instant::from_millis(self.now);
                if m.poll_timeout().is_some_and(|d| d <= now) {
                    let _ = m.handle(now, Input::Timeout);
                    self.drain(m);
                } else {
                    crate::early_timeout_changes_nothing(m, now);
                }
                // Some advances end with the prober finding etcd back or
                // silent.
                if let Some(news) = crate::probe_news::<Watcher>(ms, now) {
                    assert_eq!(m.handle(now, news), Ok(()));
                    self.drain(m);
                }
                return;
            }
            Step::Listed {
                which,
                kvs,
                rev,
                more,
                header,
            } => {
                let base = self.base;
                self.base += 256;
                Input::Io(Completion::Listed {
                    op: self.op(which),
                    outcome: Outcome::Ok(Listing {
                        cluster: header.cluster(),
                        more,
                        count: u64::try_from(kvs.iter().flatten().count()).unwrap_or(0),
                        kvs: kvs.iter().flatten().map(|k| k.kv(base)).collect(),
                        revision: header.revision(base, rev),
                    }),
                })
            }
            Step::ListFailed { which, failure } => Input::Io(Completion::Listed {
                op: self.op(which),
                outcome: failure.map_or(Outcome::Unknown, |f| Outcome::Err(f.failure())),
            }),
            Step::Message {
                which,
                kind,
                events,
                rev,
                header,
            } => {
                let base = self.base;
                self.base += 256;
                let events = events
                    .iter()
                    .flatten()
                    .map(|e| match e {
                        FuzzEvent::Put { kv, with_prev } => WatchEvent::Put {
                            kv: kv.kv(base),
                            prev: with_prev.then(|| kv.kv(base - 1)),
                        },
                        FuzzEvent::Delete {
                            key,
                            rev,
                            with_prev,
                        } => WatchEvent::Delete {
                            key: key.key(),
                            revision: Revision(base + i64::from(*rev)),
                            prev: with_prev.then(|| {
                                FuzzKv {
                                    key: FuzzKey::Host(0),
                                    value: 0,
                                    lease: 0,
                                    rev: 0,
                                }
                                .kv(base - 1)
                            }),
                        },
                    })
                    .collect();
                Input::Io(Completion::WatchMessage {
                    cluster: header.cluster(),
                    stream: self.op(which),
                    kind,
                    events,
                    revision: header.revision(base, rev),
                })
            }
            Step::Closed { which, failure } => Input::Io(Completion::WatchClosed {
                stream: self.op(which),
                failure: failure.failure(),
            }),
            Step::Ghost { op, rev } => Input::Io(Completion::WatchMessage {
                cluster: coord_core::ClusterId::default(),
                stream: OpId(u64::from(op) + 1_000_000),
                kind: MessageKind::Events,
                events: Vec::new(),
                revision: Revision(i64::from(rev)),
            }),
        };
        let is_start = input == Input::Start;
        let result = m.handle(now, input);
        if is_start {
            assert_eq!(result.is_ok(), !self.started && !self.closed, "{result:?}");
            self.started = true;
        } else {
            assert_eq!(result, Ok(()), "only Start can be refused");
        }
        self.drain(m);
    }

    fn drain(&mut self, m: &mut Watcher) {
        let outs: Vec<Output> = std::iter::from_fn(|| m.poll()).collect();
        for out in outs {
            assert!(!self.closed, "output after Closed: {out:?}");
            match out {
                Output::Command(Command::Range { op, .. } | Command::Watch { op, .. }) => {
                    if let Some(last) = self.ops.last() {
                        assert!(op > *last, "op ids must be fresh");
                    }
                    self.ops.push(op);
                }
                Output::Command(_) => {}
                Output::Event(e) => self.apply(e),
            }
        }
        assert_eq!(self.replica, m.view(), "events replay to the view");
        assert_eq!(m.is_closed(), self.closed);
        if self.started && !self.closed {
            assert!(
                m.poll_timeout().is_some(),
                "a live machine always has a deadline"
            );
        }
    }

    fn apply(&mut self, e: Event) {
        // A history that started over is announced (`Reset`) before its
        // difference: the one place a revision may go down, to the reset's.
        if let Event::Reset { reason, revision } = &e {
            match reason {
                ResyncReason::RevisionWentBack { seen, now } => {
                    assert_eq!(now, revision, "a restore resets at etcd's revision now");
                    assert!(seen > now, "went back means lower");
                    assert!(*seen >= self.last_revision, "from the revision reflected");
                }
                ResyncReason::ClusterChanged { from, to } => assert_ne!(from, to),
                ResyncReason::HistoryDiverged { seen } => {
                    assert!(*seen <= *revision, "diverged: etcd moved past the view");
                }
                other => panic!("a reset for {other:?}"),
            }
            self.resetting = Some(reason.clone());
            self.last_revision = *revision;
            return;
        }
        let mut check_revision = |r: Revision| {
            assert!(
                r >= self.last_revision,
                "revision went back without a reset first: {r:?} < {:?}",
                self.last_revision
            );
            self.last_revision = r;
        };
        match e {
            Event::Up { host, kv, revision } => {
                check_revision(revision);
                self.milestones += 1;
                assert_ne!(Some(&host), self.exclude.as_ref(), "excluded host reported");
                assert!(coord_core::host_id::validate_host_id(&host).is_ok());
                assert!(self.replica.insert(host, kv).is_none(), "Up for an up host");
            }
            Event::Updated {
                host,
                kv,
                previous,
                revision,
            } => {
                check_revision(revision);
                let old = self.replica.insert(host, kv.clone());
                assert_eq!(
                    old.as_ref(),
                    Some(&previous),
                    "Updated's previous is the view's"
                );
                assert!(
                    kv.value != previous.value
                        || kv.lease != previous.lease
                        || kv.create_revision != previous.create_revision,
                    "an Updated changes something"
                );
            }
            Event::Down { host, revision, .. } => {
                check_revision(revision);
                self.milestones += 1;
                assert!(
                    self.replica.remove(&host).is_some(),
                    "Down for a host not up"
                );
            }
            Event::Synced { revision } => check_revision(revision),
            Event::Resynced { revision, reason } => {
                check_revision(revision);
                self.milestones += 1;
                let restore = matches!(
                    reason,
                    ResyncReason::RevisionWentBack { .. }
                        | ResyncReason::ClusterChanged { .. }
                        | ResyncReason::HistoryDiverged { .. }
                );
                let announced = self.resetting.take();
                if restore {
                    assert_eq!(announced, Some(reason), "a restore's resync was announced");
                } else {
                    assert_eq!(announced, None, "a reset closed by its own resync");
                }
            }
            Event::Reset { .. } => {}
            Event::Closed => self.closed = true,
            Event::Retrying(retry) => {
                assert!(retry.attempt > 0, "a retry counts a failure");
                assert!(
                    retry.next_at >= Instant::from_millis(self.now),
                    "a retry is never in the past"
                );
            }
            Event::StartFailed { .. } | Event::Ignored { .. } => {}
        }
    }
}
