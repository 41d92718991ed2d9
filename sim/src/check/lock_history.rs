//! A linearizability check of every lock and election, from what the
//! contenders saw alone, in the style of Porcupine and Knossos (the
//! Wing–Gong–Lowe search): no hand-written rule about a failure's shape,
//! only the question whether some order of the operations, each taking
//! effect at one instant between its call and its return, is a legal run
//! of a sequential fenced lock.
//!
//! The sequential lock of one name holds at most one holder at a time,
//! each holder a key incarnation (key, token); holders' tokens strictly
//! increase, but for the same incarnation taken up again (a campaign that
//! adopts its session's key that never went away). Its operations:
//!
//! - **acquire** (a campaign that reported itself elected, from its start
//!   to its `Elected`): legal when free, with a greater token (or the same
//!   incarnation again); it holds then;
//! - **release** (of each elected leadership, from its campaign's start,
//!   as it may end before its `Elected` is reported): legal
//!   while it holds; it is free then. Confirmed by a `resign()` that
//!   returned `Ok` ending the leadership as resigned while its process
//!   and etcd were undisturbed (it happened by then: a disturbed resign
//!   may return once the session's lease is lost, its key left to expire
//!   with it); otherwise it may happen at any time or never (a lease may
//!   expire, a drop releases in the background, a crash leaves it to the
//!   TTL);
//! - **fenced write** (from its send to its answer): applied, legal while
//!   its leadership holds; refused as not leader, or failed or unknown, no
//!   operation (the driver refuses by itself once it counts its lease
//!   lost, which says nothing of etcd; an unknown one may have landed);
//! - **leader read** (`Election::leader`, from its call to its answer):
//!   legal while the holder is the incarnation read (or none for none);
//! - **appear** (a key incarnation a read saw that no campaign could have
//!   been elected with by then: a withdrawn or failed campaign's key, or a
//!   waiter's that was to fail): acquires like an acquire, at any time or
//!   never, and its release likewise.
//!
//! Names are independent (P-compositionality): each name's history is
//! searched alone, with the visited (linearized set, lock state) pairs
//! remembered so that no state is explored twice. A search that would
//! exceed [`STEP_BUDGET`] is counted as undecided, not failed.

use std::collections::{BTreeMap, HashSet};

use super::contenders::{disturbances, undisturbed};
use super::verdict::{Invariant, LockHistories, Verdict};
use crate::history::{ContenderEvent, ContenderRecord, History, WriteOutcome, RESIGNED};

/// Most search steps for one name's history; beyond, it is undecided.
pub const STEP_BUDGET: u64 = 2_000_000;

/// A return that never came: the operation may take effect at any time
/// after its call, or never.
const PENDING: u64 = u64::MAX;

/// One key incarnation that may hold a name: (key, token).
type Incarnation = (String, i64);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    /// Incarnation `holder` takes the lock.
    Acquire(usize),
    /// Incarnation `holder` lets it go.
    Release(usize),
    /// A fenced write of incarnation `holder` that etcd applied.
    Write(usize),
    /// A read of the holder: `None` for no leader.
    Read(Option<usize>),
}

/// One operation of a name's history, with who did it (for the report).
#[derive(Debug, Clone)]
struct Op {
    call: u64,
    ret: u64,
    kind: OpKind,
    contender: Option<usize>,
}

/// The sequential lock: its holder, and the last incarnation that held it
/// (the token order runs through it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct LockState {
    holder: Option<usize>,
    last: Option<usize>,
}

/// One name's operations and the incarnations they name.
#[derive(Debug, Default)]
struct NameHistory {
    incarnations: Vec<Incarnation>,
    ops: Vec<Op>,
    /// Each incarnation a campaign was elected with: one of its indices
    /// and the earliest start of a campaign elected with it.
    elected: BTreeMap<Incarnation, (usize, u64)>,
    /// Each incarnation only reads saw: its index.
    appeared: BTreeMap<Incarnation, usize>,
}

impl NameHistory {
    fn incarnation(&mut self, key: &str, token: i64) -> usize {
        self.incarnations.push((key.to_string(), token));
        self.incarnations.len() - 1
    }

    /// A campaign started at `call` elected with (key, token), now at
    /// `ret`: its acquire, and its release at any time after its call (it
    /// may have ended as soon as it took effect, before its `Elected`,
    /// which a paused process reports late). Returns its incarnation and
    /// its release's op.
    fn elected(
        &mut self,
        key: &str,
        token: i64,
        (call, ret): (u64, u64),
        contender: usize,
    ) -> (usize, usize) {
        let i = self.incarnation(key, token);
        let first = self
            .elected
            .entry((key.to_string(), token))
            .or_insert((i, call));
        if call < first.1 {
            *first = (i, call);
        }
        let contender = Some(contender);
        self.ops.push(Op {
            call,
            ret,
            kind: OpKind::Acquire(i),
            contender,
        });
        self.ops.push(Op {
            call,
            ret: PENDING,
            kind: OpKind::Release(i),
            contender,
        });
        (i, self.ops.len() - 1)
    }

    /// The incarnation a read answered at `ret` saw as leader: one a
    /// campaign begun by then was elected with, or else one that may
    /// appear and go at any time (the same one for every read that needs
    /// it).
    fn read(&mut self, key: &str, token: i64, ret: u64) -> usize {
        let incarnation = (key.to_string(), token);
        match self.elected.get(&incarnation) {
            Some(&(i, call)) if call <= ret => i,
            _ => {
                if let Some(&i) = self.appeared.get(&incarnation) {
                    return i;
                }
                let i = self.incarnation(key, token);
                self.appeared.insert(incarnation, i);
                for kind in [OpKind::Acquire(i), OpKind::Release(i)] {
                    self.ops.push(Op {
                        call: 0,
                        ret: PENDING,
                        kind,
                        contender: None,
                    });
                }
                i
            }
        }
    }

    /// The next state after `op`, or `None` when `op` is not legal in `s`.
    fn step(&self, s: LockState, op: OpKind) -> Option<LockState> {
        match op {
            OpKind::Acquire(h) => {
                if s.holder.is_some() {
                    return None;
                }
                let follows = s.last.is_none_or(|last| {
                    let (key, token) = &self.incarnations[h];
                    let (last_key, last_token) = &self.incarnations[last];
                    token > last_token || (token == last_token && key == last_key)
                });
                follows.then_some(LockState {
                    holder: Some(h),
                    last: Some(h),
                })
            }
            OpKind::Release(h) => (s.holder == Some(h)).then_some(LockState {
                holder: None,
                last: s.last,
            }),
            OpKind::Write(holder) => (s.holder == Some(holder)).then_some(s),
            OpKind::Read(None) => s.holder.is_none().then_some(s),
            OpKind::Read(Some(read)) => s
                .holder
                .is_some_and(|h| self.incarnations[h] == self.incarnations[read])
                .then_some(s),
        }
    }
}

/// Every name's history, built from the contenders' events: per process
/// incarnation and name, its campaigns, leaderships, writes and reads.
fn histories(history: &History) -> BTreeMap<&str, NameHistory> {
    /// Where one process's loop on one name stands.
    #[derive(Default)]
    struct Stream {
        started: Option<u64>,
        /// The leadership held: its incarnation and its release's op.
        holding: Option<(usize, usize)>,
        /// When its resign began.
        resigning: Option<u64>,
    }
    // Each contender's disturbances, looked up as its resigns return.
    let mut disturbed: BTreeMap<usize, Vec<(u64, u64)>> = BTreeMap::new();
    let mut names: BTreeMap<&str, NameHistory> = BTreeMap::new();
    let mut streams: BTreeMap<(usize, u64, &str), Stream> = BTreeMap::new();
    /// A leader read, kept to resolve once every election is known.
    struct Read<'h> {
        name: &'h str,
        op: Op,
        leader: Option<(&'h str, i64)>,
    }
    let mut reads: Vec<Read> = Vec::new();
    for ContenderRecord {
        at_ms: at,
        contender,
        incarnation,
        name,
        event,
    } in history.contender_events()
    {
        let c = Some(contender);
        let h = names.entry(name).or_default();
        let stream = streams.entry((contender, incarnation, name)).or_default();
        match event {
            ContenderEvent::Started { .. } => {
                *stream = Stream {
                    started: Some(at),
                    ..Stream::default()
                };
            }
            ContenderEvent::Elected { token, key, .. } => {
                let call = stream.started.unwrap_or(at);
                stream.holding = Some(h.elected(key, *token, (call, at), contender));
            }
            ContenderEvent::Write {
                since_ms, outcome, ..
            } => {
                if *outcome != WriteOutcome::Applied {
                    continue;
                }
                if let Some((holder, _)) = stream.holding {
                    h.ops.push(Op {
                        call: *since_ms,
                        ret: at,
                        kind: OpKind::Write(holder),
                        contender: c,
                    });
                }
            }
            ContenderEvent::LeaderRead { since_ms, leader } => {
                reads.push(Read {
                    name,
                    op: Op {
                        call: *since_ms,
                        ret: at,
                        kind: OpKind::Read(None),
                        contender: c,
                    },
                    leader: leader.as_ref().map(|(k, t, _)| (k.as_str(), *t)),
                });
            }
            ContenderEvent::Resigning => stream.resigning = Some(at),
            ContenderEvent::Resigned { ok, after } => {
                let since = stream.resigning.take().unwrap_or(at);
                if let Some((_, release)) = stream.holding.take() {
                    let mut calm = || {
                        let d = disturbed
                            .entry(contender)
                            .or_insert_with(|| disturbances(history, contender));
                        undisturbed(d, since, at)
                    };
                    if *ok && after.loss.as_deref() == Some(RESIGNED) && calm() {
                        h.ops[release].ret = at;
                    }
                }
            }
            ContenderEvent::Lost { .. } | ContenderEvent::Dropped { .. } => {
                stream.holding = None;
            }
            _ => {}
        }
    }
    for Read {
        name,
        mut op,
        leader,
    } in reads
    {
        let h = names.entry(name).or_default();
        op.kind = OpKind::Read(leader.map(|(key, token)| h.read(key, token, op.ret)));
        h.ops.push(op);
    }
    names
}

/// How one name's search ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Linearizable,
    /// No legal order: the operation whose return the deepest attempt
    /// could not pass, and how many operations it had ordered.
    Violation {
        op: usize,
        ordered: usize,
    },
    Undecided,
}

/// The list of call and return entries the search walks, linked both
/// ways so that an operation is lifted out and put back in O(1).
struct Entries {
    /// (op, is_call) per entry; entry 0 is the head, the last the tail.
    of: Vec<(usize, bool)>,
    next: Vec<usize>,
    prev: Vec<usize>,
    /// Each op's (call entry, return entry).
    at: Vec<(usize, usize)>,
}

impl Entries {
    fn new(ops: &[Op]) -> Self {
        let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(ops.len() * 2);
        for (i, op) in ops.iter().enumerate() {
            // At one instant, calls come before returns: operations that
            // touch at a millisecond count as concurrent.
            events.push((op.call, false, i));
            events.push((op.ret, true, i));
        }
        events.sort_unstable();
        let n = events.len() + 2;
        let mut of = vec![(usize::MAX, false); n];
        let mut at = vec![(0, 0); ops.len()];
        for (e, &(_, is_return, op)) in events.iter().enumerate() {
            of[e + 1] = (op, !is_return);
            if is_return {
                at[op].1 = e + 1;
            } else {
                at[op].0 = e + 1;
            }
        }
        Entries {
            of,
            next: (1..=n).collect(),
            prev: (0..n).map(|e| e.saturating_sub(1)).collect(),
            at,
        }
    }

    fn tail(&self) -> usize {
        self.of.len() - 1
    }

    fn unlink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = n;
        self.prev[n] = p;
    }

    fn relink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = e;
        self.prev[n] = e;
    }

    fn lift(&mut self, op: usize) {
        let (call, ret) = self.at[op];
        self.unlink(call);
        self.unlink(ret);
    }

    fn unlift(&mut self, op: usize) {
        let (call, ret) = self.at[op];
        self.relink(ret);
        self.relink(call);
    }
}

/// Searches for a legal order of `h`'s operations, in at most `budget`
/// steps.
fn search(h: &NameHistory, budget: u64) -> Outcome {
    let ops = &h.ops;
    let mut entries = Entries::new(ops);
    let mut due = ops.iter().filter(|op| op.ret != PENDING).count();
    let mut ordered = vec![0u64; ops.len().div_ceil(64)];
    let mut seen: HashSet<(Vec<u64>, LockState)> = HashSet::new();
    let mut stack: Vec<(usize, LockState)> = Vec::new();
    let mut state = LockState {
        holder: None,
        last: None,
    };
    let mut deepest = (0, usize::MAX);
    let mut entry = entries.next[0];
    let mut steps = 0u64;
    while due > 0 && entry != entries.tail() {
        steps += 1;
        if steps > budget {
            return Outcome::Undecided;
        }
        let (op, is_call) = entries.of[entry];
        if !is_call {
            // An operation returned that no order so far could place:
            // undo the latest choice and try the next.
            if stack.len() >= deepest.0 {
                deepest = (stack.len(), op);
            }
            let Some((undone, before)) = stack.pop() else {
                return Outcome::Violation {
                    op: deepest.1,
                    ordered: deepest.0,
                };
            };
            state = before;
            ordered[undone / 64] &= !(1 << (undone % 64));
            entries.unlift(undone);
            if ops[undone].ret != PENDING {
                due += 1;
            }
            entry = entries.next[entries.at[undone].0];
            continue;
        }
        if let Some(after) = h.step(state, ops[op].kind) {
            ordered[op / 64] |= 1 << (op % 64);
            if seen.insert((ordered.clone(), after)) {
                stack.push((op, state));
                state = after;
                entries.lift(op);
                if ops[op].ret != PENDING {
                    due -= 1;
                }
                entry = entries.next[0];
                continue;
            }
            ordered[op / 64] &= !(1 << (op % 64));
        }
        entry = entries.next[entry];
    }
    Outcome::Linearizable
}

/// Checks every name's history and adds to `v` (its
/// [`Verdict::lock_histories`] among them).
pub(super) fn check(history: &History, v: &mut Verdict) {
    let mut tally = LockHistories::default();
    for (name, h) in histories(history) {
        if h.ops.is_empty() {
            continue;
        }
        v.checks += h.ops.len() as u64;
        match search(&h, STEP_BUDGET) {
            Outcome::Linearizable => tally.linearizable += 1,
            Outcome::Undecided => tally.undecided += 1,
            Outcome::Violation { op, ordered } => {
                let o = &h.ops[op];
                let who = o
                    .contender
                    .map_or("an appeared key".to_string(), |c| format!("contender {c}"));
                v.violate(
                    Invariant::LockLinearizable,
                    if o.ret == PENDING { o.call } else { o.ret },
                    None,
                    format!(
                        "no order of {name}'s {} operations is a run of a fenced lock: with {ordered} placed, {who}'s {} ({} to {} ms) fits nowhere",
                        h.ops.len(),
                        describe(&h, o.kind),
                        o.call,
                        o.ret
                    ),
                );
            }
        }
    }
    v.lock_histories = tally;
}

fn describe(h: &NameHistory, kind: OpKind) -> String {
    let inc = |i: usize| {
        let (key, token) = &h.incarnations[i];
        format!("{key} (token {token})")
    };
    match kind {
        OpKind::Acquire(i) => format!("election of {}", inc(i)),
        OpKind::Release(i) => format!("release of {}", inc(i)),
        OpKind::Write(holder) => format!("applied fenced write of {}", inc(holder)),
        OpKind::Read(None) => "read of no leader".to_string(),
        OpKind::Read(Some(i)) => format!("read of leader {}", inc(i)),
    }
}

#[cfg(test)]
#[path = "lock_history_tests.rs"]
mod tests;
