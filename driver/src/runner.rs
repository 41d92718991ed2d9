//! The one run loop every handle uses: feed the machine its inputs, execute
//! its commands, hand its events to the handle's [`Host`], and sleep until
//! its next deadline. Only this loop reads the clock.

use std::future::Future;
use std::time::Duration;

use coord_core::io::Completion;
use coord_core::outbox::Output;
use coord_core::{Instant, Machine};
use tokio::sync::mpsc;
use tracing::warn;

use crate::api::EtcdApi;
use crate::clock::Clock;
use crate::exec::{sleep_until, Executor};

/// What a handle adds to the run loop: how user requests reach the machine,
/// where its events go, and (for a watcher) backpressure.
pub(crate) trait Host<M: Machine>: Send + 'static {
    /// What the user's handles send to the loop.
    type Request: Send + 'static;

    /// Starts the machine (its first input).
    fn start(&mut self, now: Instant, machine: &mut M);

    /// A user request: feed it to the machine.
    fn request(&mut self, now: Instant, machine: &mut M, request: Self::Request);

    /// An event the machine emitted.
    fn publish(&mut self, now: Instant, event: M::Event);

    /// Called after the machine's outputs were drained (state changes are
    /// published from here).
    fn drained(&mut self, _machine: &M) {}

    /// Every handle is gone: the loop ends after this.
    fn orphaned(&mut self, _machine: &M) {}

    /// The loop ended (the machine closed, or every handle is gone).
    fn ended(&mut self, _machine: &M) {}

    /// False while the host cannot take more watch messages: the streams
    /// are then not read.
    fn room(&self) -> bool {
        true
    }

    /// Completes when the host delivered something to its user (a watcher
    /// handing an event to a slow consumer); never, by default.
    fn deliver(&mut self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
}

/// A timer that fires this late was held up by the process itself, not
/// by etcd.
const LATE: Duration = Duration::from_secs(1);

/// How long a late wake lets answers that arrived meanwhile be read.
const CATCH_UP: Duration = Duration::from_millis(20);

/// Whether the timer for `deadline` fired [`LATE`] or more after it.
fn woke_late(deadline: Option<tokio::time::Instant>) -> bool {
    deadline.is_some_and(|at| tokio::time::Instant::now().saturating_duration_since(at) >= LATE)
}

/// Runs `machine` against `api` until it closes or every sender of
/// `requests` is gone.
pub(crate) async fn run<A, M, H>(
    api: A,
    mut machine: M,
    mut host: H,
    clock: Clock,
    mut requests: mpsc::UnboundedReceiver<H::Request>,
) where
    A: EtcdApi,
    M: Machine + Send,
    H: Host<M>,
{
    let (done_tx, mut done) = mpsc::unbounded_channel::<Completion>();
    // Probing for etcd's return while the machine backs off: shared with
    // the client's other handles when the client has a hub.
    let hub = api.probe_hub().unwrap_or_default();
    hub.start(&api);
    let mut probe = hub.member();
    let mut last_silences = 0;
    let mut exec = Executor::new(api, done_tx);
    host.start(clock.now(), &mut machine);
    loop {
        while let Some(output) = machine.poll() {
            match output {
                Output::Command(c) => exec.execute(c),
                Output::Event(e) => host.publish(clock.now(), e),
            }
        }
        host.drained(&machine);
        if machine.is_closed() {
            break;
        }
        probe.set_waiting(machine.awaits_etcd());
        let silences = machine.silences();
        if silences != last_silences {
            last_silences = silences;
            probe.silence();
        }
        let deadline = machine.poll_timeout().map(|d| clock.to_runtime(d));
        let room = host.room();
        let input = tokio::select! {
            biased;
            Some(c) = done.recv() => {
                exec.arrived(&c);
                M::Input::from(c)
            }
            request = requests.recv() => match request {
                Some(r) => {
                    host.request(clock.now(), &mut machine, r);
                    continue;
                }
                None => {
                    host.orphaned(&machine);
                    break;
                }
            },
            () = host.deliver() => continue,
            sent = probe.returned() => M::returned_input(clock.of_runtime(sent)),
            c = exec.next_watch(), if room => {
                exec.arrived(&c);
                M::Input::from(c)
            }
            // While the streams are not read (the consumer is behind), their
            // silence proves nothing: the machine's timers (an unanswered
            // progress probe) wait until they are read again, and the first
            // message then read proves the stream alive.
            () = sleep_until(deadline), if room => {
                if woke_late(deadline) {
                    // This process was not running (a GC pause, SIGSTOP):
                    // answers that arrived meanwhile are taken first (a
                    // deadline that passed while they could not be read
                    // proves nothing about etcd), then the timeout, once.
                    tokio::time::sleep(CATCH_UP).await;
                    while let Ok(c) = done.try_recv() {
                        exec.arrived(&c);
                        if let Err(e) = machine.handle(clock.now(), M::Input::from(c)) {
                            warn!(error = ?e, "input refused");
                        }
                    }
                }
                M::timeout_input()
            }
        };
        if let Err(e) = machine.handle(clock.now(), input) {
            warn!(error = ?e, "input refused");
        }
    }
    exec.abort_all();
    host.ended(&machine);
}
