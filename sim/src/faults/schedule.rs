//! Fault schedules: a proptest strategy yields a case (simulation seed,
//! fleet, timed faults); [`Case::generate`] derives one from a single u64 so
//! any case can be replayed by its seed.

use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

pub use crate::faults::fault::{Direction, Fault, Target};

/// What an election or lock process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContenderKind {
    /// An `Election` on a session of its own, campaigning for `e`.
    Candidate,
    /// A `Mutex` on a session of its own, locking `l`.
    Locker,
    /// An `ElectionPool`: one session campaigning for every pool name.
    Pool,
}

/// One election or lock process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContenderSpec {
    /// What it runs.
    pub kind: ContenderKind,
    /// Its session's lease TTL, seconds.
    pub ttl: u64,
}

/// Watchers in every run.
pub const WATCHERS: usize = 2;

/// A fault at a virtual time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedFault {
    /// When, ms after the start.
    pub at_ms: u64,
    /// What.
    pub fault: Fault,
}

/// One simulated run.
#[derive(Clone, PartialEq, Eq)]
pub struct Case {
    /// The seed this case was generated from (also madsim's seed).
    pub seed: u64,
    /// Lease TTL of each host, seconds.
    pub ttls: Vec<u64>,
    /// Faults of phase 1, sorted by time.
    pub faults: Vec<TimedFault>,
    /// Length of phase 1 (faults on), ms. Phase 2 heals everything.
    pub phase1_ms: u64,
    /// Election and lock processes (none before generator V4).
    pub contenders: Vec<ContenderSpec>,
    /// Names every pool campaigns for (`p0`, `p1`, ...).
    pub pool_names: usize,
    /// The generator the case came from (not part of its fingerprint).
    /// From V6 on, watcher 0 lists serializably and every watcher's event
    /// buffer holds one event, so a stalled consumer soon fills it.
    pub generator: Generator,
}

// By hand, so a case without contenders prints (and fingerprints) exactly
// as before they existed: pinned seeds keep their schedules.
impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Case");
        d.field("seed", &self.seed)
            .field("ttls", &self.ttls)
            .field("faults", &self.faults)
            .field("phase1_ms", &self.phase1_ms);
        if !self.contenders.is_empty() {
            d.field("contenders", &self.contenders)
                .field("pool_names", &self.pool_names);
        }
        d.finish()
    }
}

impl Case {
    /// Every election or lock name of the case, in the order faults index
    /// them: `e` (candidates), `l` (lockers), then the pool names.
    pub fn names(&self) -> Vec<String> {
        let has = |k: ContenderKind| self.contenders.iter().any(|c| c.kind == k);
        let mut names = Vec::new();
        if has(ContenderKind::Candidate) {
            names.push("e".to_string());
        }
        if has(ContenderKind::Locker) {
            names.push("l".to_string());
        }
        if has(ContenderKind::Pool) {
            names.extend((0..self.pool_names).map(|i| format!("p{i}")));
        }
        names
    }

    /// The names contender `c` campaigns for.
    pub fn names_of(&self, c: usize) -> Vec<String> {
        match self.contenders.get(c).map(|s| s.kind) {
            Some(ContenderKind::Candidate) => vec!["e".into()],
            Some(ContenderKind::Locker) => vec!["l".into()],
            Some(ContenderKind::Pool) => (0..self.pool_names).map(|i| format!("p{i}")).collect(),
            None => Vec::new(),
        }
    }
}

/// Shape of generated cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Most hosts in a fleet (at least 1).
    pub max_hosts: usize,
    /// Most faults in phase 1.
    pub max_faults: usize,
    /// Phase 1 length.
    pub phase1: Duration,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            max_hosts: 10,
            max_faults: 20,
            phase1: Duration::from_secs(120),
        }
    }
}

/// Which version of the case generator. A generator is frozen once seeds
/// have been pinned with it: pinned regressions name their generator, so a
/// seed always reproduces the schedule it failed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Generator {
    /// The first fault mix: leader change, compaction, partition, pause,
    /// crash, unanswered requests.
    V1,
    /// V1 plus stop under faults and leases revoked from outside.
    V2,
    /// V2 plus partitions and GC pauses of the watchers.
    V3,
    /// V3 plus election, lock and pool processes and their faults
    /// (crashes, partitions, pauses, outside deletes of leader and waiter
    /// keys, outside revokes of a leader's lease).
    V4,
    /// V4 plus watcher crashes and etcd wiped or replaced (cases with a
    /// wipe have no election or lock processes; half the cases have none).
    V5,
    /// V5 plus a member answering serializable reads from behind (lagging
    /// or partitioned) and stalled watcher consumers; watcher 0 lists
    /// serializably and buffers are small.
    V6,
    /// V6's cases, with watcher 1's loop driven by its consumer's `next()`
    /// (`Driving::InNext`).
    V7,
    /// V7's cases, with a wiped etcd refusing connections while it is down
    /// (`Refused`, as a killed etcd's address does, where V7's answered
    /// "no leader"): the probers probe it at their refused pace.
    V8,
    /// V8's fault mix plus faults aimed at narrow paths: joins applied but
    /// unanswered with a write after them (a retried join finds its own
    /// key behind later revisions), watches resumed on a member one
    /// revision behind (a check listing at the watcher's own revision),
    /// and contenders whose keep-alives reach etcd while its replies are
    /// lost for longer than their TTL (a session's lease lost while etcd
    /// still holds it). A calm case keeps its lagging watch members too.
    V9,
    /// V9's fault mix plus a host's or contender's replies arriving late
    /// (its keep-alives acknowledged late) and then the process cut off:
    /// a lease counted from an acknowledgement's arrival instead of its
    /// keep-alive's send outlives etcd's.
    #[default]
    V10,
}

impl Generator {
    /// The newest generator: the default.
    pub const NEWEST: Generator = Generator::V10;

    /// Its version number (`--generator`).
    pub const fn number(self) -> u8 {
        match self {
            Generator::V1 => 1,
            Generator::V2 => 2,
            Generator::V3 => 3,
            Generator::V4 => 4,
            Generator::V5 => 5,
            Generator::V6 => 6,
            Generator::V7 => 7,
            Generator::V8 => 8,
            Generator::V9 => 9,
            Generator::V10 => 10,
        }
    }

    /// Whether a wiped etcd refuses connections while it is down (from V8
    /// on); before, it answered "no leader".
    pub fn wipes_refuse(self) -> bool {
        self.number() >= 8
    }

    /// The generator of a version number; the newest for any other.
    pub fn from_number(n: u8) -> Generator {
        match n {
            1 => Generator::V1,
            2 => Generator::V2,
            3 => Generator::V3,
            4 => Generator::V4,
            5 => Generator::V5,
            6 => Generator::V6,
            7 => Generator::V7,
            8 => Generator::V8,
            9 => Generator::V9,
            _ => Generator::V10,
        }
    }
}

fn fault(generator: Generator) -> BoxedStrategy<Fault> {
    match generator {
        Generator::V1 => fault_v1().boxed(),
        Generator::V2 => fault_v2().boxed(),
        Generator::V3 => fault_v3().boxed(),
        Generator::V4 => fault_v4().boxed(),
        Generator::V5 => fault_v5().boxed(),
        Generator::V6 | Generator::V7 | Generator::V8 => fault_v6().boxed(),
        Generator::V9 => fault_v9().boxed(),
        Generator::V10 => prop_oneof![
            18 => fault_v9(),
            2 => late_replies_then_cut(),
        ]
        .boxed(),
    }
}

// V9 is frozen: its structure decides the values a seed yields.
fn fault_v9() -> impl Strategy<Value = Fault> {
    prop_oneof![
        15 => fault_v6(),
        1 => (0usize..8).prop_map(|contender| Fault::UnansweredJoin { contender }),
        1 => (0usize..WATCHERS).prop_map(|watcher| Fault::LaggingWatch { watcher }),
        1 => (0usize..8, 3_000u64..16_000).prop_map(|(contender, ms)| Fault::Partition {
            target: Target::Contender(contender),
            direction: Direction::FromEtcd,
            ms,
        }),
    ]
}

/// A host's or contender's replies late by 0.3-1.5 s for 1-6 s, then the
/// process cut off for 3-15 s (long enough for most TTLs to run out).
fn late_replies_then_cut() -> impl Strategy<Value = Fault> {
    (
        prop_oneof![
            (0usize..10).prop_map(Target::Host),
            (0usize..8).prop_map(Target::Contender),
        ],
        300u64..1_500,
        1_000u64..6_000,
        3_000u64..15_000,
    )
        .prop_map(
            |(target, delay_ms, late_ms, cut_ms)| Fault::LateRepliesThenCut {
                target,
                delay_ms,
                late_ms,
                cut_ms,
            },
        )
}

// V6 (V7 and V8 alike) is frozen: its structure decides the values a seed
// yields.
fn fault_v6() -> impl Strategy<Value = Fault> {
    prop_oneof![
            12 => fault_v5(),
            1 => (
                500u64..30_000,
                prop_oneof![Just(0u64), 100u64..10_000],
                any::<bool>(),
                any::<bool>(),
            )
                .prop_map(
                |(ms, lag_ms, frozen, relist)| Fault::StaleReads { ms, lag_ms, frozen, relist }
            ),
            2 => (0usize..WATCHERS, 1_000u64..45_000)
                .prop_map(|(watcher, ms)| Fault::ConsumerStall { watcher, ms }),
    ]
}

// V5 is frozen: its structure decides the values a seed yields.
fn fault_v5() -> impl Strategy<Value = Fault> {
    prop_oneof![
        10 => fault_v4(),
        1 => (0usize..WATCHERS, 500u64..20_000)
            .prop_map(|(watcher, down_ms)| Fault::Crash { target: Target::Watcher(watcher), down_ms }),
        1 => (any::<bool>(), 100u64..5_000)
            .prop_map(|(new_cluster, down_ms)| Fault::Wipe { new_cluster, down_ms }),
    ]
}

// V4 is frozen: its structure decides the values a seed yields.
fn fault_v4() -> impl Strategy<Value = Fault> {
    prop_oneof![
            6 => fault_v3(),
            1 => contender_crash(),
            1 => contender_partition(),
            1 => contender_pause(),
            1 => (0usize..8).prop_map(|name| Fault::DeleteLeaderKey { name }),
            1 => (0usize..8).prop_map(|name| Fault::DeleteWaiterKey { name }),
            1 => (0usize..8).prop_map(|name| Fault::RevokeLeaderLease { name }),
    ]
}

// V3 is frozen: its structure decides the values a seed yields.
fn fault_v3() -> impl Strategy<Value = Fault> {
    // Flat and weighted: every kind gets a fair share.
    prop_oneof![
            2 => leader_change(),
            2 => Just(Fault::Compact),
            2 => partition(),
            2 => pause(),
            2 => crash(),
            2 => drop_replies(),
            1 => stop(),
            1 => revoke(),
            1 => watcher_partition(),
            1 => watcher_pause(),
    ]
}

fn contender_crash() -> impl Strategy<Value = Fault> {
    (0usize..8, 500u64..20_000).prop_map(|(contender, down_ms)| Fault::Crash {
        target: Target::Contender(contender),
        down_ms,
    })
}

fn contender_partition() -> impl Strategy<Value = Fault> {
    (0usize..8, direction(), 100u64..20_000).prop_map(|(contender, direction, ms)| {
        Fault::Partition {
            target: Target::Contender(contender),
            direction,
            ms,
        }
    })
}

fn contender_pause() -> impl Strategy<Value = Fault> {
    (0usize..8, 100u64..15_000).prop_map(|(contender, ms)| Fault::Pause {
        target: Target::Contender(contender),
        ms,
    })
}

fn contenders() -> impl Strategy<Value = (Vec<ContenderSpec>, usize)> {
    (
        proptest::collection::vec(2u64..=10, 1..=3),
        proptest::collection::vec(2u64..=10, 0..=2),
        proptest::option::of((2u64..=10, 2u64..=10, 2usize..=4)),
    )
        .prop_map(|(candidates, lockers, pools)| {
            let spec = |kind| move |ttl| ContenderSpec { kind, ttl };
            let mut all: Vec<ContenderSpec> = candidates
                .into_iter()
                .map(spec(ContenderKind::Candidate))
                .chain(lockers.into_iter().map(spec(ContenderKind::Locker)))
                .collect();
            let mut names = 0;
            if let Some((a, b, n)) = pools {
                all.push(spec(ContenderKind::Pool)(a));
                all.push(spec(ContenderKind::Pool)(b));
                names = n;
            }
            (all, names)
        })
}

fn fault_v2() -> impl Strategy<Value = Fault> {
    prop_oneof![fault_v1(), stop(), revoke()]
}

fn direction() -> impl Strategy<Value = Direction> {
    prop_oneof![
        Just(Direction::ToEtcd),
        Just(Direction::FromEtcd),
        Just(Direction::Both)
    ]
}

fn leader_change() -> impl Strategy<Value = Fault> {
    (100u64..3_000).prop_map(|unavailable_ms| Fault::LeaderChange { unavailable_ms })
}

fn partition() -> impl Strategy<Value = Fault> {
    (0usize..10, direction(), 100u64..30_000).prop_map(|(host, direction, ms)| Fault::Partition {
        target: Target::Host(host),
        direction,
        ms,
    })
}

fn pause() -> impl Strategy<Value = Fault> {
    (0usize..10, 100u64..20_000).prop_map(|(host, ms)| Fault::Pause {
        target: Target::Host(host),
        ms,
    })
}

fn crash() -> impl Strategy<Value = Fault> {
    (0usize..10, 500u64..30_000).prop_map(|(host, down_ms)| Fault::Crash {
        target: Target::Host(host),
        down_ms,
    })
}

fn drop_replies() -> impl Strategy<Value = Fault> {
    (100u64..5_000).prop_map(|ms| Fault::DropReplies { ms })
}

fn stop() -> impl Strategy<Value = Fault> {
    (0usize..10).prop_map(|host| Fault::Stop { host })
}

fn revoke() -> impl Strategy<Value = Fault> {
    (0usize..10).prop_map(|host| Fault::RevokeLease { host })
}

fn watcher_partition() -> impl Strategy<Value = Fault> {
    (0usize..WATCHERS, direction(), 100u64..30_000).prop_map(|(watcher, direction, ms)| {
        Fault::Partition {
            target: Target::Watcher(watcher),
            direction,
            ms,
        }
    })
}

fn watcher_pause() -> impl Strategy<Value = Fault> {
    (0usize..WATCHERS, 100u64..20_000).prop_map(|(watcher, ms)| Fault::Pause {
        target: Target::Watcher(watcher),
        ms,
    })
}

// V1 and V2 are frozen: their structure decides the values a seed yields.
fn fault_v1() -> impl Strategy<Value = Fault> {
    prop_oneof![
        leader_change(),
        Just(Fault::Compact),
        partition(),
        pause(),
        crash(),
        drop_replies(),
    ]
}

/// The strategy for cases of a shape (current generator).
pub fn cases(shape: Shape) -> BoxedStrategy<Case> {
    cases_with(shape, Generator::default())
}

/// The strategy for cases of a shape with a given generator.
pub fn cases_with(shape: Shape, generator: Generator) -> BoxedStrategy<Case> {
    let phase1_ms = u64::try_from(shape.phase1.as_millis()).unwrap_or(u64::MAX);
    let base = (
        any::<u64>(),
        proptest::collection::vec(2u64..=10, 1..=shape.max_hosts.max(1)),
        proptest::collection::vec(
            (0..phase1_ms.max(1), fault(generator)),
            0..=shape.max_faults,
        ),
    );
    let build = move |(seed, ttls, faults): (u64, Vec<u64>, Vec<(u64, Fault)>),
                      (contenders, pool_names): (Vec<ContenderSpec>, usize)| {
        let mut case = Case {
            seed,
            ttls,
            faults: Vec::new(),
            phase1_ms,
            contenders,
            pool_names,
            generator,
        };
        let n = case.ttls.len();
        let (c, names) = (case.contenders.len(), case.names().len());
        let mut faults: Vec<TimedFault> = faults
            .into_iter()
            .filter_map(|(at_ms, fault)| {
                Some(TimedFault {
                    at_ms,
                    fault: bound_contender(bound_host(fault, n), c, names)?,
                })
            })
            .collect();
        faults.sort_by_key(|f| f.at_ms);
        case.faults = faults;
        case
    };
    match generator {
        Generator::V1 | Generator::V2 | Generator::V3 => {
            base.prop_map(move |b| build(b, (Vec::new(), 0))).boxed()
        }
        Generator::V4 => (base, contenders())
            .prop_map(move |(b, c)| build(b, c))
            .boxed(),
        Generator::V5 => (base, prop_oneof![contenders(), Just((Vec::new(), 0usize))])
            .prop_map(move |(b, c)| {
                let mut case = build(b, c);
                // A wipe would restart the revisions the election
                // checkers index etcd's history by.
                if !case.contenders.is_empty() {
                    case.faults
                        .retain(|f| !matches!(f.fault, Fault::Wipe { .. }));
                }
                case
            })
            .boxed(),
        Generator::V6 | Generator::V7 | Generator::V8 | Generator::V9 | Generator::V10 => (
            base,
            prop_oneof![contenders(), Just((Vec::new(), 0usize))],
            0u8..4,
            any::<u64>(),
        )
            .prop_map(move |(b, c, calm, spread)| {
                let mut case = build(b, c);
                spread_hosts(&mut case, spread);
                // One case in four is calm for the watchers: only faults
                // of hosts and stalled consumers, so a stall is seen with
                // nothing else disturbing its watcher while the hosts
                // churn.
                if calm == 0 {
                    case.faults.retain(|f| {
                        matches!(
                            f.fault,
                            Fault::Crash {
                                target: Target::Host(_),
                                ..
                            } | Fault::Pause {
                                target: Target::Host(_),
                                ..
                            } | Fault::Partition {
                                target: Target::Host(_),
                                ..
                            } | Fault::Stop { .. }
                                | Fault::RevokeLease { .. }
                                | Fault::ConsumerStall { .. }
                        ) || (generator.number() >= 9
                            && matches!(f.fault, Fault::LaggingWatch { .. }))
                    });
                }
                // A wipe would restart the revisions the election
                // checkers index etcd's history by.
                if !case.contenders.is_empty() {
                    case.faults
                        .retain(|f| !matches!(f.fault, Fault::Wipe { .. }));
                }
                case
            })
            .boxed(),
    }
}

/// Host faults are drawn for hosts 0-9; in a larger fleet each is moved
/// to another host with the same last digit, drawn from `spread`, so every
/// host of a fleet of 1,000 can be hit.
fn spread_hosts(case: &mut Case, spread: u64) {
    let n = case.ttls.len();
    let tens = n.div_ceil(10);
    if tens <= 1 {
        return;
    }
    let mut rng = coord_core::rng::Rng::new(spread);
    let last_ten = u64::try_from(tens - 1).unwrap_or(0);
    for tf in &mut case.faults {
        let Some(host) = tf.fault.host_mut() else {
            continue;
        };
        let ten = usize::try_from(rng.below_inclusive(last_ten)).unwrap_or(0);
        let moved = *host + 10 * ten;
        *host = if moved < n { moved } else { *host };
    }
}

/// Maps contender and name indexes into the case's; `None` for a
/// contender fault in a case without contenders.
fn bound_contender(mut fault: Fault, contenders: usize, names: usize) -> Option<Fault> {
    if let Some(Target::Contender(c)) = fault.target_mut() {
        *c = c.checked_rem(contenders)?;
    }
    if let Fault::UnansweredJoin { contender } = &mut fault {
        *contender = contender.checked_rem(contenders)?;
    }
    if let Fault::DeleteLeaderKey { name }
    | Fault::DeleteWaiterKey { name }
    | Fault::RevokeLeaderLease { name } = &mut fault
    {
        *name = name.checked_rem(names)?;
    }
    Some(fault)
}

/// Maps host indexes into the fleet of `n` hosts.
fn bound_host(mut fault: Fault, n: usize) -> Fault {
    if let Some(host) = fault.host_mut() {
        *host %= n;
    }
    fault
}

impl Case {
    /// The case for `seed` (current generator): the strategy sampled with
    /// an RNG seeded by it, so `generate(seed, shape)` always gives the same
    /// case.
    pub fn generate(seed: u64, shape: Shape) -> Case {
        Self::generate_with(seed, shape, Generator::default())
    }

    /// The case for `seed` from a given generator version.
    pub fn generate_with(seed: u64, shape: Shape, generator: Generator) -> Case {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &key);
        let mut runner = TestRunner::new_with_rng(Config::default(), rng);
        let mut case = match cases_with(shape, generator).new_tree(&mut runner) {
            Ok(tree) => tree.current(),
            // The strategy has no filters, so this cannot happen; a case
            // with no faults keeps the campaign going if it ever does.
            Err(_) => Case {
                seed,
                ttls: vec![3],
                faults: Vec::new(),
                phase1_ms: 0,
                contenders: Vec::new(),
                pool_names: 0,
                generator,
            },
        };
        case.seed = seed;
        case
    }
}

impl Case {
    /// A fingerprint of the schedule itself (FNV-1a of its debug text), so a
    /// pinned seed can assert it still yields the schedule it failed with.
    pub fn fingerprint(&self) -> u64 {
        let text = format!("{self:?}");
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in text.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_generator_is_the_newest_and_numbers_round_trip() {
        assert_eq!(Generator::default(), Generator::NEWEST);
        for n in 1..=Generator::NEWEST.number() {
            assert_eq!(Generator::from_number(n).number(), n);
        }
    }
}
