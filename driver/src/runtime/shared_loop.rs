//! `SharedLoop`: a handle's run loop, polled by whichever of two tasks is
//! there to poll it: the consumer while it waits for the loop's output, a
//! background task of its own otherwise.
//!
//! Why: a loop on a task of its own hands each output to the consumer's
//! task, a wake (often of another thread) per output on top of the one
//! that brought the input. A consumer that awaits the loop's output most
//! of the time can run the loop itself then, so the input wakes it
//! directly, as a raw stream would; the background task keeps the loop
//! going (retries, the view, backpressure) whenever the consumer is busy
//! elsewhere or gone.
//!
//! How: the loop is always polled with one waker of its own. Its wakes set
//! a flag and wake the consumer if one is waiting ([`Turn`]), else the
//! background task; a wake that finds the flag still set (the consumer has
//! not polled since the last one) wakes the background task too. Whoever
//! is woken polls the loop if the flag is set and nobody else is polling
//! it (a lock tried, never waited on); the poller looks at the flag again
//! once it let go of the lock, so a wake that came while it polled (and
//! whose wakee found the lock taken) is never lost. A consumer that stops
//! waiting hands a pending wake to the background task.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

/// The loop's future.
pub(crate) type LoopFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A run loop shared by a consumer and a background task; see the module
/// docs.
pub(crate) struct SharedLoop {
    /// The loop, until it ended.
    looping: Mutex<Option<LoopFuture>>,
    wakes: Arc<Wakes>,
    /// The waker every poll of the loop uses (of `wakes`).
    waker: Waker,
}

impl std::fmt::Debug for SharedLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLoop")
            .field("woken", &self.wakes.woken.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

/// Where the loop's wakes go.
#[derive(Default)]
struct Wakes {
    /// The loop was woken since it was last polled (set at first: it was
    /// never polled).
    woken: AtomicBool,
    /// The consumer waiting for the loop's output, if one is.
    consumer: Mutex<Option<Waker>>,
    /// The background task.
    background: Mutex<Option<Waker>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Puts `waker` into `slot`, unless it already holds one that wakes the
/// same task.
fn register(slot: &Mutex<Option<Waker>>, waker: &Waker) {
    let mut slot = lock(slot);
    match slot.as_ref() {
        Some(w) if w.will_wake(waker) => {}
        _ => *slot = Some(waker.clone()),
    }
}

impl Wakes {
    fn wake_background(&self) {
        // Woken after the slot's lock is let go: a waker may run anything.
        let waker = lock(&self.background).clone();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let unserved = self.woken.swap(true, Ordering::SeqCst);
        let consumer = lock(&self.consumer).clone();
        match consumer {
            Some(w) => {
                w.wake();
                if unserved {
                    // The consumer has not polled since the last wake: its
                    // `next()` may be kept but not polled (held across
                    // other awaits). The background task polls meanwhile.
                    self.wake_background();
                }
            }
            None => self.wake_background(),
        }
    }
}

impl SharedLoop {
    /// Shares `looping`; nothing polls it until [`SharedLoop::background`]
    /// runs or a consumer takes a [`Turn`].
    pub(crate) fn new(looping: LoopFuture) -> Arc<Self> {
        let wakes = Arc::new(Wakes::default());
        wakes.woken.store(true, Ordering::SeqCst);
        Arc::new(SharedLoop {
            looping: Mutex::new(Some(looping)),
            waker: Waker::from(Arc::clone(&wakes)),
            wakes,
        })
    }

    /// The background task's part: polls the loop whenever it is woken
    /// and no consumer polls it; completes when the loop ended.
    pub(crate) async fn background(self: Arc<Self>) {
        std::future::poll_fn(|cx| {
            register(&self.wakes.background, cx.waker());
            self.drive(cx)
        })
        .await;
    }

    /// Polls the loop once if it was woken and nobody else is polling it;
    /// `Ready` once it ended. The caller's waker must already be where the
    /// loop's wakes reach it.
    fn drive(&self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.wakes.woken.load(Ordering::SeqCst) {
            return self.ended_or_pending();
        }
        // Whoever holds the lock looks at the flag again when it lets go.
        let Ok(mut slot) = self.looping.try_lock() else {
            return Poll::Pending;
        };
        let Some(looping) = slot.as_mut() else {
            return Poll::Ready(());
        };
        self.wakes.woken.store(false, Ordering::SeqCst);
        if looping
            .as_mut()
            .poll(&mut Context::from_waker(&self.waker))
            .is_ready()
        {
            *slot = None;
            return Poll::Ready(());
        }
        drop(slot);
        if self.wakes.woken.load(Ordering::SeqCst) {
            // Woken while polled (by itself, to yield; or by input whose
            // wakee found the lock taken): poll again, after a turn of
            // the runtime.
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }

    /// `Ready` if the loop ended, without waiting for the lock.
    fn ended_or_pending(&self) -> Poll<()> {
        match self.looping.try_lock() {
            Ok(slot) if slot.is_none() => Poll::Ready(()),
            _ => Poll::Pending,
        }
    }

    /// A consumer's wait for the loop's output: while it lasts, the loop's
    /// wakes go to the consumer, which polls the loop itself
    /// ([`Turn::poll`]). Ending it (dropping it) hands them back to the
    /// background task, with any wake not yet acted on.
    pub(crate) fn turn(&self) -> Turn<'_> {
        Turn(self)
    }
}

/// See [`SharedLoop::turn`].
pub(crate) struct Turn<'a>(&'a SharedLoop);

impl Turn<'_> {
    /// Registers the consumer's waker, then polls the loop if it was
    /// woken and nobody else polls it; `Ready` once the loop ended.
    pub(crate) fn poll(&self, cx: &mut Context<'_>) -> Poll<()> {
        register(&self.0.wakes.consumer, cx.waker());
        self.0.drive(cx)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let wakes = &self.0.wakes;
        lock(&wakes.consumer).take();
        if wakes.woken.load(Ordering::SeqCst) {
            // A wake the consumer will no longer act on.
            wakes.wake_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A waker counting its wakes.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Count {
        fn get(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// A loop that counts its polls, keeps the waker of the last, and ends
    /// once `end` is set.
    #[derive(Default)]
    struct Probe {
        polls: AtomicUsize,
        waker: Mutex<Option<Waker>>,
        end: AtomicBool,
    }

    fn looping(probe: &Arc<Probe>) -> LoopFuture {
        let probe = Arc::clone(probe);
        Box::pin(std::future::poll_fn(move |cx| {
            probe.polls.fetch_add(1, Ordering::SeqCst);
            *lock(&probe.waker) = Some(cx.waker().clone());
            if probe.end.load(Ordering::SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }))
    }

    impl Probe {
        fn polls(&self) -> usize {
            self.polls.load(Ordering::SeqCst)
        }
        /// Wakes the loop as its input would.
        fn wake(&self) {
            if let Some(w) = lock(&self.waker).as_ref() {
                w.wake_by_ref();
            }
        }
    }

    /// Polls once, through `poll`, with a waker counting into `count`.
    fn poll_counted(
        count: &Arc<Count>,
        poll: impl FnOnce(&mut Context<'_>) -> Poll<()>,
    ) -> Poll<()> {
        let waker = Waker::from(Arc::clone(count));
        poll(&mut Context::from_waker(&waker))
    }

    /// Polls the background task's part once, woken into `bg`.
    fn poll_background(
        task: &mut Pin<Box<dyn Future<Output = ()> + Send>>,
        bg: &Arc<Count>,
    ) -> Poll<()> {
        poll_counted(bg, |cx| task.as_mut().poll(cx))
    }

    #[test]
    fn wakes_go_to_the_waiting_consumer_and_else_to_the_background_task() {
        let probe = Arc::new(Probe::default());
        let shared = SharedLoop::new(looping(&probe));
        let (bg, consumer) = (Arc::new(Count::default()), Arc::new(Count::default()));
        let mut task: Pin<Box<dyn Future<Output = ()> + Send>> =
            Box::pin(Arc::clone(&shared).background());
        // Never polled yet: the background task polls it at once.
        assert!(poll_background(&mut task, &bg).is_pending());
        assert_eq!(probe.polls(), 1);
        // Not woken: polling again does not poll the loop.
        assert!(poll_background(&mut task, &bg).is_pending());
        assert_eq!(probe.polls(), 1);
        probe.wake();
        assert_eq!(
            bg.get(),
            1,
            "no consumer waits: the background task is woken"
        );
        {
            let turn = shared.turn();
            // The consumer polls the loop the background task was woken
            // for; then input wakes the consumer, not the background task.
            assert!(poll_counted(&consumer, |cx| turn.poll(cx)).is_pending());
            assert_eq!(probe.polls(), 2);
            probe.wake();
            assert_eq!((consumer.get(), bg.get()), (1, 1));
            assert!(poll_counted(&consumer, |cx| turn.poll(cx)).is_pending());
            assert_eq!(probe.polls(), 3);
            // A wake the consumer leaves without acting on goes to the
            // background task when the turn ends.
            probe.wake();
            assert_eq!((consumer.get(), bg.get()), (2, 1));
        }
        assert_eq!(bg.get(), 2);
        {
            // A consumer that waits but does not poll (its `next()` held
            // across other awaits): the second wake it leaves unserved
            // reaches the background task too.
            let turn = shared.turn();
            assert!(poll_counted(&consumer, |cx| turn.poll(cx)).is_pending());
            assert_eq!(probe.polls(), 4);
            probe.wake();
            assert_eq!((consumer.get(), bg.get()), (3, 2));
            probe.wake();
            assert_eq!((consumer.get(), bg.get()), (4, 3));
            assert!(poll_background(&mut task, &bg).is_pending());
            assert_eq!(probe.polls(), 5, "the background task polled it");
        }
        assert_eq!(bg.get(), 3, "nothing left unserved");
        probe.wake();
        assert!(poll_background(&mut task, &bg).is_pending());
        assert_eq!(probe.polls(), 6);
        // Ended: both see it.
        probe.end.store(true, Ordering::SeqCst);
        probe.wake();
        assert!(poll_background(&mut task, &bg).is_ready());
        assert!(poll_counted(&consumer, |cx| shared.turn().poll(cx)).is_ready());
        assert_eq!(probe.polls(), 7);
    }

    #[test]
    fn a_wait_polled_from_another_task_moves_its_wakes_there() {
        // One `next()` moved to another task (or polled through another
        // waker) between two polls: the loop's wakes follow it.
        let probe = Arc::new(Probe::default());
        let shared = SharedLoop::new(looping(&probe));
        let (first, second) = (Arc::new(Count::default()), Arc::new(Count::default()));
        let turn = shared.turn();
        assert!(poll_counted(&first, |cx| turn.poll(cx)).is_pending());
        probe.wake();
        assert_eq!((first.get(), second.get()), (1, 0));
        assert!(poll_counted(&second, |cx| turn.poll(cx)).is_pending());
        assert_eq!(probe.polls(), 2);
        probe.wake();
        assert_eq!(
            (first.get(), second.get()),
            (1, 1),
            "the wake reached the task that polled last"
        );
    }

    #[test]
    fn a_wake_while_the_loop_is_polled_elsewhere_is_acted_on_by_the_poller() {
        // The loop wakes itself while polled (as a yield does, or input
        // whose wakee found the lock taken): the poller is woken to poll
        // again.
        let polls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&polls);
        let shared = SharedLoop::new(Box::pin(std::future::poll_fn(move |cx| {
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                cx.waker().wake_by_ref();
            }
            Poll::Pending
        })));
        let bg = Arc::new(Count::default());
        let mut task: Pin<Box<dyn Future<Output = ()> + Send>> =
            Box::pin(Arc::clone(&shared).background());
        assert!(poll_background(&mut task, &bg).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 1);
        assert!(bg.get() >= 1, "the poller is woken to poll again");
        assert!(poll_background(&mut task, &bg).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        // Nobody else polls the loop meanwhile: a consumer finding the
        // lock taken leaves it to the holder.
        let guard = shared.looping.try_lock();
        assert!(guard.is_ok());
        shared.wakes.woken.store(true, Ordering::SeqCst);
        let consumer = Arc::new(Count::default());
        assert!(poll_counted(&consumer, |cx| shared.turn().poll(cx)).is_pending());
        drop(guard);
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        assert!(
            shared.wakes.woken.load(Ordering::SeqCst),
            "the wake is kept"
        );
    }
}
