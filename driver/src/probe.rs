//! One prober per client: the task that runs the core's
//! [`Prober`](coord_core::probe::Prober) for every handle sharing a
//! client, and tells each handle's loop when etcd answers again.
//!
//! Each loop holds a [`Member`]: it says whether its machine waits out a
//! backoff (the demand), and wakes when a probe found etcd silent or back
//! ([`News`]). The task runs only while some member waits, sends at most
//! one cheap read per second (every 50 ms while the connection is
//! refused: nothing listens, so no etcd is asked), and ends when the hub
//! is gone.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use coord_core::io::{Command, Completion};
use coord_core::outbox::Output;
use coord_core::probe::{ProbeConfig, ProbeEvent, ProbeInput, Prober};
use coord_core::{Failure, Outcome};
use tokio::sync::watch;

use crate::api::{outcome, EtcdApi, EtcdError};
use crate::clock::Clock;
use crate::exec::sleep_until;

/// The prober of one client, shared by every handle made from it (clones
/// share it). A handle given a client without one probes on its own.
#[derive(Debug, Clone)]
pub struct ProbeHub(Arc<Hub>);

#[derive(Debug)]
struct Hub {
    /// How many loops wait out a backoff now.
    demand: watch::Sender<usize>,
    /// What the probes found, told to every member.
    board: Mutex<Board>,
    /// Bumped each time a loop found etcd silent (a request or stream
    /// unanswered).
    silences: watch::Sender<u64>,
    started: AtomicBool,
    config: ProbeConfig,
}

impl Default for ProbeHub {
    fn default() -> Self {
        Self::new()
    }
}

impl ProbeHub {
    /// A hub with no task yet (it starts with the first loop), probing
    /// at most once a second (every 50 ms while refused).
    pub fn new() -> Self {
        Self::with_config(ProbeConfig::default())
    }

    /// A hub that probes as `config` says (the default: at most once a
    /// second, every 50 ms while the connection is refused, and a probe
    /// unanswered for a second counts as silence).
    pub fn with_config(config: ProbeConfig) -> Self {
        ProbeHub(Arc::new(Hub {
            demand: watch::channel(0).0,
            board: Mutex::new(Board {
                members: Vec::new(),
                silent: false,
            }),
            silences: watch::channel(0).0,
            started: AtomicBool::new(false),
            config,
        }))
    }

    /// Starts the probing task with `api`, once.
    pub(crate) fn start<A: EtcdApi>(&self, api: &A) {
        if self.0.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let demand = self.0.demand.subscribe();
        let silences = self.0.silences.subscribe();
        // Shared by every handle of the client: a root span of its own.
        let span = tracing::info_span!(parent: None, "probe");
        tokio::spawn(tracing::Instrument::instrument(
            run(
                api.for_probe(),
                Arc::downgrade(&self.0),
                self.0.config.clone(),
                (demand, silences),
            ),
            span,
        ));
    }

    /// A loop's membership: its demand, and the news of etcd's silence
    /// and return (a silence already found is told at once).
    pub(crate) fn member(&self) -> Member {
        let (tx, news) = watch::channel(None);
        let mut board = self
            .0
            .board
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if board.silent {
            let _ = tx.send(Some(News::Silent));
        }
        board.members.retain(|member| !member.is_closed());
        board.members.push(tx);
        drop(board);
        Member {
            hub: Arc::clone(&self.0),
            waiting: false,
            news,
        }
    }
}

/// What a probe found, as a member is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum News {
    /// A probe went unanswered or was refused (see
    /// [`Input::Silent`](coord_core::machine::Input::Silent)).
    Silent,
    /// etcd answers again after a silence; the probe that found it back
    /// was sent then.
    Returned(tokio::time::Instant),
}

/// The members' wake-ups and the last news.
#[derive(Debug)]
struct Board {
    /// Each member's wake-up, in the order they joined. One channel per
    /// member: tasks waiting on one shared tokio `watch` wake in an order
    /// drawn from tokio's own unseeded RNG, which would make simulated
    /// runs differ from one process to the next.
    members: Vec<watch::Sender<Option<News>>>,
    /// Whether etcd was last found silent (a member joining then is told).
    silent: bool,
}

impl Board {
    /// Tells every member; forgets those that are gone.
    fn tell(&mut self, news: News) {
        self.silent = news == News::Silent;
        self.members
            .retain(|member| member.send(Some(news)).is_ok());
    }
}

/// One loop's side of a [`ProbeHub`].
pub(crate) struct Member {
    hub: Arc<Hub>,
    waiting: bool,
    news: watch::Receiver<Option<News>>,
}

impl Member {
    /// Whether the loop's machine waits on etcd now (`awaits_etcd`).
    pub(crate) fn set_waiting(&mut self, waiting: bool) {
        if waiting == self.waiting {
            return;
        }
        self.waiting = waiting;
        self.hub.demand.send_modify(|n| {
            *n = if waiting {
                n.saturating_add(1)
            } else {
                n.saturating_sub(1)
            };
        });
    }

    /// Completes with the next news: etcd found silent, or answering
    /// again after a silence. News that came faster than it was read is
    /// told once, as the latest.
    pub(crate) async fn news(&mut self) -> News {
        loop {
            if self.news.changed().await.is_err() {
                return std::future::pending().await;
            }
            if let Some(news) = *self.news.borrow_and_update() {
                return news;
            }
        }
    }

    /// The loop's machine found etcd silent.
    pub(crate) fn silence(&self) {
        self.hub.silences.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.set_waiting(false);
    }
}

/// The prober's demand as the hub has it now: whether any loop waits.
fn demanded(demand: &mut watch::Receiver<usize>) -> ProbeInput {
    ProbeInput::Demand(*demand.borrow_and_update() > 0)
}

type Probe = Pin<Box<dyn std::future::Future<Output = Completion> + Send>>;

/// Runs the prober until the hub is gone; tells the client each time etcd
/// went silent (it may re-dial).
async fn run<A: EtcdApi>(
    api: A,
    hub: Weak<Hub>,
    config: ProbeConfig,
    (mut demand, mut silences): (watch::Receiver<usize>, watch::Receiver<u64>),
) {
    let clock = Clock::start();
    let mut prober = Prober::new(config);
    let mut in_flight: Option<Probe> = None;
    prober.handle(clock.now(), demanded(&mut demand));
    loop {
        while let Some(output) = prober.poll() {
            match output {
                Output::Command(Command::Range { op, request }) => {
                    let api = api.clone();
                    in_flight = Some(Box::pin(async move {
                        let outcome = match api.range(request).await {
                            // Reset under a read: no etcd answered, and
                            // the next probe needs a new connection; paced
                            // as a refusal.
                            Err(EtcdError::Reset(m)) => Outcome::Err(Failure::Refused(m)),
                            other => outcome(other),
                        };
                        Completion::Listed { op, outcome }
                    }));
                }
                Output::Command(Command::Abandon { .. }) => {
                    in_flight = None;
                    api.silent().await;
                }
                Output::Command(_) => {}
                Output::Event(event) => {
                    let Some(hub) = hub.upgrade() else { return };
                    let news = match event {
                        ProbeEvent::Returned { sent } => {
                            tracing::debug!(
                                sent_ms = sent.as_millis(),
                                "etcd answers again: cutting backoffs"
                            );
                            News::Returned(clock.to_runtime(sent))
                        }
                        ProbeEvent::Silent => {
                            tracing::debug!("etcd is silent: holding slotted retries");
                            News::Silent
                        }
                    };
                    hub.board
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .tell(news);
                }
            }
        }
        let deadline = prober.poll_timeout().map(|d| clock.to_runtime(d));
        let input = tokio::select! {
            // Deterministic order (the simulator replays seeds exactly).
            biased;
            changed = demand.changed() => {
                if changed.is_err() {
                    return;
                }
                demanded(&mut demand)
            }
            changed = silences.changed() => {
                if changed.is_err() {
                    return;
                }
                api.silent().await;
                continue;
            }
            done = async {
                match in_flight.as_mut() {
                    Some(probe) => probe.await,
                    None => std::future::pending().await,
                }
            }, if in_flight.is_some() => {
                in_flight = None;
                // Unavailable (no leader), refused or broken: this member
                // will not do.
                if let Completion::Listed {
                    outcome:
                        Outcome::Err(
                            Failure::Unavailable(_) | Failure::Refused(_) | Failure::StreamClosed(_),
                        ),
                    ..
                } = &done
                {
                    api.silent().await;
                }
                ProbeInput::Io(done)
            }
            () = sleep_until(deadline) => ProbeInput::Timeout,
        };
        prober.handle(clock.now(), input);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tell(hub: &ProbeHub, news: News) {
        hub.0
            .board
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .tell(news);
    }

    #[test]
    fn a_member_joining_is_told_a_silence_still_on_and_not_one_that_ended() {
        let hub = ProbeHub::new();
        let early = hub.member();
        assert_eq!(*early.news.borrow(), None);
        tell(&hub, News::Silent);
        let during = hub.member();
        assert_eq!(*during.news.borrow(), Some(News::Silent), "told at once");
        assert_eq!(*early.news.borrow(), Some(News::Silent));
        let at = tokio::time::Instant::now();
        tell(&hub, News::Returned(at));
        let after = hub.member();
        assert_eq!(
            *after.news.borrow(),
            None,
            "a silence that ended is not news to a loop joining after it"
        );
        assert_eq!(*during.news.borrow(), Some(News::Returned(at)));
    }
}
