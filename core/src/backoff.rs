//! Retry pacing with failure classes and "equal jitter".
//!
//! A failure is either **fast** (etcd answered at once that it cannot serve:
//! connection refused, `Unavailable`, no leader) or **slow** (a request timed
//! out, the server is overloaded, or anything else). Both share one attempt
//! counter and the same exponential ceiling
//! `min(initial * multiplier^attempt, cap)`, but a fast failure caps the
//! ceiling at `fast_cap` (default 1 s) instead of `cap` (default 30 s).
//!
//! The delay is drawn with *equal jitter*: uniform in `[ceiling/2, ceiling]`.
//! Half the ceiling is a floor, so a fleet never spins; the other half
//! spreads a fleet that failed together over a window as wide as the delay.
//!
//! The bound this gives: once etcd is reachable again, a client whose last
//! failure was fast retries within `fast_cap`, whatever the outage length;
//! one whose last failure was slow retries within `cap`.

use std::time::Duration;

use crate::rng::Rng;

/// How a failure should be paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum FailureClass {
    /// etcd refused at once; retrying soon is cheap and heals quickly.
    Fast,
    /// A timeout or overload; back off exponentially to the cap.
    Slow,
}

/// How delays are drawn from the ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub enum Pacing {
    /// coord's pacing: a fast failure's ceiling stops at `fast_cap`, each
    /// delay is drawn with equal jitter, and etcd found back (a probe
    /// answered after a silence) cuts a wait short and restarts the count.
    #[default]
    Adaptive,
    /// The go-coord-style baseline, kept for comparisons (benchmarks, the
    /// simulator's side-by-side runs), not for production: every delay is
    /// exactly the slow ceiling (pure doubling from `initial` to `cap`, no
    /// jitter, no fast class, `fast_cap` unused), and etcd found back
    /// changes nothing: a wait is always served in full.
    Plain,
}

/// Backoff parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub struct BackoffConfig {
    /// Ceiling of the first delay. Default 100 ms.
    pub initial: Duration,
    /// Growth factor of the ceiling per attempt. Default 2.
    pub multiplier: u32,
    /// Largest ceiling for slow failures. Default 30 s.
    pub cap: Duration,
    /// Largest ceiling for fast failures. Default 1 s. Clamped to `cap`.
    pub fast_cap: Duration,
    /// How delays are drawn. Default [`Pacing::Adaptive`].
    pub pacing: Pacing,
}

/// Builder-style setters: the struct is `#[non_exhaustive]`, so that a
/// new option is not a breaking change; start from `BackoffConfig::default()`
/// (or its constructor) and set what differs.
impl BackoffConfig {
    /// These options with [`initial`](Self::initial) set.
    pub fn with_initial(mut self, initial: Duration) -> Self {
        self.initial = initial;
        self
    }
    /// These options with [`multiplier`](Self::multiplier) set.
    pub fn with_multiplier(mut self, multiplier: u32) -> Self {
        self.multiplier = multiplier;
        self
    }
    /// These options with [`cap`](Self::cap) set.
    pub fn with_cap(mut self, cap: Duration) -> Self {
        self.cap = cap;
        self
    }
    /// These options with [`fast_cap`](Self::fast_cap) set.
    pub fn with_fast_cap(mut self, fast_cap: Duration) -> Self {
        self.fast_cap = fast_cap;
        self
    }
    /// These options with [`pacing`](Self::pacing) set.
    pub fn with_pacing(mut self, pacing: Pacing) -> Self {
        self.pacing = pacing;
        self
    }
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial: Duration::from_millis(100),
            multiplier: 2,
            cap: Duration::from_secs(30),
            fast_cap: Duration::from_secs(1),
            pacing: Pacing::Adaptive,
        }
    }
}

/// Why a [`BackoffConfig`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackoffConfigError {
    /// `initial` must be at least 1 ms.
    #[error("backoff initial delay must be at least 1 ms, got {0:?}")]
    InitialTooSmall(Duration),
    /// `multiplier` must be at least 1.
    #[error("backoff multiplier must be at least 1")]
    MultiplierZero,
    /// `cap` must be at least `initial` and at most one hour.
    #[error("backoff cap must be between the initial delay and 1 hour, got {0:?}")]
    CapOutOfRange(Duration),
    /// `fast_cap` must be at least 1 ms (0 would retry without pause) and
    /// at most one hour.
    #[error("backoff fast cap must be between 1 ms and 1 hour, got {0:?}")]
    FastCapOutOfRange(Duration),
}

impl BackoffConfig {
    /// The go-coord-style baseline: 100 ms doubling to 30 s, no jitter, no
    /// fast class, blind to etcd's return ([`Pacing::Plain`]).
    pub fn plain() -> Self {
        BackoffConfig {
            pacing: Pacing::Plain,
            ..BackoffConfig::default()
        }
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), BackoffConfigError> {
        if self.initial < Duration::from_millis(1) {
            return Err(BackoffConfigError::InitialTooSmall(self.initial));
        }
        if self.multiplier == 0 {
            return Err(BackoffConfigError::MultiplierZero);
        }
        if self.cap < self.initial || self.cap > Duration::from_secs(3600) {
            return Err(BackoffConfigError::CapOutOfRange(self.cap));
        }
        if self.fast_cap < Duration::from_millis(1) || self.fast_cap > Duration::from_secs(3600) {
            return Err(BackoffConfigError::FastCapOutOfRange(self.fast_cap));
        }
        Ok(())
    }
}

/// The retries of a failure that lasts this many attempts or more land on
/// the fleet's slot (see [`Slot`]); the first ones, which heal a fault of
/// this host alone, are not held back.
pub const SLOTTED_FROM_ATTEMPT: u32 = 3;

/// A host's place on its fleet's return schedule.
///
/// When etcd fails, every host of a fleet fails at once, and without a
/// schedule every host would retry within a second of etcd's return (a
/// herd). A host that knows its rank among `fleet` hosts retries only at
/// the instants whose wall-clock time is `rank × spacing` modulo a period
/// of `fleet × spacing` (at most `window`): the fleet returns at most one
/// host per `spacing`, over `fleet × spacing`, and a small fleet at once.
/// Wall-clock time is shared by the hosts (NTP keeps them within
/// milliseconds), so the slots of distinct ranks never meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The period, in milliseconds (at least 1).
    period: u64,
    /// This host's offset within it, in milliseconds.
    phase: u64,
    /// Wall-clock milliseconds at the epoch of the caller's clock.
    wall_at_epoch: u64,
}

impl Slot {
    /// The slot of the host ranked `rank` (from 0) among `fleet` hosts,
    /// `spacing` apart and within `window`; `wall_at_epoch` maps the
    /// caller's `Instant`s onto the wall clock.
    pub fn new(
        rank: u64,
        fleet: u64,
        spacing: Duration,
        window: Duration,
        wall_at_epoch: u64,
    ) -> Slot {
        let spacing = u64::try_from(spacing.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let window = u64::try_from(window.as_millis())
            .unwrap_or(u64::MAX)
            .max(spacing);
        let period = fleet.max(1).saturating_mul(spacing).min(window);
        Slot {
            period,
            phase: rank.wrapping_mul(spacing) % period,
            wall_at_epoch,
        }
    }

    /// The period: the longest a retry is held back.
    pub fn period(&self) -> Duration {
        Duration::from_millis(self.period)
    }

    /// The first instant at or after `at` that is this host's slot.
    pub fn next(&self, at: crate::Instant) -> crate::Instant {
        let wall = at.as_millis().wrapping_add(self.wall_at_epoch);
        let into = wall % self.period;
        let wait = (self.phase + self.period - into) % self.period;
        at + Duration::from_millis(wait)
    }
}

/// Attempt counter plus jitter source. Deterministic for a given seed.
#[derive(Debug, Clone)]
pub struct Backoff {
    config: BackoffConfig,
    attempt: u32,
    rng: Rng,
    /// The fleet slot, once known (hosts only).
    slot: Option<Slot>,
    /// What the client's prober last said of etcd.
    heard: Heard,
}

/// What the client's prober last said of etcd, as the pacing heeds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heard {
    /// Nothing since the last success or return: retries go as drawn.
    Nothing,
    /// The prober found etcd silent: a slotted retry waits for its return
    /// (see [`Backoff::hold`]).
    Silent,
}

impl Backoff {
    /// A fresh backoff (attempt 0) drawing jitter from `seed`.
    pub fn new(config: BackoffConfig, seed: u64) -> Self {
        Backoff {
            config,
            attempt: 0,
            rng: Rng::new(seed),
            slot: None,
            heard: Heard::Nothing,
        }
    }

    /// Sets (or forgets) the fleet slot. Under [`Pacing::Plain`] it is
    /// kept but never used.
    pub fn set_slot(&mut self, slot: Option<Slot>) {
        self.slot = slot;
    }

    /// The fleet slot in use: none under [`Pacing::Plain`].
    pub fn slot(&self) -> Option<Slot> {
        self.slot.filter(|_| self.heeds_returns())
    }

    /// Records one failure and returns when to retry: `now` plus
    /// [`next_delay`](Self::next_delay), moved on to the fleet slot once
    /// the failure has lasted [`SLOTTED_FROM_ATTEMPT`] attempts, and held
    /// while etcd is silent (see [`hold`](Self::hold)).
    pub fn retry_at(&mut self, now: crate::Instant, class: FailureClass) -> crate::Instant {
        let at = now + self.next_delay(class);
        match self.slot() {
            Some(slot) if self.attempt >= SLOTTED_FROM_ATTEMPT => self.hold(now, slot.next(at)),
            _ => at,
        }
    }

    /// The client's prober found etcd silent (a probe unanswered or
    /// refused). Until a success or etcd's return ([`reset`](Self::reset)),
    /// slotted retries are held (see [`hold`](Self::hold)). Nothing without
    /// a slot or under [`Pacing::Plain`].
    pub fn silenced(&mut self) {
        if self.slot().is_some() {
            self.heard = Heard::Silent;
        }
    }

    /// A wait until `next_at`, held while etcd is silent: if this host has
    /// a fleet slot, its failure has lasted [`SLOTTED_FROM_ATTEMPT`]
    /// attempts and the prober last found etcd silent, the retry waits for
    /// etcd's return (which [`cut`](Self::cut)s it to the next slot), so
    /// that no request of the fleet's is queued at an etcd that is starting
    /// and answered in one burst when it is ready. The prober probes
    /// meanwhile. So that a prober that never reports cannot stall the
    /// host, the wait ends anyway at the first slot a slow `cap` from
    /// `now`. Otherwise `next_at` unchanged.
    pub fn hold(&self, now: crate::Instant, next_at: crate::Instant) -> crate::Instant {
        match self.slot() {
            Some(slot) if self.attempt >= SLOTTED_FROM_ATTEMPT && self.heard == Heard::Silent => {
                next_at.max(slot.next(now + self.config.cap))
            }
            _ => next_at,
        }
    }

    /// Failures since the last [`reset`](Self::reset).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The ceiling the next delay will be drawn under, for a failure of `class`.
    pub fn ceiling(&self, class: FailureClass) -> Duration {
        let cap = match class {
            FailureClass::Slow => self.config.cap,
            FailureClass::Fast => self.config.fast_cap.min(self.config.cap),
        };
        let factor = u64::from(self.config.multiplier.max(1))
            .checked_pow(self.attempt)
            .unwrap_or(u64::MAX);
        let initial_ms = u64::try_from(self.config.initial.as_millis()).unwrap_or(u64::MAX);
        let ceiling = Duration::from_millis(initial_ms.saturating_mul(factor));
        ceiling.min(cap)
    }

    /// Records one failure and returns how long to wait before retrying:
    /// uniform in `[ceiling/2, ceiling]` (equal jitter); under
    /// [`Pacing::Plain`], the slow ceiling itself, whatever the class.
    pub fn next_delay(&mut self, class: FailureClass) -> Duration {
        if self.config.pacing == Pacing::Plain {
            let delay = self.ceiling(FailureClass::Slow);
            self.attempt = self.attempt.saturating_add(1);
            return delay;
        }
        let ceiling = u64::try_from(self.ceiling(class).as_millis()).unwrap_or(u64::MAX);
        let half = ceiling / 2;
        let delay = half + self.rng.below_inclusive(ceiling - half);
        self.attempt = self.attempt.saturating_add(1);
        Duration::from_millis(delay)
    }

    /// Whether etcd found back (a probe answered after a silence) may cut
    /// a wait short: false under [`Pacing::Plain`].
    pub fn heeds_returns(&self) -> bool {
        self.config.pacing == Pacing::Adaptive
    }

    /// Forgets past failures and a silence heard (after a success, or
    /// etcd found back).
    pub fn reset(&mut self) {
        self.attempt = 0;
        self.heard = Heard::Nothing;
    }

    /// A wait until `next_at`, cut short because etcd answers again (a
    /// probe succeeded after a silence): the next fleet slot if this host
    /// has one, else `now` plus a jittered delay of up to half the fast
    /// cap, so that a fleet does not retry at one instant; never later
    /// than `next_at`. The failures so far still count: if the retry
    /// fails too, the next delay keeps growing. Under [`Pacing::Plain`],
    /// `next_at` unchanged.
    pub fn cut(&mut self, now: crate::Instant, next_at: crate::Instant) -> crate::Instant {
        if !self.heeds_returns() {
            return next_at;
        }
        if let Some(slot) = self.slot {
            return slot.next(now).min(next_at);
        }
        let window = u64::try_from(self.config.fast_cap.min(self.config.cap).as_millis() / 2)
            .unwrap_or(u64::MAX);
        let cut = now + Duration::from_millis(self.rng.below_inclusive(window));
        cut.min(next_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(d: Duration) -> u64 {
        d.as_millis() as u64
    }

    #[test]
    fn each_setter_sets_its_own_option_only() {
        let set = BackoffConfig::default()
            .with_initial(Duration::from_millis(7))
            .with_multiplier(5)
            .with_cap(Duration::from_secs(9))
            .with_fast_cap(Duration::from_secs(3))
            .with_pacing(Pacing::Plain);
        assert_eq!(
            set,
            BackoffConfig {
                initial: Duration::from_millis(7),
                multiplier: 5,
                cap: Duration::from_secs(9),
                fast_cap: Duration::from_secs(3),
                pacing: Pacing::Plain,
            }
        );
        // Each setter alone leaves the others at their defaults.
        let d = BackoffConfig::default();
        assert_eq!(
            d.clone().with_initial(Duration::from_millis(7)),
            BackoffConfig {
                initial: Duration::from_millis(7),
                ..d.clone()
            }
        );
        assert_eq!(
            d.clone().with_pacing(Pacing::Plain),
            BackoffConfig {
                pacing: Pacing::Plain,
                ..d
            }
        );
    }

    #[test]
    fn plain_pacing_doubles_exactly_to_the_cap_whatever_the_class() {
        let mut b = Backoff::new(BackoffConfig::plain(), 42);
        assert!(!b.heeds_returns());
        let want = [
            100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000,
        ];
        for (i, w) in want.iter().enumerate() {
            // A fast failure is paced as a slow one: no 1 s fast cap.
            let class = if i % 2 == 0 {
                FailureClass::Fast
            } else {
                FailureClass::Slow
            };
            assert_eq!(ms(b.next_delay(class)), *w, "attempt {i}");
        }
        // etcd found back does not cut a wait short.
        let now = crate::Instant::from_millis(1_000);
        let next_at = crate::Instant::from_millis(31_000);
        assert_eq!(b.cut(now, next_at), next_at);
        b.reset();
        assert_eq!(ms(b.next_delay(FailureClass::Fast)), 100);
        assert!(Backoff::new(BackoffConfig::default(), 1).heeds_returns());
    }

    #[test]
    fn a_cut_wait_is_short_jittered_and_never_later() {
        let mut b = Backoff::new(BackoffConfig::default(), 42);
        for _ in 0..5 {
            b.next_delay(FailureClass::Slow);
        }
        let now = crate::Instant::from_millis(10_000);
        let cuts: Vec<u64> = (0..200)
            .map(|_| b.cut(now, now + Duration::from_secs(30)).as_millis() - 10_000)
            .collect();
        assert!(cuts.iter().all(|c| *c <= 500), "{cuts:?}");
        let spread = cuts.iter().max().unwrap() - cuts.iter().min().unwrap();
        assert!(spread > 300, "jittered: {cuts:?}");
        // A wait already shorter stays as it is; the failures still count.
        assert_eq!(
            b.cut(now, now + Duration::from_millis(3)),
            now + Duration::from_millis(3)
        );
        assert_eq!(b.attempt(), 5);
    }

    /// A fleet of 1,000 that retries from one instant returns one host per
    /// 5 ms over 5 s: at most 20 in any 100 ms, whenever etcd returns.
    #[test]
    fn a_fleet_on_its_slots_returns_one_host_per_spacing() {
        let spacing = Duration::from_millis(5);
        let window = Duration::from_secs(5);
        let wall = 1_764_000_000_123;
        for t0 in [0, 1, 2_499, 77_777] {
            let now = crate::Instant::from_millis(t0);
            let mut at: Vec<u64> = (0..1_000)
                .map(|rank| {
                    Slot::new(rank, 1_000, spacing, window, wall)
                        .next(now)
                        .as_millis()
                        - t0
                })
                .collect();
            at.sort_unstable();
            assert!(at.iter().all(|a| *a < 5_000), "within the period");
            at.dedup();
            assert_eq!(at.len(), 1_000, "no two hosts at one instant");
            for bin in 0..50 {
                let n = at.iter().filter(|a| **a / 100 == bin).count();
                assert_eq!(n, 20, "bin {bin} from {t0}");
            }
        }
        // A small fleet returns within its own few slots.
        let small = Slot::new(3, 10, spacing, window, wall);
        assert_eq!(small.period(), Duration::from_millis(50));
        let now = crate::Instant::from_millis(40);
        let next = small.next(now);
        assert!(next >= now && next.as_millis() < 90);
        assert_eq!((next.as_millis() + wall) % 50, 15);
        // A fleet larger than the window shares slots, no wider than it.
        assert_eq!(
            Slot::new(0, 100_000, spacing, window, wall).period(),
            window
        );
        // An instant on the slot is its own next.
        assert_eq!(small.next(next), next);
    }

    #[test]
    fn a_lasting_failure_retries_on_the_slot_and_a_return_cuts_to_it() {
        let slot = Slot::new(7, 100, Duration::from_millis(5), Duration::from_secs(5), 3);
        let phase = |at: crate::Instant| (at.as_millis() + 3) % 500;
        let mut b = Backoff::new(BackoffConfig::default(), 42);
        b.set_slot(Some(slot));
        assert_eq!(b.slot(), Some(slot));
        let now = crate::Instant::from_millis(10_000);
        let first = b.retry_at(now, FailureClass::Fast);
        assert!(
            first.as_millis() - 10_000 <= 100,
            "the first retry is the host's own"
        );
        let _second = b.retry_at(now, FailureClass::Fast);
        for _ in 0..5 {
            let at = b.retry_at(now, FailureClass::Fast);
            assert_eq!(phase(at), 35, "{at}");
            assert!(at.as_millis() - 10_000 <= 1_000 + 500);
        }
        let cut = b.cut(now, now + Duration::from_secs(30));
        assert_eq!(phase(cut), 35);
        assert!(cut.as_millis() - 10_000 < 500);
        // Never later than the wait it cuts.
        assert_eq!(
            b.cut(now, now + Duration::from_millis(1)),
            now + Duration::from_millis(1)
        );
        // The go-coord-style baseline has no slot.
        let mut plain = Backoff::new(BackoffConfig::plain(), 42);
        plain.set_slot(Some(slot));
        assert_eq!(plain.slot(), None);
        for _ in 0..5 {
            let _ = plain.retry_at(now, FailureClass::Fast);
        }
        assert_eq!(
            plain.retry_at(now, FailureClass::Fast),
            now + Duration::from_millis(3_200)
        );
    }

    /// Once the prober found etcd silent, a slotted retry waits for etcd's
    /// return (at most a slow cap, on the slot); the first two attempts,
    /// a host without a slot and the baseline are not held; a return or a
    /// success ends the hold.
    #[test]
    fn a_silence_holds_slotted_retries_until_etcd_returns() {
        let slot = Slot::new(7, 100, Duration::from_millis(5), Duration::from_secs(5), 3);
        let phase = |at: crate::Instant| (at.as_millis() + 3) % 500;
        let now = crate::Instant::from_millis(10_000);
        let far = now + Duration::from_secs(30);
        let mut b = Backoff::new(BackoffConfig::default(), 42);
        b.set_slot(Some(slot));
        b.silenced();
        // The first two retries are the host's own: not held.
        for _ in 0..2 {
            let at = b.retry_at(now, FailureClass::Fast);
            assert!(at.as_millis() - 10_000 <= 1_000, "{at}");
            assert_eq!(b.hold(now, at), at);
        }
        // From the third on: held a slow cap, on the slot.
        for _ in 0..3 {
            let at = b.retry_at(now, FailureClass::Fast);
            assert_eq!(phase(at), 35, "{at}");
            assert!(at >= far && at < far + Duration::from_millis(500), "{at}");
        }
        // A wait drawn before the silence was heard is pushed as far.
        let drawn = now + Duration::from_millis(700);
        let held = b.hold(now, drawn);
        assert!(held >= far && phase(held) == 35, "{held}");
        // etcd found back: cut to the next slot, and the hold is over.
        let cut = b.cut(now, held);
        assert!(phase(cut) == 35 && cut < now + Duration::from_millis(500));
        b.reset();
        for _ in 0..4 {
            let at = b.retry_at(now, FailureClass::Fast);
            assert!(at.as_millis() - 10_000 <= 1_500, "not held: {at}");
        }
        // A success ends it too.
        b.silenced();
        assert!(b.retry_at(now, FailureClass::Fast) >= far);
        b.reset();
        assert_eq!(b.hold(now, drawn), drawn);
        // No slot (a session, a fleet not counted) or the baseline: never held.
        for mut other in [
            Backoff::new(BackoffConfig::default(), 42),
            Backoff::new(BackoffConfig::plain(), 42),
        ] {
            other.set_slot(Some(slot).filter(|_| !other.heeds_returns()));
            other.silenced();
            for _ in 0..6 {
                let at = other.retry_at(now, FailureClass::Fast);
                assert!(at.as_millis() - 10_000 <= 3_200, "{at}");
                assert_eq!(other.hold(now, at), at);
            }
        }
    }

    #[test]
    fn slow_sequence_is_pinned_for_a_seed() {
        let mut b = Backoff::new(BackoffConfig::default(), 42);
        let got: Vec<u64> = (0..12)
            .map(|_| ms(b.next_delay(FailureClass::Slow)))
            .collect();
        // Ceilings: 100, 200, ... 25600, then 30000 capped.
        let ceilings = [
            100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000, 30000,
        ];
        for (d, c) in got.iter().zip(ceilings) {
            assert!(*d >= c / 2 && *d <= c, "delay {d} outside [{}, {c}]", c / 2);
        }
        // Pinned: the same seed always yields exactly this sequence.
        let mut again = Backoff::new(BackoffConfig::default(), 42);
        let replay: Vec<u64> = (0..12)
            .map(|_| ms(again.next_delay(FailureClass::Slow)))
            .collect();
        assert_eq!(got, replay);
        assert_eq!(
            got,
            vec![63, 163, 233, 504, 1509, 2783, 6342, 7973, 21204, 21571, 17714, 23847]
        );
    }

    #[test]
    fn fast_failures_stay_under_fast_cap_however_long_the_outage() {
        let mut b = Backoff::new(BackoffConfig::default(), 1);
        for _ in 0..200 {
            let d = b.next_delay(FailureClass::Fast);
            assert!(d <= Duration::from_secs(1), "{d:?}");
        }
        assert_eq!(b.attempt(), 200);
        // After many fast failures the floor is fast_cap/2: no spinning.
        assert!(b.next_delay(FailureClass::Fast) >= Duration::from_millis(500));
    }

    #[test]
    fn reset_starts_over_and_huge_attempts_do_not_overflow() {
        let mut b = Backoff::new(BackoffConfig::default(), 3);
        for _ in 0..100 {
            let _ = b.next_delay(FailureClass::Slow);
        }
        assert_eq!(b.ceiling(FailureClass::Slow), Duration::from_secs(30));
        b.reset();
        assert_eq!(b.attempt(), 0);
        assert_eq!(b.ceiling(FailureClass::Slow), Duration::from_millis(100));
        assert!(b.next_delay(FailureClass::Slow) <= Duration::from_millis(100));
    }

    #[test]
    fn different_seeds_spread_a_fleet() {
        let delays: std::collections::BTreeSet<u64> = (0..50)
            .map(|seed| {
                let mut b = Backoff::new(BackoffConfig::default(), seed);
                for _ in 0..5 {
                    let _ = b.next_delay(FailureClass::Fast);
                }
                ms(b.next_delay(FailureClass::Fast))
            })
            .collect();
        assert!(delays.len() > 30, "only {} distinct delays", delays.len());
    }

    #[test]
    fn validation_rejects_bad_configs() {
        assert_eq!(BackoffConfig::default().validate(), Ok(()));
        let c = BackoffConfig {
            initial: Duration::ZERO,
            ..Default::default()
        };
        assert!(matches!(
            c.validate(),
            Err(BackoffConfigError::InitialTooSmall(_))
        ));
        let c = BackoffConfig {
            multiplier: 0,
            ..Default::default()
        };
        assert_eq!(c.validate(), Err(BackoffConfigError::MultiplierZero));
        let c = BackoffConfig {
            cap: Duration::from_millis(10),
            ..Default::default()
        };
        assert!(matches!(
            c.validate(),
            Err(BackoffConfigError::CapOutOfRange(_))
        ));
    }

    /// Each range is closed at both ends: the limits themselves pass, one
    /// step beyond fails (cargo-mutants found `<` and `<=` alike here).
    #[test]
    fn validation_accepts_its_limits_and_nothing_beyond() {
        use BackoffConfigError::{CapOutOfRange, FastCapOutOfRange, InitialTooSmall};
        let ms = Duration::from_millis;
        let hour = Duration::from_secs(3600);
        let initial = |initial| BackoffConfig {
            initial,
            cap: ms(1000),
            ..Default::default()
        };
        let cap = |cap| BackoffConfig {
            initial: ms(100),
            cap,
            ..Default::default()
        };
        let fast_cap = |fast_cap| BackoffConfig {
            fast_cap,
            ..Default::default()
        };
        let us999 = Duration::from_micros(999);
        let cases = [
            (initial(us999), Err(InitialTooSmall(us999))),
            (initial(ms(1)), Ok(())),
            (cap(ms(99)), Err(CapOutOfRange(ms(99)))),
            (cap(ms(100)), Ok(())),
            (cap(hour), Ok(())),
            (cap(hour + ms(1)), Err(CapOutOfRange(hour + ms(1)))),
            (
                fast_cap(Duration::ZERO),
                Err(FastCapOutOfRange(Duration::ZERO)),
            ),
            (fast_cap(ms(1)), Ok(())),
            (fast_cap(hour), Ok(())),
            (
                fast_cap(Duration::from_secs(3601)),
                Err(FastCapOutOfRange(Duration::from_secs(3601))),
            ),
            (
                BackoffConfig {
                    multiplier: 1,
                    ..Default::default()
                },
                Ok(()),
            ),
        ];
        for (c, want) in cases {
            assert_eq!(c.validate(), want, "{c:?}");
        }
    }
}
