//! `Observe`: the stream of an election's leaders, on a loop of its own.

use std::time::Duration;

use coord_core::mirror::MirrorConfig;
use coord_core::observer::{Event, Input, Leader, Observer};
use coord_core::{BackoffConfig, Instant, Revision, StartPolicy};
use tokio::sync::{mpsc, watch};
use tracing::{debug, warn};

use crate::etcd::EtcdApi;
use crate::runtime::clock::Clock;
use crate::runtime::runner::{run, Adapter};
use crate::runtime::status::ViewStatus;

/// How an observer retries and seeds its jitter: its session's settings.
#[derive(Debug, Clone)]
pub(crate) struct ObserveSettings {
    pub(crate) request_timeout: Duration,
    pub(crate) probe_interval: Duration,
    pub(crate) backoff: BackoffConfig,
    /// The session's seed (the observer draws its own from it).
    pub(crate) seed: u64,
}

/// One observation: who leads, as of a revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The leader (`None`: nobody leads).
    pub leader: Option<Leader>,
    /// The etcd revision this reflects.
    pub revision: Revision,
    /// `Some` on the first observation after etcd's history started over
    /// (wiped, restored from a snapshot, another cluster): why. It is
    /// reported whether the leader changed or not, and its revision (and
    /// those after it) may be below every revision observed before: the
    /// one time revisions go down.
    pub reset: Option<coord_core::watcher::ResyncReason>,
}

/// Every change of an election's leader, from
/// [`Election::observe`](crate::Election::observe). Dropping it (or
/// [`close`](Self::close)) stops observing.
#[derive(Debug)]
pub struct Observe {
    events: mpsc::UnboundedReceiver<Observed>,
    close: mpsc::UnboundedSender<()>,
    status: watch::Receiver<ViewStatus>,
}

impl Observe {
    /// Runs an observer of `prefix` on a loop of its own.
    pub(crate) fn spawn<A: EtcdApi>(
        client: A,
        prefix: coord_core::Key,
        ObserveSettings {
            request_timeout,
            probe_interval,
            backoff,
            seed,
        }: ObserveSettings,
    ) -> Observe {
        let prefix_text = prefix.to_string();
        let config = MirrorConfig {
            request_timeout,
            probe_interval,
            backoff,
            start: StartPolicy::Retry,
            ..MirrorConfig::new(prefix, observer_seed(seed))
        };
        let (events_tx, events) = mpsc::unbounded_channel();
        let (close, close_rx) = mpsc::unbounded_channel();
        let (status_tx, status) = watch::channel(ViewStatus::Starting);
        match Observer::new(config) {
            Ok(observer) => {
                let clock = Clock::start();
                let adapter = ObserverAdapter {
                    events: events_tx,
                    status: status_tx,
                    clock,
                    seen: Seen::Nothing,
                    reset: None,
                };
                let span = tracing::info_span!("observe", name = %prefix_text);
                tokio::spawn(tracing::Instrument::instrument(
                    run(client, observer, adapter, clock, close_rx),
                    span,
                ));
            }
            // Settings that passed a session's validation: never.
            Err(e) => {
                warn!(error = %e, "observer refused its settings");
                status_tx.send_replace(ViewStatus::Closed);
            }
        }
        Observe {
            events,
            close,
            status,
        }
    }

    /// The next observation, in order; `None` once closed. The first is
    /// the leader when observing began (`leader: None`: nobody leads); each
    /// later one a change of leader key, token or value, at the revision it
    /// happened. While etcd is unreachable nothing comes (the observer
    /// keeps retrying); after it returns, the leader then is reported if
    /// it changed.
    ///
    /// Cancel safety: cancel-safe (an observation leaves the buffer only
    /// when it is returned). `Observe` is also a
    /// [`Stream`](futures_core::Stream) of the same observations.
    pub async fn next(&mut self) -> Option<Observed> {
        self.events.recv().await
    }

    /// What the observer is doing: watching (the leader reported last is
    /// current), re-listing, or failing since some time (it may be stale;
    /// retries go on).
    pub fn status(&self) -> watch::Receiver<ViewStatus> {
        self.status.clone()
    }

    /// Stops observing (idempotent).
    pub fn close(&self) {
        let _ = self.close.send(());
    }
}

/// The same observations as [`Observe::next`], for `StreamExt`,
/// `StreamMap` and tokio-stream. Ends (`None`) once closed.
impl futures_core::Stream for Observe {
    type Item = Observed;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Observed>> {
        self.get_mut().events.poll_recv(cx)
    }
}

/// The jitter seed of an observer on a session seeded `seed`: its own, so
/// that it does not retry in step with the session, and as distinct
/// between processes as their seeds are.
fn observer_seed(seed: u64) -> u64 {
    seed ^ 0x0b5e_77e5
}

/// What an observer saw of the leadership, for the failover metric.
enum Seen {
    /// Nothing reported yet (a first "no leader" is not a failover).
    Nothing,
    /// A leader.
    Leader,
    /// No leader since then, after a leader.
    LeaderlessSince(tokio::time::Instant),
}

/// The observer loop's side of an [`Observe`].
pub(crate) struct ObserverAdapter {
    events: mpsc::UnboundedSender<Observed>,
    status: watch::Sender<ViewStatus>,
    clock: Clock,
    seen: Seen,
    /// A reset announced, for the next observation.
    reset: Option<coord_core::watcher::ResyncReason>,
}

impl Adapter<Observer> for ObserverAdapter {
    type Request = ();

    fn start(&mut self, now: Instant, machine: &mut Observer) {
        if let Err(e) = machine.handle(now, Input::Start) {
            warn!(error = %e, "observer refused to start");
        }
    }

    fn request(&mut self, now: Instant, machine: &mut Observer, (): ()) {
        let _ = machine.handle(now, Input::Close);
    }

    fn publish(&mut self, _now: Instant, event: Event) {
        match event {
            Event::Leader { leader, revision } => {
                self.seen = match (&self.seen, leader.is_some()) {
                    (Seen::LeaderlessSince(since), true) => {
                        crate::telemetry::failover(since.elapsed());
                        Seen::Leader
                    }
                    (Seen::Leader, false) => Seen::LeaderlessSince(tokio::time::Instant::now()),
                    (Seen::LeaderlessSince(since), false) => Seen::LeaderlessSince(*since),
                    (_, true) => Seen::Leader,
                    (Seen::Nothing, false) => Seen::Nothing,
                };
                let reset = self.reset.take();
                let _ = self.events.send(Observed {
                    leader,
                    revision,
                    reset,
                });
            }
            Event::Reset { reason, revision } => {
                warn!(
                    ?reason,
                    revision = revision.0,
                    "etcd's history started over"
                );
                self.reset = Some(reason);
            }
            Event::Retrying(retry) => {
                debug!(attempt = retry.attempt, failure = ?retry.failure, "observer retrying")
            }
            Event::StartFailed { reason } => warn!(%reason, "observer failed to start"),
            Event::Closed => {}
        }
    }

    fn drained(&mut self, machine: &Observer) {
        ViewStatus::publish(&self.status, machine.status(), self.clock);
    }

    fn ended(&mut self, _machine: &Observer) {
        self.status.send_replace(ViewStatus::Closed);
    }
}

#[cfg(test)]
mod tests {
    use super::observer_seed;
    use std::collections::BTreeSet;

    #[test]
    fn observers_draw_seeds_of_their_own_as_distinct_as_their_sessions() {
        let seeds: BTreeSet<u64> = (0..1000).map(observer_seed).collect();
        assert_eq!(seeds.len(), 1000, "two sessions' observers drew one seed");
        for seed in [0, 1, 7, u64::MAX, 0x0b5e_77e5] {
            assert_ne!(
                observer_seed(seed),
                seed,
                "an observer shares its session's seed"
            );
        }
    }
}
