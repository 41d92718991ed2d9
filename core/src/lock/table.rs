//! An in-process lock table: names with a number of slots (1: a mutex;
//! N: a semaphore), each hold with a fencing token strictly greater than
//! every earlier one under its name. The memory backend is this table
//! behind a mutex; the other backends' tests compare against it.

use std::collections::BTreeMap;

use crate::ids::FencingToken;

/// Most slots a name may have.
pub const MAX_SLOTS: u32 = 1024;

/// How many holders a name admits at once: 1 (a mutex) up to
/// [`MAX_SLOTS`] (a semaphore).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slots(u32);

/// Why a slot count was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a lock has 1 to {MAX_SLOTS} slots, not {0}")]
pub struct SlotsError(pub u32);

impl Slots {
    /// A mutex.
    pub const ONE: Slots = Slots(1);

    /// `n` slots, 1 to [`MAX_SLOTS`].
    pub fn new(n: u32) -> Result<Slots, SlotsError> {
        if (1..=MAX_SLOTS).contains(&n) {
            Ok(Slots(n))
        } else {
            Err(SlotsError(n))
        }
    }

    /// The count.
    pub fn get(self) -> u32 {
        self.0
    }
}

impl Default for Slots {
    fn default() -> Self {
        Slots::ONE
    }
}

/// One hold: which slot, and its fencing token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Grant {
    /// The slot held, `0..slots`.
    pub slot: u32,
    /// The hold's fencing token.
    pub token: FencingToken,
}

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Released {
    /// The hold was there and is released.
    Released,
    /// The hold was already gone (released before, taken over, expired).
    AlreadyGone,
}

#[derive(Debug, Default)]
struct Name {
    last_token: i64,
    held: BTreeMap<u32, FencingToken>,
}

/// Every name's holds. A name's entry stays after its last release, so
/// that its tokens keep increasing.
#[derive(Debug, Default)]
pub struct LockTable {
    names: BTreeMap<String, Name>,
}

impl LockTable {
    /// An empty table.
    pub fn new() -> Self {
        LockTable::default()
    }

    /// The lowest free slot of `name`, with the next token; `None` if all
    /// `slots` are held. A name asked for with fewer slots than it has
    /// holders admits nobody until enough leave.
    pub fn try_acquire(&mut self, name: &str, slots: Slots) -> Option<Grant> {
        let entry = self.names.entry(name.to_string()).or_default();
        let slot = (0..slots.get()).find(|s| !entry.held.contains_key(s))?;
        let token = FencingToken(entry.last_token.checked_add(1)?);
        entry.last_token = token.0;
        entry.held.insert(slot, token);
        Some(Grant { slot, token })
    }

    /// Releases `grant` if it still holds its slot of `name`.
    pub fn release(&mut self, name: &str, grant: Grant) -> Released {
        match self.names.get_mut(name) {
            Some(entry) if entry.held.get(&grant.slot) == Some(&grant.token) => {
                entry.held.remove(&grant.slot);
                Released::Released
            }
            _ => Released::AlreadyGone,
        }
    }

    /// True while `grant` holds its slot of `name`.
    pub fn holds(&self, name: &str, grant: Grant) -> bool {
        self.names
            .get(name)
            .is_some_and(|e| e.held.get(&grant.slot) == Some(&grant.token))
    }

    /// Ends whatever holds `slot` of `name` (a holder declared dead by an
    /// operator, or a test's fault); returns the hold ended.
    pub fn evict(&mut self, name: &str, slot: u32) -> Option<Grant> {
        let token = self.names.get_mut(name)?.held.remove(&slot)?;
        Some(Grant { slot, token })
    }

    /// How many slots of `name` are held.
    pub fn held(&self, name: &str) -> usize {
        self.names.get(name).map_or(0, |e| e.held.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mutex_admits_one_and_tokens_only_grow() {
        let mut t = LockTable::new();
        let a = t.try_acquire("n", Slots::ONE).unwrap();
        assert_eq!(
            a,
            Grant {
                slot: 0,
                token: FencingToken(1)
            }
        );
        assert_eq!(t.try_acquire("n", Slots::ONE), None);
        // Another name is another lock, with tokens of its own.
        assert_eq!(
            t.try_acquire("m", Slots::ONE).unwrap().token,
            FencingToken(1)
        );
        assert_eq!(t.release("n", a), Released::Released);
        assert_eq!(t.release("n", a), Released::AlreadyGone);
        let b = t.try_acquire("n", Slots::ONE).unwrap();
        assert_eq!(b.token, FencingToken(2));
        // A release of an old hold does not free the new one.
        assert_eq!(t.release("n", a), Released::AlreadyGone);
        assert!(t.holds("n", b) && !t.holds("n", a));
        assert_eq!(t.evict("n", 0), Some(b));
        assert_eq!(t.release("n", b), Released::AlreadyGone);
        assert_eq!(
            t.try_acquire("n", Slots::ONE).unwrap().token,
            FencingToken(3)
        );
    }

    #[test]
    fn a_semaphore_admits_its_slots_lowest_first() {
        let mut t = LockTable::new();
        let three = Slots::new(3).unwrap();
        let g: Vec<Grant> = (0..3).map(|_| t.try_acquire("s", three).unwrap()).collect();
        assert_eq!(g.iter().map(|g| g.slot).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(t.try_acquire("s", three), None);
        assert_eq!(t.held("s"), 3);
        assert_eq!(t.release("s", g[1]), Released::Released);
        let again = t.try_acquire("s", three).unwrap();
        assert_eq!((again.slot, again.token), (1, FencingToken(4)));
        // Asked as a mutex, a name with holders admits nobody.
        assert_eq!(t.try_acquire("s", Slots::ONE), None);
    }

    #[test]
    fn slot_counts_are_checked() {
        assert_eq!(Slots::new(0), Err(SlotsError(0)));
        assert_eq!(Slots::new(MAX_SLOTS + 1), Err(SlotsError(MAX_SLOTS + 1)));
        assert_eq!(Slots::new(1), Ok(Slots::ONE));
        assert_eq!(Slots::new(MAX_SLOTS).map(Slots::get), Ok(MAX_SLOTS));
    }
}
