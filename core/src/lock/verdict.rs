//! What a file lock's marker, found on disk, means: a pure function of
//! the marker, this host, a probe of the marker's pid and the marker's
//! age, so that every case is tested (and fuzzed) without processes.
//!
//! On this host the pid tells: no such process means the holder died; a
//! live process that started when the marker says is the holder; one that
//! started at another time reused a dead holder's pid. Elsewhere (another
//! host, a pid owned by another user, an unknown start time) the pid
//! cannot tell, and the stale window decides: a holder keeps its marker
//! fresh, so a marker not refreshed for `stale_after` looks dead.

use std::time::Duration;

use super::marker::Marker;

/// How markers are judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub enum Strategy {
    /// The pid where it can tell, else the stale window.
    #[default]
    PidFirst,
    /// The pid only: a marker it cannot judge is never taken over (only
    /// an operator's sweep or removal frees it).
    PidOnly,
    /// The stale window only (markers on shared storage where pids mean
    /// nothing).
    TimeOnly,
}

/// What probing the marker's pid on this host found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum PidProbe {
    /// Not probed (another host's marker, or the `TimeOnly` strategy).
    NotProbed,
    /// No such process (`ESRCH`).
    Gone,
    /// A process of another user (`EPERM`): alive, but whose it is cannot
    /// be told.
    Denied,
    /// The probe failed otherwise.
    Failed,
    /// A live process, and when it started if that could be read.
    Alive {
        /// Its start time (Linux: `/proc/<pid>/stat` field 22).
        start_time: Option<u64>,
    },
}

/// The judgement of a marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Its holder is alive: the lock is held.
    Held,
    /// Its holder died (no such process on this host): take over.
    Dead,
    /// Its pid now belongs to another process (another start time): the
    /// holder died; take over.
    Reused,
    /// Nothing could be told from the pid, and the marker was not
    /// refreshed for the stale window: take over.
    Stale,
    /// Nothing could be told, and the marker is fresh (or the strategy
    /// never takes over on time): the lock counts as held.
    Inconclusive,
}

impl Verdict {
    /// True if the marker may be taken over.
    pub fn takes_over(self) -> bool {
        matches!(self, Verdict::Dead | Verdict::Reused | Verdict::Stale)
    }
}

/// Judges `marker`, found by a process on host `here`, whose pid probed
/// as `probe` (meaningful only on the marker's own host), last refreshed
/// `age` ago.
pub fn verdict(
    strategy: Strategy,
    marker: &Marker,
    here: &str,
    probe: PidProbe,
    age: Duration,
    stale_after: Duration,
) -> Verdict {
    let stale = age >= stale_after;
    let by_pid = || -> Option<Verdict> {
        if marker.host != here {
            return None;
        }
        match probe {
            PidProbe::Gone => Some(Verdict::Dead),
            PidProbe::Alive {
                start_time: Some(now),
            } => match marker.start_time {
                Some(then) if then == now => Some(Verdict::Held),
                Some(_) => Some(Verdict::Reused),
                None => None,
            },
            PidProbe::Alive { start_time: None }
            | PidProbe::Denied
            | PidProbe::Failed
            | PidProbe::NotProbed => None,
        }
    };
    match strategy {
        Strategy::TimeOnly if stale => Verdict::Stale,
        Strategy::TimeOnly => Verdict::Held,
        Strategy::PidFirst | Strategy::PidOnly => match by_pid() {
            Some(v) => v,
            None if stale && strategy == Strategy::PidFirst => Verdict::Stale,
            None => Verdict::Inconclusive,
        },
    }
}

/// Judges a marker file that cannot be read as one (corrupt, foreign,
/// half-written by a tool that does not write atomically): nothing can
/// be told from it, so the stale window decides, as for an inconclusive
/// pid (`TimeOnly` and `PidFirst` take it over once it is `stale_after`
/// old; `PidOnly` never).
pub fn verdict_unreadable(strategy: Strategy, age: Duration, stale_after: Duration) -> Verdict {
    match strategy {
        Strategy::PidOnly => Verdict::Inconclusive,
        Strategy::PidFirst | Strategy::TimeOnly if age >= stale_after => Verdict::Stale,
        Strategy::PidFirst | Strategy::TimeOnly => Verdict::Inconclusive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HERE: &str = "here";
    const STALE: Duration = Duration::from_secs(30);

    fn marker(host: &str, start_time: Option<u64>) -> Marker {
        Marker {
            pid: 77,
            start_time,
            host: host.into(),
            acquired_ms: 0,
            token: 1,
        }
    }

    /// The issue's rules, case by case, written apart from the code.
    fn expected(
        strategy: Strategy,
        same_host: bool,
        recorded: Option<u64>,
        probe: PidProbe,
        stale: bool,
    ) -> Verdict {
        use Verdict::*;
        if strategy == Strategy::TimeOnly {
            return if stale { Stale } else { Held };
        }
        // What the pid says, on this host only.
        let said = match (same_host, probe, recorded) {
            (true, PidProbe::Gone, _) => Some(Dead),
            (
                true,
                PidProbe::Alive {
                    start_time: Some(5),
                },
                Some(5),
            ) => Some(Held),
            (
                true,
                PidProbe::Alive {
                    start_time: Some(6),
                },
                Some(5),
            ) => Some(Reused),
            _ => None,
        };
        match (said, strategy, stale) {
            (Some(v), _, _) => v,
            (None, Strategy::PidFirst, true) => Stale,
            (None, _, _) => Inconclusive,
        }
    }

    #[test]
    fn every_case_is_judged_as_the_rules_say() {
        let probes = [
            PidProbe::NotProbed,
            PidProbe::Gone,
            PidProbe::Denied,
            PidProbe::Failed,
            PidProbe::Alive { start_time: None },
            PidProbe::Alive {
                start_time: Some(5),
            },
            PidProbe::Alive {
                start_time: Some(6),
            },
        ];
        let ages = [
            (Duration::ZERO, false),
            (STALE - Duration::from_nanos(1), false),
            (STALE, true),
            (STALE * 10, true),
        ];
        let mut cases = 0;
        for strategy in [Strategy::PidFirst, Strategy::PidOnly, Strategy::TimeOnly] {
            for (host, same_host) in [(HERE, true), ("there", false)] {
                for recorded in [None, Some(5)] {
                    for probe in probes {
                        for (age, stale) in ages {
                            let m = marker(host, recorded);
                            let got = verdict(strategy, &m, HERE, probe, age, STALE);
                            let want = expected(strategy, same_host, recorded, probe, stale);
                            assert_eq!(
                                got, want,
                                "{strategy:?} {host} recorded {recorded:?} {probe:?} age {age:?}"
                            );
                            cases += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(cases, 3 * 2 * 2 * 7 * 4);
    }

    #[test]
    fn an_unreadable_marker_is_judged_by_its_age_alone() {
        let old = STALE;
        let young = STALE - Duration::from_millis(1);
        for strategy in [Strategy::PidFirst, Strategy::TimeOnly] {
            assert_eq!(verdict_unreadable(strategy, old, STALE), Verdict::Stale);
            assert_eq!(
                verdict_unreadable(strategy, young, STALE),
                Verdict::Inconclusive
            );
        }
        assert_eq!(
            verdict_unreadable(Strategy::PidOnly, old * 100, STALE),
            Verdict::Inconclusive
        );
    }

    #[test]
    fn the_issues_named_cases() {
        let v = |m: &Marker, probe, age| verdict(Strategy::PidFirst, m, HERE, probe, age, STALE);
        let mine = marker(HERE, Some(5));
        let fresh = Duration::from_secs(1);
        // Dead holder on this host: taken over at once, however fresh.
        assert_eq!(v(&mine, PidProbe::Gone, fresh), Verdict::Dead);
        // Alive, same start time: held, however old.
        let alive = PidProbe::Alive {
            start_time: Some(5),
        };
        assert_eq!(v(&mine, alive, STALE * 100), Verdict::Held);
        // Pid reused.
        let reused = PidProbe::Alive {
            start_time: Some(9),
        };
        assert_eq!(v(&mine, reused, fresh), Verdict::Reused);
        // Another user's process (EPERM): the stale window decides.
        assert_eq!(v(&mine, PidProbe::Denied, fresh), Verdict::Inconclusive);
        assert_eq!(v(&mine, PidProbe::Denied, STALE), Verdict::Stale);
        // Another host: the stale window, whatever a local pid says.
        let theirs = marker("there", Some(5));
        assert_eq!(v(&theirs, PidProbe::Gone, fresh), Verdict::Inconclusive);
        assert_eq!(v(&theirs, PidProbe::Gone, STALE), Verdict::Stale);
        assert!(!Verdict::Held.takes_over());
        assert!(!Verdict::Inconclusive.takes_over());
        assert!(Verdict::Dead.takes_over() && Verdict::Reused.takes_over());
        assert!(Verdict::Stale.takes_over());
    }
}
