//! A mirror's view: a listing or a put applied to it, reporting the
//! difference, and which keys it keeps.

use std::collections::BTreeMap;

use super::pages::ListReason;

use crate::host_id::validate_host_id;
use crate::ids::{Key, Revision};
use crate::io::{Consistency, Listing};
use crate::kv::KeyValue;
use crate::outbox::OpIds;
use crate::time::Instant;

use super::*;

impl Mirror {
    /// Makes the view equal `listing`, reporting the difference, then
    /// watches from its revision + 1. A listing behind the view (or from
    /// another cluster) is a restore if it was read linearizably, and is
    /// read again linearizably if not; so is a serializable listing behind
    /// the compaction it was read for. A check's listing that finds no
    /// restore is not applied: the watch resumes from the view's revision.
    pub(super) fn apply_listing(
        &mut self,
        now: Instant,
        listing: Listing,
        reason: ListReason,
        consistency: Consistency,
        ids: &mut OpIds,
    ) {
        let other_cluster = self.cluster.is_known()
            && listing.cluster.is_known()
            && listing.cluster != self.cluster;
        let behind = listing.revision < self.revision;
        // What etcd has already shown: the view's revision, and the
        // compaction that made this listing necessary (a watch from a
        // listing below it would be compacted again at once).
        let floor = match reason {
            ListReason::Resync(compacted) => self.revision.max(compacted),
            ListReason::Initial | ListReason::Diverged(_) | ListReason::Check => self.revision,
        };
        if listing.revision < floor && !other_cluster && consistency == Consistency::Serializable {
            // A lagging member answered: it proves nothing. Read again,
            // linearizably, for the same reason.
            self.list_with(now, reason, Consistency::Linearizable, ids);
            return;
        }
        let restore = if other_cluster {
            Some(ResyncReason::ClusterChanged {
                from: self.cluster,
                to: listing.cluster,
            })
        } else if behind {
            Some(ResyncReason::RevisionWentBack {
                seen: self.revision,
                now: listing.revision,
            })
        } else {
            None
        };
        if restore.is_none() && reason == ListReason::Check {
            // etcd was not restored: a lagging member answered. The watch
            // resumes where the view stands (after a read-back, as after
            // any break), so every change since reaches the consumer in
            // order, none folded into a difference. The check keeps
            // backing off: a member answering watches from behind must not
            // make the mirror re-list in a loop.
            self.resume(now, ids);
            return;
        }
        self.succeeded();
        if listing.cluster.is_known() {
            self.cluster = listing.cluster;
        }
        let mut fresh: BTreeMap<Key, KeyValue> = BTreeMap::new();
        for kv in listing.kvs {
            if self.keeps(&kv.key) {
                fresh.insert(kv.key.clone(), kv);
            }
        }
        // A range never goes back in time for the consumer, but across a
        // restore, where revisions start over.
        let revision = if restore.is_some() {
            listing.revision
        } else {
            listing.revision.max(self.revision)
        };
        // A history that started over is announced before its difference,
        // so that a consumer storing revisions learns first that they may
        // go down.
        let reset = match (&restore, reason) {
            (Some(reason), _) => Some(reason.clone()),
            (None, ListReason::Diverged(seen)) => Some(ResyncReason::HistoryDiverged { seen }),
            (None, ListReason::Initial | ListReason::Resync(_) | ListReason::Check) => None,
        };
        if let Some(reason) = reset {
            self.change(Change::Reset { reason, revision });
        }
        let gone: Vec<Key> = self
            .view
            .keys()
            .filter(|k| !fresh.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            if let Some(last_seen) = self.view.remove(&key) {
                self.change(Change::Deleted {
                    key,
                    last_seen,
                    revision,
                });
            }
        }
        for kv in fresh.into_values() {
            self.apply_put(kv, revision);
        }
        self.revision = revision;
        let announce = match (restore, reason) {
            (Some(reason), _) => Some(Change::Resynced { reason, revision }),
            (None, ListReason::Initial) => Some(Change::Synced { revision }),
            (None, ListReason::Resync(compact_revision)) => Some(Change::Resynced {
                reason: ResyncReason::Compacted { compact_revision },
                revision,
            }),
            (None, ListReason::Diverged(seen)) => Some(Change::Resynced {
                reason: ResyncReason::HistoryDiverged { seen },
                revision,
            }),
            // Never here: a check that finds no restore resumes the watch.
            (None, ListReason::Check) => None,
        };
        if let Some(change) = announce {
            self.change(change);
        }
        self.watch(now, ids);
    }

    /// Records `kv`, reporting it unless it is an identical re-put (same
    /// value, lease and incarnation): then the view keeps the kv last
    /// reported, so the view is always exactly the replay of the changes.
    /// A key deleted and created again (a new create revision) is a change
    /// even with the same value and lease: an election queue orders by
    /// create revision.
    pub(super) fn apply_put(&mut self, kv: KeyValue, revision: Revision) {
        // One search of the view; a known key's entry is replaced in
        // place, its old kv moved out as the previous (no copy of it, nor
        // of the key).
        let previous = match self.view.get_mut(&kv.key) {
            Some(old)
                if old.value == kv.value
                    && old.lease == kv.lease
                    && old.create_revision == kv.create_revision =>
            {
                return;
            }
            Some(old) => Some(std::mem::replace(old, kv.clone())),
            None => {
                self.view.insert(kv.key.clone(), kv.clone());
                None
            }
        };
        self.change(Change::Put {
            kv,
            previous,
            revision,
        });
    }

    /// True if the filter keeps `key` (reporting it as ignored if not, and
    /// not excluded on purpose).
    pub(super) fn keeps(&mut self, key: &Key) -> bool {
        match self.wanted(key) {
            Wanted::Kept => true,
            Wanted::Left => false,
            Wanted::Invalid => {
                self.change(Change::Ignored { key: key.clone() });
                false
            }
        }
    }

    /// Whether the filter keeps `key`.
    pub(super) fn wanted(&self, key: &Key) -> Wanted {
        let Some(tail) = key.0.strip_prefix(self.config.prefix.0.as_slice()) else {
            return Wanted::Left;
        };
        let KeyFilter::HostIds { exclude } = &self.config.filter else {
            return Wanted::Kept;
        };
        match std::str::from_utf8(tail) {
            Ok(h) if validate_host_id(h).is_ok() => {
                if exclude.as_deref() == Some(h) {
                    Wanted::Left
                } else {
                    Wanted::Kept
                }
            }
            _ => Wanted::Invalid,
        }
    }
}
