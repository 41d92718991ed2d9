//! Maps the runtime's monotonic clock onto the core's `Instant`.

use std::time::Duration;

use coord_core::Instant;

/// A clock whose epoch is the moment it was made. Under the simulator,
/// `tokio::time` is madsim's virtual time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    epoch: tokio::time::Instant,
}

impl Clock {
    pub(crate) fn start() -> Self {
        Clock {
            epoch: tokio::time::Instant::now(),
        }
    }

    /// Wall-clock milliseconds since the Unix epoch at this clock's epoch
    /// (0 for a system clock set before 1970).
    pub(crate) fn wall_at_epoch(&self) -> u64 {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_sub(self.epoch.elapsed());
        u64::try_from(wall.as_millis()).unwrap_or(u64::MAX)
    }

    /// Now, in the core's terms.
    pub(crate) fn now(&self) -> Instant {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        Instant::from_millis(ms)
    }

    /// A runtime instant in the core's terms (the epoch if before it).
    pub(crate) fn of_runtime(&self, at: tokio::time::Instant) -> Instant {
        let ms = at.saturating_duration_since(self.epoch).as_millis();
        Instant::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    /// A core deadline as a runtime instant.
    pub(crate) fn to_runtime(self, at: Instant) -> tokio::time::Instant {
        self.epoch + Duration::from_millis(at.as_millis())
    }
}
