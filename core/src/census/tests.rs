use super::*;
use crate::io::Granted;
use crate::io::Listing;
use crate::liveness::{Input, Liveness, LivenessConfig, Output};
use crate::outcome::Failure;
use crate::StartPolicy;

const PREFIX: &[u8] = b"/coord/hosts/";
const OWN: &[u8] = b"/coord/hosts/h1";

fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn fleet() -> FleetConfig {
    FleetConfig::new(Key(PREFIX.to_vec()), 1_000_000)
}

fn census() -> Census {
    seeded(7)
}

/// A census of host `OWN` (window 5 s, reads unanswered after 2 s)
/// drawing its jitter from `seed`.
fn seeded(seed: u64) -> Census {
    Census::new(
        fleet(),
        Key(OWN.to_vec()),
        Duration::from_secs(5),
        Duration::from_secs(2),
        seed,
        1,
    )
}

fn counted(op: OpId, count: u64) -> Completion {
    Completion::Listed {
        op,
        outcome: Outcome::Ok(Listing {
            count,
            ..Listing::default()
        }),
    }
}

/// The two reads of a census: every key under the prefix, and those after
/// the host's own key, each one key and its count, serializable.
fn asked(c: &mut Census) -> (OpId, OpId) {
    let reads: Vec<Command> = std::iter::from_fn(|| c.poll()).collect();
    let [Command::Range {
        op: all,
        request: a,
    }, Command::Range {
        op: after,
        request: b,
    }] = reads.as_slice()
    else {
        panic!("two reads expected, got {reads:?}");
    };
    for r in [a, b] {
        assert_eq!(r.get.key, Key(PREFIX.to_vec()));
        assert!(r.get.prefix);
        assert_eq!(r.get.limit, 1, "a count, not a listing");
        assert_eq!(r.consistency, Consistency::Serializable);
    }
    assert_eq!(a.after, None);
    assert_eq!(b.after, Some(Key(OWN.to_vec())));
    assert_eq!(crate::outbox::slot_of(*all), 1);
    (*all, *after)
}

/// A census registered at 0 and asked when due: the instant, and its two
/// reads. The early and the second census are answered first, so this one
/// is a steady one (the next due `every` after it).
fn asking(c: &mut Census) -> (u64, OpId, OpId) {
    c.registered(t(0), true);
    for _ in 0..2 {
        let due = c.poll_timeout().expect("a census due").as_millis();
        c.timeout(t(due));
        let (all, after) = asked(c);
        let _ = c.io(t(due), &counted(all, 1));
        assert!(c.io(t(due), &counted(after, 0)).is_some());
    }
    let due = c.poll_timeout().expect("a census due").as_millis();
    c.timeout(t(due));
    let (all, after) = asked(c);
    (due, all, after)
}

#[test]
fn a_census_is_due_a_while_after_registering_and_gives_the_rank() {
    let mut c = census();
    assert_eq!(c.poll_timeout(), None, "no census before registering");
    c.registered(t(0), true);
    // The early census: within 50 ms of registering.
    let early = c.poll_timeout().expect("a census due").as_millis();
    assert!(early <= 50, "early census at {early}");
    c.timeout(t(early));
    let (all, after) = asked(&mut c);
    let _ = c.io(t(early + 1), &counted(all, 4));
    assert!(c.io(t(early + 2), &counted(after, 0)).is_some());
    // The next a fifth of the interval on, plus up to as much again.
    let due = c.poll_timeout().expect("a census due").as_millis();
    assert!(
        (12_000..=24_000).contains(&(due - (early + 2))),
        "second census at {due}"
    );
    c.timeout(t(due - 1));
    assert_eq!(c.poll(), None, "not before it is due");
    c.timeout(t(due));
    let (all, after) = asked(&mut c);
    assert!(c.owns(all) && c.owns(after));
    // 10 hosts, 3 after this one: 6 before it.
    assert_eq!(c.io(t(due + 5), &counted(after, 3)), None, "one count in");
    let slot = c.io(t(due + 6), &counted(all, 10)).expect("both counts in");
    assert_eq!(
        slot,
        Slot::new(
            6,
            10,
            Duration::from_millis(5),
            Duration::from_secs(5),
            1_000_000
        )
    );
    assert_eq!(slot.period(), Duration::from_millis(50));
    // The next census a minute on, jittered by up to a quarter.
    let next = c.poll_timeout().unwrap().as_millis() - (due + 6);
    assert!((60_000..=75_000).contains(&next), "next in {next}");
    assert!(!c.owns(all), "answered reads are no longer the census's");
}

#[test]
fn a_failed_or_unanswered_census_changes_nothing_and_comes_again() {
    let mut c = census();
    let (due, all, after) = asking(&mut c);
    let failed = Completion::Listed {
        op: all,
        outcome: Outcome::Err(Failure::Unavailable("no leader".into())),
    };
    assert_eq!(c.io(t(due + 1), &failed), None);
    assert_eq!(c.poll(), Some(Command::Abandon { op: after }));
    assert!(c.poll_timeout().unwrap().as_millis() >= due + 60_001);
    // Unanswered: abandoned at the request deadline.
    let again = c.poll_timeout().unwrap().as_millis();
    c.timeout(t(again));
    let (all, after) = asked(&mut c);
    assert_eq!(c.poll_timeout(), Some(t(again + 2_000)));
    c.timeout(t(again + 2_000));
    let abandoned: Vec<Command> = std::iter::from_fn(|| c.poll()).collect();
    assert_eq!(
        abandoned,
        vec![Command::Abandon { op: all }, Command::Abandon { op: after }]
    );
    assert_eq!(c.io(t(again + 2_001), &counted(all, 4)), None, "too late");
}

/// A failed read of the later keys ends the census as a failed count of
/// the fleet does; a failed answer to an op not the census's, or a
/// timeout before the reads' deadline, changes nothing.
#[test]
fn either_read_failing_ends_the_census_and_nothing_else_does() {
    let mut c = census();
    let (due, all, after) = asking(&mut c);
    let failed = |op| Completion::Listed {
        op,
        outcome: Outcome::Err(Failure::Unavailable("no leader".into())),
    };
    let deadline = c.poll_timeout();
    assert_eq!(deadline, Some(t(due + 2_000)));
    c.timeout(t(due + 1_999));
    assert_eq!(c.poll(), None, "abandoned before the deadline");
    assert_eq!(c.io(t(due + 1), &failed(OpId(999_999))), None);
    assert_eq!(c.poll(), None, "a stray failure ended the census");
    assert_eq!(c.poll_timeout(), deadline);
    assert!(c.owns(all) && c.owns(after));
    assert_eq!(c.io(t(due + 2), &failed(after)), None);
    assert_eq!(c.poll(), Some(Command::Abandon { op: all }));
    assert!(c.poll_timeout().unwrap().as_millis() >= due + 60_002);
    assert!(!c.owns(all) && !c.owns(after));
}

/// Hosts that registered together do not take their census together: the
/// first is due at a jittered instant, and so is each one after it.
#[test]
fn a_census_is_jittered_by_its_seed() {
    let mut firsts = std::collections::BTreeSet::new();
    let mut nexts = std::collections::BTreeSet::new();
    for seed in 0..8 {
        let mut c = seeded(seed);
        let (due, all, after) = asking(&mut c);
        firsts.insert(due);
        let _ = c.io(t(due), &counted(all, 3));
        let _ = c.io(t(due), &counted(after, 1));
        nexts.insert(c.poll_timeout().unwrap().as_millis() - due);
    }
    assert!(firsts.len() >= 6, "first censuses at {firsts:?}");
    assert!(nexts.len() >= 6, "next censuses after {nexts:?}");
}

#[test]
fn no_census_while_not_registered() {
    let mut c = census();
    let (due, all, after) = asking(&mut c);
    c.registered(t(due + 1), false);
    let abandoned: Vec<Command> = std::iter::from_fn(|| c.poll()).collect();
    assert_eq!(
        abandoned,
        vec![Command::Abandon { op: all }, Command::Abandon { op: after }]
    );
    assert_eq!(c.poll_timeout(), None);
    c.registered(t(due + 2), true);
    assert!(c.poll_timeout().is_some(), "due again once registered");
    c.registered(t(due + 3), false);
    assert_eq!(c.poll_timeout(), None);
}

/// A host whose key is not under the prefix (yet) counts as the last.
#[test]
fn a_host_missing_from_its_count_ranks_last() {
    let mut c = census();
    let (due, all, after) = asking(&mut c);
    let _ = c.io(t(due), &counted(all, 0));
    let slot = c.io(t(due), &counted(after, 0)).unwrap();
    assert_eq!(
        slot,
        Slot::new(
            0,
            0,
            Duration::from_millis(5),
            Duration::from_secs(5),
            1_000_000
        )
    );
}

/// Every command `m` has to send now (events dropped).
fn commands(m: &mut Liveness) -> Vec<Command> {
    std::iter::from_fn(|| m.poll())
        .filter_map(|o| match o {
            Output::Command(c) => Some(c),
            Output::Event(_) => None,
        })
        .collect()
}

/// A host of a 1,000-host fleet, registered and counted (400 hosts after
/// it: rank 599, slot period 5 s), whose keep-alive stream then breaks
/// (refused). Returns the machine and the time.
fn counted_host_cut_off() -> (Liveness, u64) {
    let mut config = LivenessConfig::new(Key(OWN.to_vec()), b"{}".to_vec(), 9);
    config.lease.request_timeout = Duration::from_secs(2);
    config.lease.start = StartPolicy::Retry;
    config.fleet = Some(FleetConfig::new(Key(PREFIX.to_vec()), 1_000_000));
    let mut m = Liveness::new(config).unwrap();
    m.handle(t(0), Input::Start).unwrap();
    let cmds = commands(&mut m);
    let Some(Command::Grant { op, .. }) = cmds.first() else {
        panic!("{cmds:?}")
    };
    let granted = Granted {
        lease: crate::LeaseId(5),
        ttl_secs: 10,
    };
    m.handle(
        t(1),
        Input::Io(Completion::Granted {
            op: *op,
            outcome: Outcome::Ok(granted),
        }),
    )
    .unwrap();
    let Some(Command::Txn { op, .. }) = commands(&mut m).first().cloned() else {
        panic!("no attach")
    };
    let attached = crate::io::TxnResponse {
        succeeded: true,
        revision: crate::Revision(3),
        responses: Vec::new(),
        cluster: crate::ClusterId::default(),
    };
    m.handle(
        t(2),
        Input::Io(Completion::Txn {
            op,
            outcome: Outcome::Ok(attached),
        }),
    )
    .unwrap();
    let Some(Command::OpenKeepAlive { op: stream, .. }) = commands(&mut m).first().cloned() else {
        panic!("no stream")
    };
    m.handle(
        t(3),
        Input::Io(Completion::KeepAliveReply {
            stream,
            ttl_secs: 10,
        }),
    )
    .unwrap();
    assert!(m.lease().is_some());
    assert_eq!(m.slot(), None, "no census yet");
    // Keep-alives until the census is due, then answer it: 1,000 hosts,
    // 400 after this one.
    let mut now;
    let reads = loop {
        now = m.poll_timeout().unwrap().as_millis();
        m.handle(t(now), Input::Timeout).unwrap();
        let cmds = commands(&mut m);
        for c in &cmds {
            if let Command::SendKeepAlive { stream, .. } = c {
                m.handle(
                    t(now),
                    Input::Io(Completion::KeepAliveReply {
                        stream: *stream,
                        ttl_secs: 10,
                    }),
                )
                .unwrap();
            }
        }
        let reads: Vec<(OpId, Option<Key>)> = cmds
            .iter()
            .filter_map(|c| match c {
                Command::Range { op, request } => Some((*op, request.after.clone())),
                _ => None,
            })
            .collect();
        if !reads.is_empty() {
            break reads;
        }
        assert!(now < 30_000, "no census by {now}");
    };
    for (op, after) in reads {
        let count = if after.is_some() { 400 } else { 1_000 };
        m.handle(t(now), Input::Io(counted(op, count))).unwrap();
    }
    let slot = m.slot().expect("a slot from the census");
    assert_eq!(slot.period(), Duration::from_secs(5), "1,000 × 5 ms");
    refuse(&mut m, t(now), stream);
    let _ = commands(&mut m);
    (m, now)
}

/// Wall time ≡ 599 × 5 ms (mod 5 s): the slot of [`counted_host_cut_off`].
fn on_slot(at: Instant) -> bool {
    (at.as_millis() + 1_000_000) % 5_000 == 2_995
}

/// etcd refuses the keep-alive stream `op` at `at`.
fn refuse(m: &mut Liveness, at: Instant, op: OpId) {
    m.handle(
        at,
        Input::Io(Completion::KeepAliveClosed {
            stream: op,
            failure: Failure::Unavailable("refused".into()),
        }),
    )
    .unwrap();
}

/// Runs `m` to its next deadline: when that was, and the keep-alive
/// stream it then opened, if any.
fn next_reopen(m: &mut Liveness) -> (Instant, Option<OpId>) {
    let at = m.poll_timeout().unwrap();
    m.handle(at, Input::Timeout).unwrap();
    let op = commands(m).into_iter().find_map(|c| match c {
        Command::OpenKeepAlive { op, .. } => Some(op),
        _ => None,
    });
    (at, op)
}

/// The liveness machine of a fleet: registers, takes its census, then
/// paces a lasting failure's retries on its slot, holds them while the
/// prober finds etcd silent, and cuts the wait to the slot when etcd
/// returns.
#[test]
fn a_registered_host_retries_a_lasting_failure_on_its_fleet_slot() {
    let (mut m, _) = counted_host_cut_off();
    // etcd refuses from now on: every reopen fails at once.
    // Each reopen of the stream (or, once the lease's deadline passed,
    // each resume) is sent at a retry instant.
    let mut retries = Vec::new();
    while retries.len() < 8 {
        if let (at, Some(op)) = next_reopen(&mut m) {
            retries.push(at);
            refuse(&mut m, at, op);
        }
    }
    // The first retries are this host's own; from the third on, each is
    // on the slot: wall time ≡ 599 × 5 ms (mod 5 s).
    assert!(retries.len() == 8);
    assert!(
        retries[2..].iter().all(|at| on_slot(*at)),
        "{retries:?} (wall phases {:?})",
        retries
            .iter()
            .map(|a| (a.as_millis() + 1_000_000) % 5_000)
            .collect::<Vec<_>>()
    );
    // The prober finds etcd silent: the slotted wait is held for etcd's
    // return (a slow cap at most, on the slot), and nothing of the
    // engine's goes meanwhile.
    let now = retries[7].as_millis() + 10;
    let _ = commands(&mut m);
    m.handle(t(now), Input::Silent).unwrap();
    let held = m.poll_timeout().unwrap();
    assert!(
        on_slot(held) && held.as_millis() >= now + 30_000,
        "held to {held}"
    );
    m.handle(t(now + 4_000), Input::Timeout).unwrap();
    let sent: Vec<Command> = commands(&mut m)
        .into_iter()
        .filter(|c| !matches!(c, Command::Range { .. }))
        .collect();
    assert_eq!(sent, vec![], "sent while etcd was silent");
    // etcd returns: the wait is cut to the next slot, not a random delay.
    let now = now + 5_000;
    m.handle(t(now), Input::Returned { probe_sent: t(now) })
        .unwrap();
    let next = m.poll_timeout().unwrap();
    assert!(on_slot(next), "cut to {next}");
    assert!(next.as_millis() - now < 5_000);
    // The retry goes there; when it fails, the next is this host's own
    // again (etcd was found back): not held, not slotted.
    let (at, Some(op)) = next_reopen(&mut m) else {
        panic!("no retry at the slot")
    };
    assert_eq!(at, next);
    refuse(&mut m, next, op);
    let again = m.poll_timeout().unwrap();
    assert!(again.as_millis() - next.as_millis() <= 100, "{again}");
}

/// The fleet's parameters are checked with the rest: each range closed at
/// both ends, and a prefix to count.
#[test]
fn a_fleet_config_out_of_range_is_refused() {
    use crate::lease::ConfigError;
    let ms = Duration::from_millis;
    let with = |prefix: &[u8], spacing, every| {
        let mut c = LivenessConfig::new(Key(OWN.to_vec()), b"{}".to_vec(), 1);
        c.fleet = Some(FleetConfig {
            spacing,
            every,
            ..FleetConfig::new(Key(prefix.to_vec()), 0)
        });
        c.validate()
    };
    let refused = |spacing, every| Err(ConfigError::FleetOutOfRange { spacing, every });
    let minute = Duration::from_secs(60);
    assert_eq!(with(PREFIX, ms(5), minute), Ok(()));
    assert_eq!(with(PREFIX, ms(1), Duration::from_secs(1)), Ok(()));
    assert_eq!(with(PREFIX, ms(1_000), Duration::from_secs(86_400)), Ok(()));
    assert_eq!(with(PREFIX, ms(0), minute), refused(ms(0), minute));
    assert_eq!(with(PREFIX, ms(1_001), minute), refused(ms(1_001), minute));
    assert_eq!(with(PREFIX, ms(5), ms(999)), refused(ms(5), ms(999)));
    let day = Duration::from_secs(86_401);
    assert_eq!(with(PREFIX, ms(5), day), refused(ms(5), day));
    assert_eq!(with(b"", ms(5), minute), refused(ms(5), minute));
    assert!(Liveness::new({
        let mut c = LivenessConfig::new(Key(OWN.to_vec()), b"{}".to_vec(), 1);
        c.fleet = Some(FleetConfig {
            spacing: ms(0),
            ..fleet()
        });
        c
    })
    .is_err());
}

/// A stream that keeps failing to reopen while the lease is still alive:
/// once the prober finds etcd silent, the reopen waiting on the slot is
/// held (past the lease's deadline, which then passes with the wait kept),
/// and nothing is sent until etcd returns.
#[test]
fn a_silence_holds_a_slotted_reopen_of_a_live_lease() {
    let (mut m, start) = counted_host_cut_off();
    // Reopens fail until one is sent on the slot whose next slot is past
    // the lease's deadline, which then comes first.
    let now = loop {
        let (at, reopen) = next_reopen(&mut m);
        if let Some(op) = reopen {
            refuse(&mut m, at, op);
            let deadline = m.expires_at().expect("the lease lives");
            if on_slot(at) && deadline < at + Duration::from_secs(5) {
                break at.as_millis();
            }
        }
        assert!(at.as_millis() < start + 10_000, "no reopen on the slot");
    };
    let _ = commands(&mut m);
    let deadline = m.expires_at().expect("still held: the lease lives");
    assert_eq!(m.poll_timeout(), Some(deadline));
    assert!(deadline.as_millis() < now + 5_000, "before the next slot");
    m.handle(t(now), Input::Silent).unwrap();
    // The lease's deadline passes without a request, and so does the
    // slot that was next.
    let mut at = m.poll_timeout().unwrap();
    let mut last = t(now);
    while at.as_millis() < now + 30_000 {
        m.handle(at, Input::Timeout).unwrap();
        last = at;
        let sent: Vec<Command> = commands(&mut m)
            .into_iter()
            .filter(|c| !matches!(c, Command::Range { .. }))
            .collect();
        assert_eq!(sent, vec![], "sent at {at} while etcd was silent");
        at = m.poll_timeout().unwrap();
    }
    assert!(on_slot(at), "the hold ends on the slot: {at}");
    // etcd returns: the wait is cut to the next slot.
    let back = last + Duration::from_millis(1);
    m.handle(back, Input::Returned { probe_sent: back })
        .unwrap();
    let next = m.poll_timeout().unwrap();
    assert!(
        on_slot(next) && next < back + Duration::from_secs(5),
        "{next}"
    );
}

/// Only a host's first registration is counted at once: a host registered
/// again (its lease lost and healed, as a whole fleet's may be after etcd
/// was wiped) counts a fifth of the interval later, as before. An early
/// census that fails leaves the second one due as if it had been answered.
#[test]
fn only_the_first_registration_is_counted_at_once() {
    let mut firsts = std::collections::BTreeSet::new();
    for seed in 0..8 {
        let mut c = seeded(seed);
        c.registered(t(0), true);
        let early = c.poll_timeout().expect("early census").as_millis();
        assert!(early <= 50, "early census at {early}");
        firsts.insert(early);
        c.timeout(t(early));
        let (all, after) = asked(&mut c);
        let failed = Completion::Listed {
            op: all,
            outcome: Outcome::Err(Failure::Unavailable("no leader".into())),
        };
        assert_eq!(c.io(t(early + 1), &failed), None);
        assert_eq!(c.poll(), Some(Command::Abandon { op: after }));
        let second = c.poll_timeout().expect("second census").as_millis() - (early + 1);
        assert!((12_000..=24_000).contains(&second), "second after {second}");
        // Lost and registered again: a fifth of the interval on.
        c.registered(t(early + 2), false);
        assert_eq!(c.poll_timeout(), None);
        c.registered(t(5_000), true);
        let again = c.poll_timeout().expect("census again").as_millis() - 5_000;
        assert!((12_000..=24_000).contains(&again), "again after {again}");
    }
    assert!(firsts.len() >= 6, "early censuses at {firsts:?}");
}

/// The early census comes within 50 ms of registering, jittered, whatever
/// the interval between censuses (1 s, a minute, a day).
#[test]
fn the_early_census_comes_within_50_ms_whatever_the_interval() {
    for every in [1, 60, 86_400].map(Duration::from_secs) {
        let mut earlies = std::collections::BTreeSet::new();
        for seed in 0..16 {
            let mut c = Census::new(
                FleetConfig { every, ..fleet() },
                Key(OWN.to_vec()),
                Duration::from_secs(5),
                Duration::from_secs(2),
                seed,
                1,
            );
            c.registered(t(1_000), true);
            let early = c.poll_timeout().expect("early census").as_millis() - 1_000;
            assert!(
                early <= 50,
                "early census at {early} (every {every:?}, seed {seed})"
            );
            earlies.insert(early);
        }
        assert!(earlies.len() >= 8, "jittered: {earlies:?}");
    }
}
