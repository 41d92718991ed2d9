//! Core's own notion of time: milliseconds on a clock the caller owns.

use std::time::Duration;

/// A point in time, in milliseconds since an epoch the caller chooses.
///
/// The core never reads a clock; every call takes `now: Instant`. The driver
/// maps its monotonic clock onto this type (milliseconds since the handle
/// started), the simulator its virtual clock, and tests plain numbers.
/// Arithmetic saturates instead of overflowing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Instant(u64);

impl Instant {
    /// The epoch of the caller's clock.
    pub const ZERO: Instant = Instant(0);

    /// An instant `ms` milliseconds after the epoch.
    pub const fn from_millis(ms: u64) -> Self {
        Instant(ms)
    }

    /// Milliseconds since the epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating at the end of time.
    pub fn saturating_add(self, d: Duration) -> Instant {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_add(ms))
    }

    /// `self - d`, saturating at the epoch.
    pub fn saturating_sub(self, d: Duration) -> Instant {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_sub(ms))
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

impl std::ops::Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

impl std::fmt::Display for Instant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:03}s", self.0 / 1000, self.0 % 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_and_instants_display_in_seconds() {
        let t = Instant::from_millis(1_500);
        assert_eq!(t + Duration::from_millis(250), Instant::from_millis(1_750));
        assert_eq!(
            Instant::from_millis(u64::MAX - 1) + Duration::from_secs(1),
            Instant::from_millis(u64::MAX)
        );
        assert_eq!(
            t.saturating_sub(Duration::from_millis(500)),
            Instant::from_millis(1_000)
        );
        assert_eq!(t.saturating_sub(Duration::from_secs(2)), Instant::ZERO);
        assert_eq!(
            t.saturating_since(Instant::from_millis(1_200)),
            Duration::from_millis(300)
        );
        assert_eq!(
            Instant::from_millis(1_200).saturating_since(t),
            Duration::ZERO
        );
        assert_eq!(t.to_string(), "1.500s");
        assert_eq!(Instant::from_millis(62_007).to_string(), "62.007s");
    }
}
