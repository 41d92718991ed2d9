//! Before a mirror resumes its watch after a break, it reads back, at the
//! revision its view reflects, the kept key it saw change last. In the
//! same history etcd returns exactly that key-value. Anything else means
//! etcd's history is no longer the one the view was built from: it was
//! restored or wiped and has since moved past the view's revision (so the
//! revision alone cannot tell), and the mirror must re-list. An empty view
//! reads back the first few keys of the prefix at its revision instead:
//! in the same history none of them is a key the view keeps.

use crate::ids::{Key, Revision};
use crate::io::{Consistency, Get, Listing, RangeRequest};
use crate::kv::KeyValue;
use crate::outcome::{AttemptFailure, Failure, Outcome};

/// Keys an empty view's read-back asks for: enough to pass the few keys
/// a view does not keep (its own host, garbage); if all of them are such,
/// the answer is taken as the same history.
const EMPTY_LIMIT: u32 = 16;

/// One read-back, at the revision the view reflects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verify {
    /// The kept key the view saw change last, as the view holds it.
    Key {
        expect: KeyValue,
        revision: Revision,
    },
    /// The view is empty: the prefix's first keys.
    Empty { prefix: Key, revision: Revision },
}

/// What a read-back found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Found {
    /// The same history: resume the watch.
    Same,
    /// Another history at the view's revision.
    Diverged,
    /// The view's revision is compacted: no telling; a re-list follows.
    Compacted,
    /// etcd is behind the view's revision: a restore, or a lagging member.
    Behind,
    /// The read failed: try again later.
    Failed(AttemptFailure),
}

impl Verify {
    /// A read-back of `view` (the keys kept under `prefix`) at `revision`:
    /// of the key with the newest change, or of the prefix if the view is
    /// empty.
    pub(super) fn of<'a>(
        view: impl Iterator<Item = &'a KeyValue>,
        prefix: &Key,
        revision: Revision,
    ) -> Verify {
        match view.max_by_key(|&kv| (kv.mod_revision, &kv.key)) {
            Some(kv) => Verify::Key {
                expect: kv.clone(),
                revision,
            },
            None => Verify::Empty {
                prefix: prefix.clone(),
                revision,
            },
        }
    }

    /// The request, read linearizably at the view's revision.
    pub(super) fn request(&self) -> RangeRequest {
        let (get, revision) = match self {
            Verify::Key { expect, revision } => (Get::key(expect.key.clone()), *revision),
            Verify::Empty { prefix, revision } => (
                Get {
                    limit: EMPTY_LIMIT,
                    ..Get::prefix(prefix.clone())
                },
                *revision,
            ),
        };
        RangeRequest {
            get,
            consistency: Consistency::Linearizable,
            after: None,
            revision,
        }
    }

    /// Judges the answer; `kept` says which keys the view keeps.
    pub(super) fn judge(&self, outcome: Outcome<Listing>, kept: impl Fn(&Key) -> bool) -> Found {
        match outcome {
            Outcome::Ok(listing) => {
                let same = match self {
                    // The view keeps the kv it last reported through
                    // identical re-puts (same value, lease and
                    // incarnation), so etcd's may have a newer mod
                    // revision, never one past the view's revision.
                    Verify::Key { expect, revision } => match listing.kvs.as_slice() {
                        [kv] => {
                            kv.key == expect.key
                                && kv.create_revision == expect.create_revision
                                && kv.lease == expect.lease
                                && kv.value == expect.value
                                && kv.mod_revision >= expect.mod_revision
                                && kv.mod_revision <= *revision
                        }
                        _ => false,
                    },
                    Verify::Empty { .. } => !listing.kvs.iter().any(|kv| kept(&kv.key)),
                };
                if same {
                    Found::Same
                } else {
                    Found::Diverged
                }
            }
            Outcome::Err(Failure::Compacted(_)) => Found::Compacted,
            Outcome::Err(Failure::FutureRevision) => Found::Behind,
            failed => Found::Failed(AttemptFailure::of(&failed).unwrap_or(AttemptFailure::Timeout)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{Key, LeaseId};

    fn kv(key: &str, value: &str, create: i64, m: i64) -> KeyValue {
        KeyValue {
            key: Key(key.as_bytes().to_vec()),
            value: value.as_bytes().to_vec(),
            lease: LeaseId(7),
            create_revision: Revision(create),
            mod_revision: Revision(m),
        }
    }

    impl Verify {
        fn judge_all(&self, outcome: Outcome<Listing>) -> Found {
            self.judge(outcome, |_| true)
        }
    }

    fn listed(kvs: Vec<KeyValue>) -> Outcome<Listing> {
        Outcome::Ok(Listing {
            kvs,
            revision: Revision(20),
            ..Listing::default()
        })
    }

    #[test]
    fn reads_back_the_newest_change_at_the_view_revision() {
        let view = [kv("a", "A", 3, 9), kv("b", "B", 4, 12), kv("c", "C", 5, 6)];
        let v = Verify::of(view.iter(), &Key(b"/p/".to_vec()), Revision(15));
        assert_eq!(
            v.request(),
            RangeRequest {
                get: Get::key(Key(b"b".to_vec())),
                consistency: Consistency::Linearizable,
                after: None,
                revision: Revision(15),
            }
        );
        assert_eq!(
            Verify::of([].iter(), &Key(b"/p/".to_vec()), Revision(15)).request(),
            RangeRequest {
                get: Get {
                    limit: EMPTY_LIMIT,
                    ..Get::prefix(Key(b"/p/".to_vec()))
                },
                consistency: Consistency::Linearizable,
                after: None,
                revision: Revision(15),
            }
        );
    }

    #[test]
    fn only_the_very_same_key_value_is_the_same_history() {
        let b = kv("b", "B", 4, 12);
        let v = Verify::of([b.clone()].iter(), &Key(b"/p/".to_vec()), Revision(15));
        assert_eq!(v.judge_all(listed(vec![b.clone()])), Found::Same);
        // An identical re-put the view did not report.
        assert_eq!(v.judge_all(listed(vec![kv("b", "B", 4, 14)])), Found::Same);
        for other in [
            kv("b", "B2", 4, 12),
            kv("b", "B", 3, 12),
            kv("b", "B", 4, 11),
            kv("b", "B", 4, 16),
            KeyValue {
                lease: LeaseId(8),
                ..b.clone()
            },
        ] {
            assert_eq!(v.judge_all(listed(vec![other])), Found::Diverged);
        }
        assert_eq!(v.judge_all(listed(vec![])), Found::Diverged);
        assert_eq!(
            v.judge_all(Outcome::Err(Failure::Compacted(30))),
            Found::Compacted
        );
        assert_eq!(
            v.judge_all(Outcome::Err(Failure::FutureRevision)),
            Found::Behind
        );
        assert_eq!(
            v.judge_all(Outcome::Unknown),
            Found::Failed(AttemptFailure::Timeout)
        );
    }

    #[test]
    fn an_empty_view_finds_another_history_by_any_kept_key_at_its_revision() {
        let v = Verify::of([].iter(), &Key(b"/p/".to_vec()), Revision(15));
        let kept = |k: &Key| k.0 != b"/p/me";
        assert_eq!(v.judge(listed(vec![]), kept), Found::Same);
        // Only a key the view does not keep (its own host): the same.
        assert_eq!(
            v.judge(listed(vec![kv("/p/me", "M", 3, 3)]), kept),
            Found::Same
        );
        assert_eq!(
            v.judge(
                listed(vec![kv("/p/me", "M", 3, 3), kv("/p/x", "X", 2, 2)]),
                kept
            ),
            Found::Diverged
        );
    }
}
