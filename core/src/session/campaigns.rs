//! A session's campaigns, with what the run loop asks of them after every
//! input (the soonest deadline, whether any waits on etcd, their silences,
//! whether any waits for a lease) kept up to date as they change, so that
//! an input to one campaign of a pool of thousands costs the pool no pass
//! over the others.
//!
//! Every campaign that may have changed is marked touched: one reached
//! through [`Campaigns::get_mut`], every one reached through
//! [`Campaigns::all_mut`], one just inserted. The session drains the
//! touched ones ([`Campaigns::take_touched`]) and [`Campaigns::refresh`]es
//! each, which updates the indexes from what it reports now. A campaign
//! changes only through `&mut` access, so nothing changes untouched.

use std::collections::{BTreeMap, BTreeSet};

use crate::election::{Campaign, ElectionId};
use crate::time::Instant;

/// What a campaign reported when last refreshed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Seen {
    deadline: Option<Instant>,
    awaits_etcd: bool,
    silences: u64,
    pending: bool,
}

impl Seen {
    fn of(c: &Campaign) -> Self {
        Seen {
            deadline: c.poll_timeout(),
            awaits_etcd: c.awaits_etcd(),
            silences: c.silences(),
            pending: c.is_pending(),
        }
    }
}

/// The campaigns by id, and their indexes. See the module docs.
#[derive(Debug, Default)]
pub(super) struct Campaigns {
    by_id: BTreeMap<ElectionId, (Campaign, Seen)>,
    /// Each campaign's deadline, soonest first.
    deadlines: BTreeSet<(Instant, ElectionId)>,
    /// Campaigns waiting on etcd.
    awaiting: BTreeSet<ElectionId>,
    /// Campaigns waiting for a lease to join with.
    pending: BTreeSet<ElectionId>,
    /// The sum of every campaign's silences (wrapping).
    silences: u64,
    /// Campaigns that may have changed since their last refresh.
    touched: BTreeSet<ElectionId>,
}

impl Campaigns {
    /// How many campaigns there are.
    pub(super) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// True when there are none.
    pub(super) fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Campaign `id`, read only.
    pub(super) fn get(&self, id: ElectionId) -> Option<&Campaign> {
        self.by_id.get(&id).map(|(c, _)| c)
    }

    /// Every campaign in id order, read only.
    pub(super) fn iter(&self) -> impl Iterator<Item = (ElectionId, &Campaign)> {
        self.by_id.iter().map(|(id, (c, _))| (*id, c))
    }

    /// Campaign `id`, to change (marked touched).
    pub(super) fn get_mut(&mut self, id: ElectionId) -> Option<&mut Campaign> {
        let (c, _) = self.by_id.get_mut(&id)?;
        self.touched.insert(id);
        Some(c)
    }

    /// Every campaign, to change (all marked touched).
    pub(super) fn all_mut(&mut self) -> impl Iterator<Item = &mut Campaign> {
        self.touched.extend(self.by_id.keys().copied());
        self.by_id.values_mut().map(|(c, _)| c)
    }

    /// Adds campaign `id` (touched).
    pub(super) fn insert(&mut self, id: ElectionId, c: Campaign) {
        if let Some((_, seen)) = self.by_id.insert(id, (c, Seen::default())) {
            // Never happens: the session refuses a used id. Unindexed all
            // the same, so the indexes stay true.
            self.unindex(id, seen);
        }
        self.touched.insert(id);
    }

    /// Campaigns whose deadline is `now` or before, soonest first.
    pub(super) fn due(&self, now: Instant) -> Vec<ElectionId> {
        self.deadlines
            .iter()
            .take_while(|(at, _)| *at <= now)
            .map(|(_, id)| *id)
            .collect()
    }

    /// The touched campaigns, in id order; none is touched after.
    pub(super) fn take_touched(&mut self) -> BTreeSet<ElectionId> {
        std::mem::take(&mut self.touched)
    }

    /// True while some campaign is touched and not yet refreshed.
    pub(super) fn any_touched(&self) -> bool {
        !self.touched.is_empty()
    }

    /// Updates the indexes from what campaign `id` reports now; it is no
    /// longer touched.
    pub(super) fn refresh(&mut self, id: ElectionId) {
        self.touched.remove(&id);
        let Some((c, seen)) = self.by_id.get_mut(&id) else {
            return;
        };
        let now = Seen::of(c);
        let before = std::mem::replace(seen, now);
        if before != now {
            self.unindex(id, before);
            self.index(id, now);
        }
    }

    /// Removes campaign `id`.
    pub(super) fn remove(&mut self, id: ElectionId) {
        if let Some((_, seen)) = self.by_id.remove(&id) {
            self.unindex(id, seen);
        }
        self.touched.remove(&id);
    }

    fn index(&mut self, id: ElectionId, seen: Seen) {
        if let Some(at) = seen.deadline {
            self.deadlines.insert((at, id));
        }
        if seen.awaits_etcd {
            self.awaiting.insert(id);
        }
        if seen.pending {
            self.pending.insert(id);
        }
        self.silences = self.silences.wrapping_add(seen.silences);
    }

    fn unindex(&mut self, id: ElectionId, seen: Seen) {
        if let Some(at) = seen.deadline {
            self.deadlines.remove(&(at, id));
        }
        self.awaiting.remove(&id);
        self.pending.remove(&id);
        self.silences = self.silences.wrapping_sub(seen.silences);
    }

    /// The soonest deadline of any campaign, as of the last refreshes.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// True if some campaign waits on etcd, as of the last refreshes.
    pub(super) fn awaits_etcd(&self) -> bool {
        !self.awaiting.is_empty()
    }

    /// True if some campaign waits for a lease, as of the last refreshes.
    pub(super) fn any_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The campaigns' silences summed (wrapping), as of the last
    /// refreshes.
    pub(super) fn silences(&self) -> u64 {
        self.silences
    }

    /// True if the indexes say what a pass over every campaign would: a
    /// check for tests and fuzzing, once every touched campaign was
    /// refreshed.
    pub(super) fn consistent(&self) -> bool {
        let mut fresh = Campaigns::default();
        for (id, (c, _)) in &self.by_id {
            fresh.index(*id, Seen::of(c));
        }
        self.touched.is_empty()
            && self.by_id.iter().all(|(_, (c, seen))| Seen::of(c) == *seen)
            && fresh.deadlines == self.deadlines
            && fresh.awaiting == self.awaiting
            && fresh.pending == self.pending
            && fresh.silences == self.silences
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_consistency_check_finds_each_index_gone_stale() {
        assert!(Campaigns::default().consistent());
        let stale: [fn(&mut Campaigns); 5] = [
            |c| {
                c.touched.insert(ElectionId(1));
            },
            |c| {
                c.deadlines.insert((Instant::from_millis(5), ElectionId(1)));
            },
            |c| {
                c.awaiting.insert(ElectionId(1));
            },
            |c| {
                c.pending.insert(ElectionId(1));
            },
            |c| c.silences = 1,
        ];
        for (n, make_stale) in stale.iter().enumerate() {
            let mut c = Campaigns::default();
            make_stale(&mut c);
            assert!(!c.consistent(), "stale index {n} not found");
        }
    }
}
