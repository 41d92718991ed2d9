use super::*;
use crate::history::{Aftermath, CampaignMode, Entry, Record};

/// A script of one name's contender events: (at, contender, event).
struct Script(Vec<Record>);

impl Script {
    fn new() -> Self {
        Script(Vec::new())
    }

    fn at(mut self, at_ms: u64, contender: usize, event: ContenderEvent) -> Self {
        self.0.push(Record {
            at_ms,
            what: Entry::Contender {
                contender,
                incarnation: 1,
                name: "e".into(),
                event,
            },
        });
        self
    }

    /// Something else the harness recorded at `at_ms` (a fault).
    fn harness(mut self, at_ms: u64, what: Entry) -> Self {
        self.0.push(Record { at_ms, what });
        self
    }

    fn started(self, at: u64, c: usize) -> Self {
        self.at(
            at,
            c,
            ContenderEvent::Started {
                mode: CampaignMode::Wait,
            },
        )
    }

    fn elected(self, at: u64, c: usize, key: &str, token: i64) -> Self {
        self.at(
            at,
            c,
            ContenderEvent::Elected {
                token,
                lease: 1,
                key: key.into(),
                leads: true,
                ended: false,
            },
        )
    }

    fn write(
        self,
        (since_ms, at): (u64, u64),
        c: usize,
        token: i64,
        outcome: WriteOutcome,
    ) -> Self {
        self.at(
            at,
            c,
            ContenderEvent::Write {
                since_ms,
                token,
                outcome,
                leads: true,
            },
        )
    }

    fn read(self, (since_ms, at): (u64, u64), c: usize, leader: Option<(&str, i64)>) -> Self {
        let leader = leader.map(|(k, t)| (k.to_string(), t, Vec::new()));
        self.at(at, c, ContenderEvent::LeaderRead { since_ms, leader })
    }

    fn resigned(self, (since, at): (u64, u64), c: usize) -> Self {
        self.at(since, c, ContenderEvent::Resigning).at(
            at,
            c,
            ContenderEvent::Resigned {
                ok: true,
                after: Aftermath {
                    leads: false,
                    ended: true,
                    loss: Some("resigned".into()),
                },
            },
        )
    }

    fn dropped(self, at: u64, c: usize, key: &str, token: i64) -> Self {
        self.at(
            at,
            c,
            ContenderEvent::Dropped {
                token,
                key: key.into(),
            },
        )
    }

    /// The check's verdict: the violation's detail, if any, and the tally.
    fn check(self) -> (Option<String>, LockHistories) {
        let mut records = self.0;
        records.sort_by_key(|r| r.at_ms);
        let mut v = Verdict::default();
        super::check(&History { records }, &mut v);
        assert!(v.checks > 0, "nothing was checked");
        let found = v
            .violations
            .iter()
            .find(|x| x.invariant == Invariant::LockLinearizable)
            .map(|x| x.detail.clone());
        (found, v.lock_histories)
    }
}

fn linearizable(s: Script) {
    let (found, tally) = s.check();
    assert_eq!(found, None);
    assert_eq!(
        tally,
        LockHistories {
            linearizable: 1,
            undecided: 0
        }
    );
}

fn violated(s: Script) -> String {
    let (found, tally) = s.check();
    assert_eq!(tally.linearizable, 0);
    found.unwrap_or_else(|| panic!("no violation found"))
}

#[test]
fn leaders_one_after_another_with_their_writes_are_a_lock() {
    linearizable(
        Script::new()
            .started(0, 0)
            .started(1, 1)
            .elected(10, 0, "e/a", 5)
            .write((20, 25), 0, 5, WriteOutcome::Applied)
            .read((21, 26), 1, Some(("e/a", 5)))
            .resigned((30, 35), 0)
            .elected(36, 1, "e/b", 6)
            .write((40, 45), 1, 6, WriteOutcome::Applied)
            .write((40, 45), 0, 5, WriteOutcome::NotLeader)
            .read((50, 51), 0, Some(("e/b", 6))),
    );
}

#[test]
fn a_stale_leaders_write_applied_after_its_successor_was_elected_is_caught() {
    let found = violated(
        Script::new()
            .started(0, 0)
            .started(1, 1)
            .elected(10, 0, "e/a", 5)
            .write((20, 25), 0, 5, WriteOutcome::Applied)
            .elected(30, 1, "e/b", 9)
            .write((40, 45), 0, 5, WriteOutcome::Applied),
    );
    assert!(found.contains("fenced write"), "{found}");
}

#[test]
fn a_lease_that_may_have_expired_explains_a_successor_while_the_old_leader_still_believed() {
    // The old leader never learned of its loss before the successor, and
    // its last write went before: a lease may expire at any time.
    linearizable(
        Script::new()
            .started(0, 0)
            .started(1, 1)
            .elected(10, 0, "e/a", 5)
            .write((20, 25), 0, 5, WriteOutcome::Applied)
            .elected(30, 1, "e/b", 9)
            .write((40, 45), 0, 5, WriteOutcome::NotLeader)
            .write((40, 45), 1, 9, WriteOutcome::Applied),
    );
}

#[test]
fn tokens_going_down_between_leaders_are_caught() {
    violated(
        Script::new()
            .started(0, 0)
            .elected(10, 0, "e/a", 9)
            .resigned((20, 25), 0)
            .started(30, 1)
            .elected(40, 1, "e/b", 7),
    );
}

#[test]
fn a_session_adopting_its_own_key_again_keeps_its_token() {
    linearizable(
        Script::new()
            .started(0, 0)
            .elected(10, 0, "e/a", 5)
            .dropped(20, 0, "e/a", 5)
            .started(25, 0)
            .elected(30, 0, "e/a", 5)
            .write((40, 45), 0, 5, WriteOutcome::Applied),
    );
}

#[test]
fn a_write_the_driver_refused_says_nothing_of_etcd() {
    // Its session counted the lease lost and refused the write itself,
    // while etcd still held the key (seed 4614 of generator 10).
    linearizable(
        Script::new()
            .started(0, 0)
            .elected(10, 0, "e/a", 5)
            .write((20, 25), 0, 5, WriteOutcome::NotLeader)
            .read((30, 35), 1, Some(("e/a", 5))),
    );
}

#[test]
fn no_leader_read_while_the_leader_still_writes_is_caught() {
    violated(
        Script::new()
            .started(0, 0)
            .elected(10, 0, "e/a", 5)
            .read((20, 25), 1, None)
            .write((30, 35), 0, 5, WriteOutcome::Applied),
    );
}

#[test]
fn a_read_of_the_leaders_key_under_another_token_is_caught() {
    // The leader's key read back with an older create revision than the
    // token its election reported: a key incarnation etcd could not have
    // made after the leader's.
    let found = violated(
        Script::new()
            .started(0, 0)
            .elected(10, 0, "e/a", 7)
            .read((20, 25), 1, Some(("e/a", 6)))
            .write((30, 35), 0, 7, WriteOutcome::NotLeader),
    );
    assert!(found.contains("read of leader e/a (token 6)"), "{found}");
}

#[test]
fn a_withdrawn_campaigns_key_may_be_read_as_leader() {
    linearizable(
        Script::new()
            .started(0, 0)
            .at(5, 0, ContenderEvent::Cancelled { lease: Some(1) })
            .read((6, 8), 1, Some(("e/a", 3)))
            .started(20, 1)
            .elected(30, 1, "e/b", 4)
            .read((40, 41), 0, Some(("e/b", 4))),
    );
}

#[test]
fn a_confirmed_resign_leaves_no_leader_to_read() {
    violated(
        Script::new()
            .started(0, 0)
            .elected(10, 0, "e/a", 5)
            .resigned((20, 25), 0)
            .read((30, 35), 1, Some(("e/a", 5))),
    );
}

#[test]
fn a_resign_returning_while_cut_off_leaves_the_key_to_its_lease() {
    // Cut off, the resign returns once the session's lease is lost; the
    // key stays in etcd until the lease expires there, and is read.
    use crate::faults::schedule::{Direction, Fault, Target};
    let cut = Fault::Partition {
        target: Target::Contender(0),
        direction: Direction::Both,
        ms: 20_000,
    };
    linearizable(
        Script::new()
            .started(0, 0)
            .elected(10, 0, "e/a", 5)
            .harness(15, Entry::Fault(cut))
            .resigned((20, 5_000), 0)
            .read((6_000, 6_010), 1, Some(("e/a", 5)))
            .harness(20_015, Entry::ContenderPartitionEnded { contender: 0 }),
    );
}

#[test]
fn two_leaders_writing_at_once_are_caught() {
    violated(
        Script::new()
            .started(0, 0)
            .started(0, 1)
            .elected(10, 0, "e/a", 5)
            .elected(11, 1, "e/b", 6)
            .write((20, 25), 1, 6, WriteOutcome::Applied)
            .write((30, 35), 0, 5, WriteOutcome::Applied),
    );
}

#[test]
fn leaders_elected_at_once_are_a_lock_while_none_writes() {
    // Each may have let go at any time (its lease expired), so elections
    // alone never contradict one another.
    let mut s = Script::new();
    for c in 0..8 {
        s = s
            .started(0, c)
            .elected(10 + c as u64, c, &format!("e/{c}"), 5 + c as i64);
    }
    linearizable(s);
}

#[test]
fn a_search_past_its_budget_is_undecided_not_failed() {
    let s = Script::new()
        .started(0, 0)
        .elected(10, 0, "e/a", 5)
        .write((20, 25), 0, 5, WriteOutcome::Applied)
        .resigned((30, 35), 0);
    let history = History { records: s.0 };
    let names = histories(&history);
    let h = &names["e"];
    assert_eq!(search(h, 2), Outcome::Undecided);
    assert_eq!(search(h, STEP_BUDGET), Outcome::Linearizable);
}
