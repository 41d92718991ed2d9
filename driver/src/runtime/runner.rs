//! The one run loop every handle uses: feed the machine its inputs, execute
//! its commands, hand its events to the handle's [`Adapter`], and sleep until
//! its next deadline. Only this loop reads the clock.

use std::future::Future;
use std::time::Duration;

use coord_core::io::Completion;
use coord_core::outbox::Output;
use coord_core::{Instant, Machine};
use tokio::sync::mpsc;
use tracing::warn;

use crate::etcd::EtcdApi;
use crate::etcd::News;
use crate::runtime::clock::Clock;
use crate::runtime::exec::{sleep_until, Executor};
use crate::runtime::probe;

/// What a handle adds to the run loop: how user requests reach the machine,
/// where its events go, and (for a watcher) backpressure.
pub(crate) trait Adapter<M: Machine>: Send + 'static {
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

    /// False while the adapter cannot take more watch messages: the streams
    /// are then not read.
    fn room(&self) -> bool {
        true
    }

    /// Completes when the adapter delivered something to its user (a watcher
    /// handing an event to a slow consumer); never, by default.
    fn deliver(&mut self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
}

/// A timer that fires this late was held up by the process itself, not
/// by etcd.
const LATE: Duration = Duration::from_secs(1);

/// How long a late wake (or a deadline that came while the streams were
/// not read) lets answers that arrived meanwhile be read.
const CATCH_UP: Duration = Duration::from_millis(20);

/// Whether the timer for `deadline` fired [`LATE`] or more after it.
fn woke_late(deadline: Option<tokio::time::Instant>) -> bool {
    deadline.is_some_and(|at| tokio::time::Instant::now().saturating_duration_since(at) >= LATE)
}

/// The loop lets other tasks run at least once every this many turns.
const YIELD_EVERY: u32 = 64;

/// Whether `deadline` has come.
fn is_due(deadline: Option<tokio::time::Instant>) -> bool {
    deadline.is_some_and(|at| tokio::time::Instant::now() >= at)
}

/// Feeds the machine every completion that has already arrived, and at
/// most one message per watch stream that is ready to be read (a stream
/// that never stops cannot keep the loop here).
async fn catch_up<A: EtcdApi, M: Machine>(
    clock: &Clock,
    machine: &mut M,
    exec: &mut Executor<A>,
    done: &mut mpsc::UnboundedReceiver<Completion>,
) {
    while let Ok(c) = done.try_recv() {
        exec.arrived(&c);
        feed(clock, machine, M::Input::from(c));
    }
    for _ in 0..exec.watch_streams() {
        let Some(c) = exec.ready_watch().await else {
            break;
        };
        exec.arrived(&c);
        feed(clock, machine, M::Input::from(c));
    }
}

/// Feeds the machine one input, logging a refusal.
fn feed<M: Machine>(clock: &Clock, machine: &mut M, input: M::Input) {
    if let Err(e) = machine.handle(clock.now(), input) {
        warn!(error = ?e, "input refused");
    }
}

/// Hands the machine's commands to the executor and its events to the
/// adapter, then tells the adapter the outputs are drained.
fn drain<A: EtcdApi, M: Machine, H: Adapter<M>>(
    clock: &Clock,
    machine: &mut M,
    exec: &mut Executor<A>,
    adapter: &mut H,
) {
    while let Some(output) = machine.poll() {
        match output {
            Output::Command(c) => exec.execute(c),
            Output::Event(e) => adapter.publish(clock.now(), e),
        }
    }
    adapter.drained(machine);
}

/// For [`CATCH_UP`], reads every completion and watch message as it
/// becomes readable (watch messages while the adapter has room), then stops,
/// however much is still coming. The answers that arrived while this
/// process was not running, or while its streams were not read, are read
/// before a deadline is judged, even when reading one takes a turn of the
/// runtime (a stream polled for the first time since).
async fn read_for_a_while<A: EtcdApi, M: Machine, H: Adapter<M>>(
    clock: &Clock,
    machine: &mut M,
    exec: &mut Executor<A>,
    adapter: &mut H,
    done: &mut mpsc::UnboundedReceiver<Completion>,
) {
    let end = tokio::time::Instant::now() + CATCH_UP;
    while tokio::time::Instant::now() < end && !machine.is_closed() {
        let room = adapter.room();
        let c = tokio::select! {
            biased;
            Some(c) = done.recv() => c,
            c = exec.next_watch(), if room => c,
            () = tokio::time::sleep_until(end) => break,
        };
        exec.arrived(&c);
        feed(clock, machine, M::Input::from(c));
        drain(clock, machine, exec, adapter);
    }
}

/// Runs `machine` against `api` until it closes or every sender of
/// `requests` is gone.
pub(crate) async fn run<A, M, H>(
    api: A,
    mut machine: M,
    mut adapter: H,
    clock: Clock,
    mut requests: mpsc::UnboundedReceiver<H::Request>,
) where
    A: EtcdApi,
    M: Machine + Send,
    H: Adapter<M>,
{
    let (done_tx, mut done) = mpsc::unbounded_channel::<Completion>();
    // Probing for etcd's return while the machine backs off: shared with
    // the client's other handles when the client has a hub.
    let hub = api.probe_hub().unwrap_or_default();
    probe::start(&hub, &api);
    let mut probe = hub.member();
    let mut last_silences = 0;
    let mut exec = Executor::new(api, done_tx);
    adapter.start(clock.now(), &mut machine);
    let mut turns: u32 = 0;
    // A deadline came while the streams were not read (the consumer was
    // behind): what arrived meanwhile is read before it is judged.
    let mut held = false;
    loop {
        turns = turns.wrapping_add(1);
        if turns.is_multiple_of(YIELD_EVERY) {
            // Input that never runs dry must not keep the tasks this loop
            // relies on (a keep-alive stream's) from running. tokio's own
            // budget does this too, but not every runtime has one.
            tokio::task::yield_now().await;
        }
        let silences = machine.silences();
        if silences != last_silences {
            // etcd went silent: before the machine's commands go out (a
            // stream reopened in place of the silent one), a client that
            // can moves to a member that answers, so that they do not go
            // to the silent member again.
            exec.api().silent().await;
        }
        drain(&clock, &mut machine, &mut exec, &mut adapter);
        if machine.is_closed() {
            break;
        }
        probe.set_waiting(machine.awaits_etcd());
        if silences != last_silences {
            last_silences = silences;
            probe.silence();
        }
        let deadline = machine.poll_timeout().map(|d| clock.to_runtime(d));
        let room = adapter.room();
        // While the streams are not read (the consumer is behind), their
        // silence proves nothing: the machine's timers (an unanswered
        // progress probe) wait until they are read again, and the first
        // message then read proves the stream alive.
        let due = is_due(deadline);
        held |= due && !room;
        if room && due {
            // A due deadline goes before any new input, so a busy loop
            // (a thousand campaigns, a flood of events) cannot hold up a
            // keep-alive. What already arrived goes first: an answer
            // waiting to be read proves etcd alive, whatever the clock
            // says.
            if woke_late(deadline) || std::mem::take(&mut held) {
                // This process was not running (a GC pause, SIGSTOP), or
                // its streams were not read: answers that arrived
                // meanwhile are read first.
                read_for_a_while(&clock, &mut machine, &mut exec, &mut adapter, &mut done).await;
            }
            catch_up(&clock, &mut machine, &mut exec, &mut done).await;
            feed(&clock, &mut machine, M::timeout_input());
            continue;
        }
        let input = tokio::select! {
            biased;
            Some(c) = done.recv() => {
                exec.arrived(&c);
                M::Input::from(c)
            }
            request = requests.recv() => match request {
                Some(r) => {
                    adapter.request(clock.now(), &mut machine, r);
                    continue;
                }
                None => {
                    adapter.orphaned(&machine);
                    break;
                }
            },
            () = adapter.deliver() => continue,
            news = probe.news() => match news {
                News::Silent => M::silent_input(),
                News::Returned(sent) => M::returned_input(clock.of_runtime(sent)),
            },
            c = exec.next_watch(), if room => {
                exec.arrived(&c);
                M::Input::from(c)
            }
            // Due: handled at the top of the loop.
            () = sleep_until(deadline), if room => continue,
        };
        feed(&clock, &mut machine, input);
    }
    // Every request and stream still running is stopped (dropping the
    // executor aborts its tasks) before the adapter hears the loop ended.
    drop(exec);
    adapter.ended(&machine);
}
