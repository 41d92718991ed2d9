//! The prober by exact outputs.

use super::*;
use crate::io::Listing;
use crate::OpId;

fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn drain(p: &mut Prober) -> Vec<Output<Command, ProbeEvent>> {
    std::iter::from_fn(|| p.poll()).collect()
}

fn probe(op: u64) -> Output<Command, ProbeEvent> {
    Output::Command(Command::Range {
        op: OpId(op),
        request: RangeRequest {
            get: Get {
                limit: 1,
                ..Get::key(Key(PROBE_KEY.to_vec()))
            },
            consistency: Consistency::Serializable,
            after: None,
            revision: crate::Revision(0),
        },
    })
}

fn answer(p: &mut Prober, now: u64, op: u64, outcome: Outcome<Listing>) {
    p.handle(
        t(now),
        ProbeInput::Io(Completion::Listed {
            op: OpId(op),
            outcome,
        }),
    );
}

fn ok() -> Outcome<Listing> {
    Outcome::Ok(Listing::default())
}

fn returned(sent: u64) -> Output<Command, ProbeEvent> {
    Output::Event(ProbeEvent::Returned { sent: t(sent) })
}

#[test]
fn nothing_is_sent_without_demand() {
    let mut p = Prober::new(ProbeConfig::default());
    assert_eq!(p.poll_timeout(), None);
    p.handle(t(5), ProbeInput::Timeout);
    p.handle(t(6), ProbeInput::Demand(false));
    assert_eq!(drain(&mut p), vec![]);
    assert_eq!(p.health(), Health::Unknown);
}

#[test]
fn a_return_after_silence_is_reported_once_and_probes_are_an_interval_apart() {
    let mut p = Prober::new(ProbeConfig::default());
    p.handle(t(0), ProbeInput::Demand(true));
    assert_eq!(drain(&mut p), vec![probe(1)]);
    // Unanswered: silence, reported; the next probe waits for the interval
    // from the last send (here the timeout is as long, so it goes at once).
    assert_eq!(p.poll_timeout(), Some(t(1_000)));
    p.handle(t(1_000), ProbeInput::Timeout);
    assert_eq!(
        drain(&mut p),
        vec![
            Output::Command(Command::Abandon { op: OpId(1) }),
            Output::Event(ProbeEvent::Silent),
            probe(2)
        ]
    );
    assert_eq!(p.health(), Health::Silent);
    // Refused at once: still silent (not reported again), and the next
    // probe rests until a second after this one was sent.
    answer(
        &mut p,
        1_010,
        2,
        Outcome::Err(Failure::Unavailable("refused".into())),
    );
    assert_eq!(drain(&mut p), vec![]);
    assert_eq!(p.poll_timeout(), Some(t(2_000)));
    p.handle(t(2_000), ProbeInput::Timeout);
    assert_eq!(drain(&mut p), vec![probe(3)]);
    // Answered: etcd is back.
    answer(&mut p, 2_020, 3, ok());
    assert_eq!(drain(&mut p), vec![returned(2_000)]);
    assert_eq!(p.health(), Health::Answering);
    // Still demanded: probes go on, an interval apart, and report nothing
    // while etcd keeps answering.
    p.handle(t(3_000), ProbeInput::Timeout);
    assert_eq!(drain(&mut p), vec![probe(4)]);
    answer(&mut p, 3_005, 4, ok());
    assert_eq!(drain(&mut p), vec![]);
    // Silent again, refused this time: reported again, and so is the
    // return after it.
    p.handle(t(4_000), ProbeInput::Timeout);
    assert_eq!(drain(&mut p), vec![probe(5)]);
    answer(
        &mut p,
        4_001,
        5,
        Outcome::Err(Failure::StreamClosed("reset".into())),
    );
    assert_eq!(drain(&mut p), vec![Output::Event(ProbeEvent::Silent)]);
    p.handle(t(5_000), ProbeInput::Timeout);
    assert_eq!(drain(&mut p), vec![probe(6)]);
    answer(&mut p, 5_002, 6, ok());
    assert_eq!(drain(&mut p), vec![returned(5_000)]);
}

#[test]
fn a_timeout_before_the_deadline_changes_nothing() {
    let mut p = Prober::new(ProbeConfig::default());
    p.handle(t(0), ProbeInput::Demand(true));
    assert_eq!(drain(&mut p), vec![probe(1)]);
    // Probing: the answer is awaited until t = 1 s.
    p.handle(t(999), ProbeInput::Timeout);
    assert_eq!(drain(&mut p), vec![]);
    assert_eq!(p.poll_timeout(), Some(t(1_000)));
    assert_eq!(p.health(), Health::Unknown);
    // Resting: the next probe goes a second after the last.
    answer(&mut p, 10, 1, ok());
    assert_eq!(p.poll_timeout(), Some(t(1_000)));
    p.handle(t(999), ProbeInput::Timeout);
    assert_eq!(drain(&mut p), vec![]);
    assert_eq!(p.poll_timeout(), Some(t(1_000)));
    p.handle(t(1_000), ProbeInput::Timeout);
    assert_eq!(drain(&mut p), vec![probe(2)]);
}

#[test]
fn an_answer_without_a_silence_before_it_cuts_nothing() {
    // Machines back off because etcd is slow, yet it answers the probe:
    // nothing to cut, so heavy retries keep backing off.
    let mut p = Prober::new(ProbeConfig::default());
    p.handle(t(0), ProbeInput::Demand(true));
    drain(&mut p);
    answer(&mut p, 3, 1, ok());
    assert_eq!(drain(&mut p), vec![]);
    // An error that is an answer (permission denied) is not a silence.
    p.handle(t(1_000), ProbeInput::Timeout);
    assert_eq!(drain(&mut p), vec![probe(2)]);
    answer(
        &mut p,
        1_004,
        2,
        Outcome::Err(Failure::Other("permission denied".into())),
    );
    assert_eq!(drain(&mut p), vec![]);
    assert_eq!(p.health(), Health::Answering);
}

#[test]
fn demand_ending_stops_probing_and_a_stale_answer_is_ignored() {
    let mut p = Prober::new(ProbeConfig::default());
    p.handle(t(0), ProbeInput::Demand(true));
    drain(&mut p);
    p.handle(t(1_000), ProbeInput::Timeout);
    drain(&mut p);
    // An answer to the abandoned probe changes nothing.
    answer(&mut p, 1_001, 1, ok());
    assert_eq!(drain(&mut p), vec![]);
    assert_eq!(p.health(), Health::Silent);
    // The in-flight probe still counts; after it, nothing more is sent.
    p.handle(t(1_100), ProbeInput::Demand(false));
    answer(&mut p, 1_200, 2, ok());
    assert_eq!(drain(&mut p), vec![returned(1_000)]);
    assert_eq!(p.poll_timeout(), None);
    // Demand again within the interval: the probe waits for it.
    p.handle(t(1_500), ProbeInput::Demand(true));
    assert_eq!(drain(&mut p), vec![]);
    assert_eq!(p.poll_timeout(), Some(t(2_000)));
    p.handle(t(1_600), ProbeInput::Demand(false));
    assert_eq!(p.poll_timeout(), None);
}

#[test]
fn never_more_than_one_probe_per_interval_whatever_the_inputs() {
    // A deterministic storm of inputs: sends stay an interval apart.
    let mut p = Prober::new(ProbeConfig::default());
    let mut sent: Vec<u64> = Vec::new();
    let mut rng = crate::rng::Rng::new(9);
    let mut now = 0;
    for _ in 0..5_000 {
        now += rng.below_inclusive(300);
        match rng.below_inclusive(3) {
            0 => p.handle(t(now), ProbeInput::Demand(rng.below_inclusive(1) == 0)),
            1 => p.handle(t(now), ProbeInput::Timeout),
            _ => {
                let op = sent.len() as u64;
                let outcome = if rng.below_inclusive(1) == 0 {
                    ok()
                } else {
                    Outcome::Unknown
                };
                answer(&mut p, now, op, outcome);
            }
        }
        for o in drain(&mut p) {
            if let Output::Command(Command::Range { .. }) = o {
                sent.push(now);
            }
        }
    }
    assert!(sent.len() > 50, "{}", sent.len());
    assert!(sent.windows(2).all(|w| w[1] - w[0] >= 1_000), "{sent:?}");
}

#[test]
fn demand_told_again_while_resting_keeps_the_next_probe() {
    let mut p = Prober::new(ProbeConfig::default());
    p.handle(t(0), ProbeInput::Demand(true));
    assert_eq!(drain(&mut p), vec![probe(1)]);
    answer(&mut p, 10, 1, ok());
    let _ = drain(&mut p);
    // Resting until a second after the last probe; demand said again
    // (another loop starts waiting) neither cancels nor hastens it.
    assert_eq!(p.poll_timeout(), Some(t(1_000)));
    p.handle(t(500), ProbeInput::Demand(true));
    assert_eq!(drain(&mut p), vec![]);
    assert_eq!(p.poll_timeout(), Some(t(1_000)));
    p.handle(t(1_000), ProbeInput::Timeout);
    assert_eq!(drain(&mut p), vec![probe(2)]);
}

fn refused() -> Outcome<Listing> {
    Outcome::Err(Failure::Refused("connection refused".into()))
}

#[test]
fn a_refused_probe_is_a_silence_probed_again_at_the_refused_pace() {
    let mut p = Prober::new(ProbeConfig::default());
    p.handle(t(0), ProbeInput::Demand(true));
    assert_eq!(drain(&mut p), vec![probe(1)]);
    // Refused at once: a silence, reported, and the next probe goes 50 ms
    // after this one was sent, not a second.
    answer(&mut p, 2, 1, refused());
    assert_eq!(drain(&mut p), vec![Output::Event(ProbeEvent::Silent)]);
    assert_eq!(p.health(), Health::Refused);
    assert_eq!(p.poll_timeout(), Some(t(50)));
    p.handle(t(49), ProbeInput::Timeout);
    assert_eq!(drain(&mut p), vec![]);
    p.handle(t(50), ProbeInput::Timeout);
    assert_eq!(drain(&mut p), vec![probe(2)]);
    // Refused again: the silence is not told twice.
    answer(&mut p, 51, 2, refused());
    assert_eq!(drain(&mut p), vec![]);
    assert_eq!(p.poll_timeout(), Some(t(100)));
    p.handle(t(100), ProbeInput::Timeout);
    assert_eq!(drain(&mut p), vec![probe(3)]);
    // etcd listens again and answers: found back, named by this probe.
    answer(&mut p, 103, 3, ok());
    assert_eq!(drain(&mut p), vec![returned(100)]);
    assert_eq!(p.health(), Health::Answering);
    // Answering: the normal pace again.
    assert_eq!(p.poll_timeout(), Some(t(1_100)));
}

#[test]
fn an_etcd_that_accepts_connections_is_probed_at_the_normal_pace_however_it_answers() {
    let mut p = Prober::new(ProbeConfig::default());
    p.handle(t(0), ProbeInput::Demand(true));
    assert_eq!(drain(&mut p), vec![probe(1)]);
    answer(&mut p, 1, 1, refused());
    assert_eq!(drain(&mut p), vec![Output::Event(ProbeEvent::Silent)]);
    p.handle(t(50), ProbeInput::Timeout);
    assert_eq!(drain(&mut p), vec![probe(2)]);
    // The connection is taken (etcd starting, or a proxy that holds it)
    // but no answer comes: still silent, and the next probe waits a whole
    // interval from this one.
    p.handle(t(1_050), ProbeInput::Timeout);
    assert_eq!(
        drain(&mut p),
        vec![Output::Command(Command::Abandon { op: OpId(2) }), probe(3)]
    );
    assert_eq!(p.health(), Health::Silent);
    // etcd answers "unavailable" (no leader) at once: it answered, so the
    // next probe waits the whole interval too.
    answer(
        &mut p,
        1_052,
        3,
        Outcome::Err(Failure::Unavailable("etcdserver: no leader".into())),
    );
    assert_eq!(drain(&mut p), vec![]);
    assert_eq!(p.health(), Health::Silent);
    assert_eq!(p.poll_timeout(), Some(t(2_050)));
}

#[test]
fn a_refused_probe_after_an_answer_is_a_silence_told_once() {
    let mut p = Prober::new(ProbeConfig::default());
    p.handle(t(0), ProbeInput::Demand(true));
    assert_eq!(drain(&mut p), vec![probe(1)]);
    answer(&mut p, 1, 1, ok());
    assert_eq!(drain(&mut p), vec![]);
    p.handle(t(1_000), ProbeInput::Timeout);
    assert_eq!(drain(&mut p), vec![probe(2)]);
    answer(&mut p, 1_001, 2, refused());
    assert_eq!(drain(&mut p), vec![Output::Event(ProbeEvent::Silent)]);
    // Demand ends and comes back while refused: the refused pace holds.
    p.handle(t(1_010), ProbeInput::Demand(false));
    assert_eq!(p.poll_timeout(), None);
    p.handle(t(1_020), ProbeInput::Demand(true));
    assert_eq!(p.poll_timeout(), Some(t(1_050)));
    p.handle(t(1_050), ProbeInput::Timeout);
    assert_eq!(drain(&mut p), vec![probe(3)]);
}

#[test]
fn each_setter_sets_its_own_option_only() {
    let set = ProbeConfig::default()
        .with_interval(Duration::from_secs(3))
        .with_request_timeout(Duration::from_millis(700))
        .with_refused_interval(Duration::from_millis(20));
    assert_eq!(
        set,
        ProbeConfig {
            interval: Duration::from_secs(3),
            request_timeout: Duration::from_millis(700),
            refused_interval: Duration::from_millis(20),
        }
    );
    let d = ProbeConfig::default();
    assert_eq!(
        d.clone().with_request_timeout(Duration::from_millis(700)),
        ProbeConfig {
            request_timeout: Duration::from_millis(700),
            ..d
        }
    );
}
