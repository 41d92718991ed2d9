//! A tiny seeded PRNG (SplitMix64). Every random choice in the core comes
//! from one of these, seeded from the machine's config, so a run is a pure
//! function of its inputs.

/// SplitMix64: fast, statistically fine for jitter, and fully determined by
/// its seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform value in `0..=max`.
    pub fn below_inclusive(&mut self, max: u64) -> u64 {
        match max.checked_add(1) {
            None => self.next_u64(),
            // Modulo bias is at most max/2^64: irrelevant for jitter.
            Some(n) => self.next_u64() % n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_bounds_hold() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        let xs: Vec<u64> = (0..16).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..16).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let mut c = Rng::new(8);
        assert_ne!(xs[0], c.next_u64());
        for _ in 0..1000 {
            assert!(a.below_inclusive(10) <= 10);
        }
        assert_eq!(a.below_inclusive(0), 0);
    }
}
