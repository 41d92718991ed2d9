//! Before a mirror resumes its watch after a break, it reads back, at the
//! revision its view reflects, the kept key it saw change last. In the
//! same history etcd returns exactly that key-value. Anything else means
//! etcd's history is no longer the one the view was built from: it was
//! restored or wiped and has since moved past the view's revision (so the
//! revision alone cannot tell), and the mirror must re-list.

use crate::ids::Revision;
use crate::io::{Consistency, Get, Listing, RangeRequest};
use crate::kv::KeyValue;
use crate::outcome::{AttemptFailure, Failure, Outcome};

/// One read-back: the key, what the view holds for it, and the revision
/// the view reflects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Verify {
    expect: KeyValue,
    revision: Revision,
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
    /// A read-back of `view` at `revision`: of the key with the newest
    /// change. `None` for an empty view (nothing to compare with).
    pub(super) fn of<'a>(
        view: impl Iterator<Item = &'a KeyValue>,
        revision: Revision,
    ) -> Option<Verify> {
        let expect = view
            .max_by_key(|kv| (kv.mod_revision, kv.key.clone()))?
            .clone();
        Some(Verify { expect, revision })
    }

    /// The request: that key, read linearizably at the view's revision.
    pub(super) fn request(&self) -> RangeRequest {
        RangeRequest {
            get: Get::key(self.expect.key.clone()),
            consistency: Consistency::Linearizable,
            after: None,
            revision: self.revision,
        }
    }

    /// Judges the answer.
    pub(super) fn judge(&self, outcome: Outcome<Listing>) -> Found {
        match outcome {
            Outcome::Ok(listing) => {
                // The view keeps the kv it last reported through identical
                // re-puts (same value, lease and incarnation), so etcd's
                // may have a newer mod revision, never one past the view's
                // revision.
                let same = match listing.kvs.as_slice() {
                    [kv] => {
                        kv.key == self.expect.key
                            && kv.create_revision == self.expect.create_revision
                            && kv.lease == self.expect.lease
                            && kv.value == self.expect.value
                            && kv.mod_revision >= self.expect.mod_revision
                            && kv.mod_revision <= self.revision
                    }
                    _ => false,
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
        let v = Verify::of(view.iter(), Revision(15)).unwrap();
        assert_eq!(
            v.request(),
            RangeRequest {
                get: Get::key(Key(b"b".to_vec())),
                consistency: Consistency::Linearizable,
                after: None,
                revision: Revision(15),
            }
        );
        assert!(Verify::of([].iter(), Revision(15)).is_none());
    }

    #[test]
    fn only_the_very_same_key_value_is_the_same_history() {
        let b = kv("b", "B", 4, 12);
        let v = Verify::of([b.clone()].iter(), Revision(15)).unwrap();
        assert_eq!(v.judge(listed(vec![b.clone()])), Found::Same);
        // An identical re-put the view did not report.
        assert_eq!(v.judge(listed(vec![kv("b", "B", 4, 14)])), Found::Same);
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
            assert_eq!(v.judge(listed(vec![other])), Found::Diverged);
        }
        assert_eq!(v.judge(listed(vec![])), Found::Diverged);
        assert_eq!(
            v.judge(Outcome::Err(Failure::Compacted(30))),
            Found::Compacted
        );
        assert_eq!(
            v.judge(Outcome::Err(Failure::FutureRevision)),
            Found::Behind
        );
        assert_eq!(
            v.judge(Outcome::Unknown),
            Found::Failed(AttemptFailure::Timeout)
        );
    }
}
