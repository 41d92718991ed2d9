//! Fuzzing the `Prober`: demand switching on and off, probes answered,
//! refused, lost or late, time jumping. Invariants checked after every
//! step, against a model of what the prober learned:
//! - a probe is sent only while demanded, never two in flight, and never
//!   sooner than an interval after the last (`refused_interval` after a
//!   probe whose connection was refused);
//! - only the probe in flight is ever abandoned;
//! - `Returned` comes exactly when a probe is answered after the last
//!   verdict was a silence, and names that probe's send time;
//! - `Silent` comes exactly when a probe goes unanswered or is refused
//!   after an answer (or before any).

use std::time::Duration;

use arbitrary::Arbitrary;
use coord_core::io::{Command, Completion, Listing};
use coord_core::outbox::Output;
use coord_core::probe::{ProbeConfig, ProbeEvent, ProbeInput, Prober};
use coord_core::{Failure, Instant, OpId, Outcome};

#[derive(Debug, Arbitrary)]
struct Plan {
    interval_ms: u16,
    timeout_ms: u16,
    refused_ms: u16,
}

#[derive(Debug, Clone, Copy, Arbitrary)]
enum Answer {
    Ok,
    Refused,
    Unavailable,
    Broken,
    Lost,
    Denied,
}

#[derive(Debug, Arbitrary)]
enum Step {
    Demand(bool),
    Advance(u16),
    /// Answers the probe in flight (if any).
    Answer(Answer),
    /// Answers some other op (stale or made up).
    Stale {
        op: u8,
        answer: Answer,
    },
}

impl Answer {
    fn outcome(self) -> Outcome<Listing> {
        match self {
            Answer::Ok => Outcome::Ok(Listing::default()),
            Answer::Refused => Outcome::Err(Failure::Refused("fuzz".into())),
            Answer::Unavailable => Outcome::Err(Failure::Unavailable("fuzz".into())),
            Answer::Broken => Outcome::Err(Failure::StreamClosed("fuzz".into())),
            Answer::Lost => Outcome::Unknown,
            Answer::Denied => Outcome::Err(Failure::Other("permission denied".into())),
        }
    }

    fn verdict(self) -> Verdict {
        match self {
            Answer::Ok | Answer::Denied => Verdict::Answered,
            Answer::Refused => Verdict::Refused,
            Answer::Unavailable | Answer::Broken | Answer::Lost => Verdict::Silent,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    None,
    Answered,
    Silent,
    Refused,
}

impl Verdict {
    fn silent(self) -> bool {
        matches!(self, Verdict::Silent | Verdict::Refused)
    }
}

struct Harness {
    now: u64,
    config: ProbeConfig,
    demand: bool,
    /// The probe in flight: its op and send time.
    in_flight: Option<(OpId, u64)>,
    last_sent: Option<u64>,
    verdict: Verdict,
    /// A return the model expects from the step just fed: its send time.
    expect_return: Option<u64>,
    /// A silence the last step found after an answer (or before any).
    expect_silent: bool,
    milestones: usize,
}

/// Runs one fuzz case; panics on a broken invariant.
pub fn run(data: &[u8]) -> crate::Reach {
    let Some((plan, steps)) = crate::decode::<Plan, Step>(data) else {
        return crate::Reach::default();
    };
    let config = ProbeConfig::default()
        .with_interval(Duration::from_millis(u64::from(plan.interval_ms.max(1))))
        .with_request_timeout(Duration::from_millis(u64::from(plan.timeout_ms.max(1))))
        .with_refused_interval(Duration::from_millis(u64::from(plan.refused_ms)));
    let mut p = Prober::new(config.clone());
    let mut h = Harness {
        now: 0,
        config,
        demand: false,
        in_flight: None,
        last_sent: None,
        verdict: Verdict::None,
        expect_return: None,
        expect_silent: false,
        milestones: 0,
    };
    let n = steps.len();
    for step in steps {
        h.step(&mut p, step);
    }
    crate::Reach {
        steps: n,
        milestones: h.milestones,
    }
}

impl Harness {
    fn step(&mut self, p: &mut Prober, step: Step) {
        let now = Instant::from_millis(self.now);
        match step {
            Step::Demand(d) => {
                self.demand = d;
                p.handle(now, ProbeInput::Demand(d));
            }
            Step::Advance(ms) => {
                self.now += u64::from(ms);
                let now = Instant::from_millis(self.now);
                if p.poll_timeout().is_some_and(|d| d <= now) {
                    if let Some((_, sent)) = self.in_flight {
                        let timeout = self.config.request_timeout.as_millis();
                        if u128::from(self.now) >= u128::from(sent) + timeout {
                            // The probe times out: a silence.
                            self.expect_silent = !self.verdict.silent();
                            self.verdict = Verdict::Silent;
                        }
                    }
                    p.handle(now, ProbeInput::Timeout);
                } else {
                    // Before its deadline, a timeout changes nothing.
                    let deadline = p.poll_timeout();
                    p.handle(now, ProbeInput::Timeout);
                    let out = p.poll();
                    assert!(out.is_none(), "an early timeout gave {out:?}");
                    assert_eq!(p.poll_timeout(), deadline, "an early timeout moved it");
                }
            }
            Step::Answer(answer) => {
                if let Some((op, sent)) = self.in_flight.take() {
                    let verdict = answer.verdict();
                    if !verdict.silent() && self.verdict.silent() {
                        self.expect_return = Some(sent);
                    }
                    self.expect_silent = verdict.silent() && !self.verdict.silent();
                    self.verdict = verdict;
                    p.handle(
                        now,
                        ProbeInput::Io(Completion::Listed {
                            op,
                            outcome: answer.outcome(),
                        }),
                    );
                }
            }
            Step::Stale { op, answer } => {
                let op = OpId(u64::from(op) + 10_000);
                p.handle(
                    now,
                    ProbeInput::Io(Completion::Listed {
                        op,
                        outcome: answer.outcome(),
                    }),
                );
            }
        }
        self.drain(p);
    }

    /// The least time from the last probe to the next, by the last
    /// verdict: `refused_interval` after a refusal, else `interval`.
    fn pace(&self) -> Duration {
        match self.verdict {
            Verdict::Refused => self.config.refused_interval,
            Verdict::None | Verdict::Answered | Verdict::Silent => self.config.interval,
        }
    }

    fn drain(&mut self, p: &mut Prober) {
        let expected = self.expect_return.take();
        let expect_silent = std::mem::take(&mut self.expect_silent);
        let mut returned = None;
        let mut silent = false;
        while let Some(out) = p.poll() {
            match out {
                Output::Command(Command::Range { op, .. }) => {
                    assert!(self.demand, "a probe without demand");
                    assert!(self.in_flight.is_none(), "two probes in flight");
                    if let Some(last) = self.last_sent {
                        let gap = u128::from(self.now - last);
                        let least = self.pace();
                        assert!(
                            gap >= least.as_millis(),
                            "probes {gap} ms apart after {:?}",
                            self.verdict
                        );
                    }
                    self.in_flight = Some((op, self.now));
                    self.last_sent = Some(self.now);
                }
                Output::Command(Command::Abandon { op }) => {
                    let live = self.in_flight.take();
                    assert_eq!(live.map(|(o, _)| o), Some(op), "abandoned a dead op");
                }
                Output::Command(other) => panic!("unexpected command {other:?}"),
                Output::Event(ProbeEvent::Returned { sent }) => {
                    assert!(returned.is_none(), "two returns at once");
                    returned = Some(sent.as_millis());
                    self.milestones += 1;
                }
                Output::Event(ProbeEvent::Silent) => {
                    assert!(!silent, "two silences at once");
                    silent = true;
                }
            }
        }
        assert_eq!(returned, expected, "a return exactly after silence");
        assert_eq!(silent, expect_silent, "a silence exactly after an answer");
        if let Some(deadline) = p.poll_timeout() {
            assert!(
                self.demand || self.in_flight.is_some(),
                "a timer with nothing to do"
            );
            let _ = deadline;
        }
        // Demanded with nothing in flight: the next probe is due exactly
        // its interval after the last, at the pace the last verdict set.
        if let (true, None, Some(last)) = (self.demand, self.in_flight, self.last_sent) {
            let least = self.pace();
            let due = u128::from(last) + least.as_millis();
            assert!(due > u128::from(self.now), "a probe overdue, not sent");
            assert_eq!(
                p.poll_timeout().map(|d| u128::from(d.as_millis())),
                Some(due),
                "the next probe at the pace of {:?}",
                self.verdict
            );
        }
    }
}
