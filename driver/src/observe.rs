//! `Observe`: the stream of an election's leaders, on a loop of its own.

use coord_core::observer::{Event, Input, Leader, Observer};
use coord_core::Instant;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::runner::Host;

/// Every change of an election's leader, from
/// [`Election::observe`](crate::Election::observe). Dropping it (or
/// [`close`](Self::close)) stops observing.
#[derive(Debug)]
pub struct Observe {
    events: mpsc::UnboundedReceiver<Option<Leader>>,
    close: mpsc::UnboundedSender<()>,
}

impl Observe {
    pub(crate) fn new(
        events: mpsc::UnboundedReceiver<Option<Leader>>,
        close: mpsc::UnboundedSender<()>,
    ) -> Self {
        Observe { events, close }
    }

    /// The next leader (`Some(None)`: nobody leads), in order; `None` once
    /// closed. The first item is the leader when observing began; each
    /// later one is a change of leader key, token or value. While etcd is
    /// unreachable nothing comes (the observer keeps retrying); after it
    /// returns, the leader then is reported if it changed.
    pub async fn next(&mut self) -> Option<Option<Leader>> {
        self.events.recv().await
    }

    /// Stops observing (idempotent).
    pub fn close(&self) {
        let _ = self.close.send(());
    }
}

/// The observer loop's side of an [`Observe`].
pub(crate) struct ObserveHost {
    events: mpsc::UnboundedSender<Option<Leader>>,
}

impl ObserveHost {
    pub(crate) fn new(events: mpsc::UnboundedSender<Option<Leader>>) -> Self {
        ObserveHost { events }
    }
}

impl Host<Observer> for ObserveHost {
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
            Event::Leader { leader, .. } => {
                let _ = self.events.send(leader);
            }
            Event::Retrying(retry) => {
                debug!(attempt = retry.attempt, failure = ?retry.failure, "observer retrying")
            }
            Event::StartFailed { reason } => warn!(%reason, "observer failed to start"),
            Event::Closed => {}
        }
    }
}
