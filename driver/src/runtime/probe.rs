//! One prober per client: the task that runs the core's
//! [`Prober`](coord_core::probe::Prober) for every handle sharing a
//! client's [`ProbeHub`], and tells each handle's loop when etcd answers
//! again.
//!
//! Each loop holds a `Member` of the hub: it says whether its machine
//! waits out a backoff (the demand), and wakes when a probe found etcd
//! silent or back (`News`). The task runs only while some member waits,
//! sends at most one cheap read per second (every 50 ms while the
//! connection is refused: nothing listens, so no etcd is asked), and ends
//! when the hub is gone. It has a loop of its own rather than the generic
//! runner's, because the runner's loops are its members: they wait on the
//! news it tells.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use coord_core::io::{Command, Completion};
use coord_core::outbox::Output;
use coord_core::probe::{ProbeConfig, ProbeEvent, ProbeInput, Prober};
use coord_core::{Failure, Outcome};
use tokio::sync::watch;

use crate::etcd::{outcome, EtcdApi, EtcdError, Hub, News, ProbeHub};
use crate::runtime::clock::Clock;
use crate::runtime::exec::sleep_until;

/// Starts `hub`'s probing task with `api`, once.
pub(crate) fn start<A: EtcdApi>(hub: &ProbeHub, api: &A) {
    if hub.0.started.swap(true, Ordering::SeqCst) {
        return;
    }
    let demand = hub.0.demand.subscribe();
    let silences = hub.0.silences.subscribe();
    // Shared by every handle of the client: a root span of its own.
    let span = tracing::info_span!(parent: None, "probe");
    tokio::spawn(tracing::Instrument::instrument(
        run(
            api.for_probe(),
            Arc::downgrade(&hub.0),
            hub.0.config.clone(),
            (demand, silences),
        ),
        span,
    ));
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
