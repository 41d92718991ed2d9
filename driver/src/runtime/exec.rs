//! The one executor of the core's etcd commands: each request runs on a
//! task of its own tagged with its `OpId`, each stream is owned by a task
//! (a keep-alive stream's reader forwards every reply at once), a watch
//! stream's messages are read by the run loop itself, and every answer
//! comes back as a [`Completion`].

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

use coord_core::io::{Command, Completion};
use coord_core::{Failure, LeaseId, OpId, Revision};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::etcd::{
    outcome, EtcdApi, KeepAliveReplies, KeepAliveSender, WatchControl, WatchEvents, WatchMessage,
};

/// In-flight request or stream tasks, by the op that started them.
#[derive(Debug, Default)]
struct Tasks(BTreeMap<OpId, JoinHandle<()>>);

impl Tasks {
    /// Runs `task` in the background as `op`.
    fn spawn<F>(&mut self, op: OpId, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let span = tracing::debug_span!("op", op = op.0);
        self.0.insert(
            op,
            tokio::spawn(tracing::Instrument::instrument(task, span)),
        );
    }

    /// `op` finished by itself: forget it.
    fn finished(&mut self, op: OpId) {
        self.0.remove(&op);
    }

    /// Stops `op` (dropping its request or stream).
    fn abort(&mut self, op: OpId) {
        if let Some(task) = self.0.remove(&op) {
            task.abort();
        }
    }

    /// Stops everything.
    fn abort_all(&mut self) {
        for (_, task) in std::mem::take(&mut self.0) {
            task.abort();
        }
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        self.abort_all();
    }
}

/// A task that is aborted when this guard is dropped.
#[derive(Debug)]
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs a stream's reading loop in a task of its own, for as long as the
/// returned guard lives. Reads are never cancelled half-way (as a `select!`
/// against other work would do), so no `EtcdApi` needs cancel-safe reads.
fn spawn_reader<F>(reader: F) -> AbortOnDrop
where
    F: Future<Output = ()> + Send + 'static,
{
    AbortOnDrop(tokio::spawn(tracing::Instrument::in_current_span(reader)))
}

/// Sleeps until `deadline`, or forever if there is none.
pub(crate) async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// What the run loop asks of a watch stream's task.
enum Control {
    Progress,
    Cancel,
}

/// What one read of a watch stream found.
enum Read<S> {
    /// A message, and the stream to read on.
    Message(S, WatchMessage),
    /// The stream failed or ended.
    Ended(Failure),
    /// The stream never opened (its task reported why).
    Gone,
}

/// A watch stream's pending read. It lives until it completes (or the
/// stream is dropped), whatever the run loop does meanwhile, so no
/// `EtcdApi` needs cancel-safe reads.
type Reading<S> = Pin<Box<dyn Future<Output = Read<S>> + Send>>;

fn read_next<S: WatchEvents>(mut stream: S) -> Reading<S> {
    Box::pin(async move {
        match stream.next().await {
            Some(Ok(m)) => Read::Message(stream, m),
            Some(Err(e)) => Read::Ended(e.into_failure()),
            None => Read::Ended(Failure::StreamClosed("watch stream ended".into())),
        }
    })
}

/// The first read: once the stream's task has opened it.
fn read_first<S: WatchEvents>(opened: oneshot::Receiver<S>) -> Reading<S> {
    Box::pin(async move {
        match opened.await {
            Ok(stream) => read_next(stream).await,
            Err(_) => Read::Gone,
        }
    })
}

/// The watch streams whose pending read was woken since it was last
/// polled, in the order they were woken, and the run loop to wake for
/// them: a look for a message polls only those, so a loop reading
/// thousands of mostly quiet streams (a pool of many names) pays for the
/// streams that have something, not for all. In wake order, a stream that
/// just delivered (and is due a poll of its next read) comes after the
/// others that were woken meanwhile: a busy stream cannot starve them.
#[derive(Default)]
struct Woken {
    ops: Mutex<Vec<OpId>>,
    run_loop: Mutex<Option<Waker>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The waker of one stream's reads: marks the stream woken (once until
/// its next poll), then wakes the run loop.
struct ReadWaker {
    op: OpId,
    /// Whether the stream is in the woken list (due a poll).
    marked: AtomicBool,
    woken: Arc<Woken>,
}

impl ReadWaker {
    /// Puts the stream in the woken list, unless it is there already.
    fn mark(&self) {
        if !self.marked.swap(true, Ordering::AcqRel) {
            lock(&self.woken.ops).push(self.op);
        }
    }
}

impl Wake for ReadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.mark();
        if let Some(run_loop) = lock(&self.woken.run_loop).as_ref() {
            run_loop.wake_by_ref();
        }
    }
}

/// An open watch stream's pending read, and the waker its reads are
/// polled with (one per stream, for all its reads).
struct Reader<S> {
    reading: Reading<S>,
    handle: Arc<ReadWaker>,
    waker: Waker,
}

/// Executes commands against `A`. Completions (and keep-alive replies, and
/// stream ends) go to one unbounded channel; watch messages are read by the
/// run loop through [`next_watch`](Self::next_watch), so a run loop that
/// stops asking stops the streams from being read (backpressure through
/// HTTP/2 flow control), and a message reaches the machine with no hop
/// between tasks.
pub(crate) struct Executor<A: EtcdApi> {
    api: A,
    done: mpsc::UnboundedSender<Completion>,
    requests: Tasks,
    streams: Tasks,
    keep_alives: BTreeMap<OpId, mpsc::UnboundedSender<()>>,
    /// The oldest unanswered keep-alive send per stream (for the round
    /// trip metric).
    unanswered: BTreeMap<OpId, tokio::time::Instant>,
    watches: BTreeMap<OpId, mpsc::UnboundedSender<Control>>,
    /// Each open watch stream's pending read.
    readers: BTreeMap<OpId, Reader<A::WatchEvents>>,
    /// The reads woken since they were last polled.
    woken: Arc<Woken>,
    /// The woken list being polled (kept to reuse its allocation).
    polling: Vec<OpId>,
}

impl<A: EtcdApi> Executor<A> {
    pub(crate) fn new(api: A, done: mpsc::UnboundedSender<Completion>) -> Self {
        Executor {
            api,
            done,
            requests: Tasks::default(),
            streams: Tasks::default(),
            keep_alives: BTreeMap::new(),
            unanswered: BTreeMap::new(),
            watches: BTreeMap::new(),
            readers: BTreeMap::new(),
            woken: Arc::default(),
            polling: Vec::new(),
        }
    }

    /// The client commands go to.
    pub(crate) fn api(&self) -> &A {
        &self.api
    }

    /// The next message (or end) of any open watch stream, as the
    /// machine's completion. Pending while no stream has one.
    pub(crate) async fn next_watch(&mut self) -> Completion {
        std::future::poll_fn(|cx| self.poll_watch(cx)).await
    }

    /// A watch stream's message (or end) that is ready now, without
    /// waiting.
    pub(crate) async fn ready_watch(&mut self) -> Option<Completion> {
        std::future::poll_fn(|cx| match self.poll_watch(cx) {
            Poll::Ready(c) => Poll::Ready(Some(c)),
            Poll::Pending => Poll::Ready(None),
        })
        .await
    }

    /// How many watch streams are open (or opening).
    pub(crate) fn watch_streams(&self) -> usize {
        self.readers.len()
    }

    /// Starts reading `op` with `reading` (polled at the next look).
    fn read(&mut self, op: OpId, reading: Reading<A::WatchEvents>) {
        let handle = Arc::new(ReadWaker {
            op,
            marked: AtomicBool::new(false),
            woken: Arc::clone(&self.woken),
        });
        handle.mark();
        let waker = Waker::from(Arc::clone(&handle));
        self.readers.insert(
            op,
            Reader {
                reading,
                handle,
                waker,
            },
        );
    }

    /// Polls the reads woken since their last poll, in the order they were
    /// woken, until one has a message or an end; those not reached stay
    /// first in line for the next look.
    fn poll_watch(&mut self, cx: &mut Context<'_>) -> Poll<Completion> {
        {
            let mut run_loop = lock(&self.woken.run_loop);
            if !run_loop.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *run_loop = Some(cx.waker().clone());
            }
        }
        let mut order = std::mem::take(&mut self.polling);
        std::mem::swap(&mut order, &mut *lock(&self.woken.ops));
        let mut at = 0;
        let found = loop {
            let Some(&op) = order.get(at) else {
                break None;
            };
            at += 1;
            let Some(reader) = self.readers.get_mut(&op) else {
                continue;
            };
            // Woken from here on is woken again.
            reader.handle.marked.store(false, Ordering::Release);
            let mut own = Context::from_waker(&reader.waker);
            let Poll::Ready(read) = reader.reading.as_mut().poll(&mut own) else {
                continue;
            };
            match read {
                Read::Message(stream, m) => {
                    reader.reading = read_next(stream);
                    reader.handle.mark();
                    break Some(Completion::WatchMessage {
                        stream: op,
                        kind: m.kind,
                        events: m.events,
                        revision: m.revision,
                        cluster: m.cluster,
                    });
                }
                Read::Ended(failure) => {
                    self.readers.remove(&op);
                    break Some(Completion::WatchClosed {
                        stream: op,
                        failure,
                    });
                }
                Read::Gone => {
                    self.readers.remove(&op);
                }
            }
        };
        // Woken but not reached this time: first at the next look, before
        // the streams woken since.
        if at < order.len() {
            let mut woken = lock(&self.woken.ops);
            woken.splice(0..0, order.drain(at..));
        }
        order.clear();
        self.polling = order;
        match found {
            Some(c) => Poll::Ready(c),
            None => Poll::Pending,
        }
    }

    /// Bookkeeping for a completion about to be handed to the machine: a
    /// request or stream that ended by itself is forgotten.
    pub(crate) fn arrived(&mut self, c: &Completion) {
        match c {
            Completion::Granted { op, .. }
            | Completion::Revoked { op, .. }
            | Completion::Listed { op, .. }
            | Completion::Txn { op, .. } => self.requests.finished(*op),
            Completion::KeepAliveClosed { stream, .. } => {
                self.streams.finished(*stream);
                self.keep_alives.remove(stream);
                self.unanswered.remove(stream);
            }
            Completion::WatchClosed { stream, .. } => {
                self.streams.finished(*stream);
                self.watches.remove(stream);
                self.readers.remove(stream);
            }
            Completion::KeepAliveReply { stream, ttl_secs } => {
                tracing::trace!(stream = stream.0, ttl_secs, "keep-alive reply");
                if let Some(sent) = self.unanswered.remove(stream) {
                    crate::telemetry::keepalive_rtt(sent.elapsed());
                }
            }
            Completion::WatchMessage { .. } => {}
        }
    }

    pub(crate) fn execute(&mut self, command: Command) {
        match command {
            Command::Grant { op, ttl_secs } => {
                let api = self.api.clone();
                self.request(op, async move {
                    let outcome = outcome(api.lease_grant(ttl_secs).await);
                    Completion::Granted { op, outcome }
                });
            }
            Command::Revoke { op, lease } => {
                let api = self.api.clone();
                self.request(op, async move {
                    let outcome = outcome(api.lease_revoke(lease).await);
                    Completion::Revoked { op, outcome }
                });
            }
            Command::Range { op, request } => {
                let api = self.api.clone();
                self.request(op, async move {
                    let outcome = outcome(api.range(request).await);
                    Completion::Listed { op, outcome }
                });
            }
            Command::Txn { op, txn } => {
                let api = self.api.clone();
                self.request(op, async move {
                    let outcome = outcome(api.txn(txn).await);
                    Completion::Txn { op, outcome }
                });
            }
            Command::OpenKeepAlive { op, lease } => {
                let (sends, sends_rx) = mpsc::unbounded_channel();
                let task =
                    keep_alive_stream(self.api.clone(), op, lease, self.done.clone(), sends_rx);
                self.streams.spawn(op, task);
                self.keep_alives.insert(op, sends);
            }
            Command::SendKeepAlive { stream, .. } => {
                if let Some(sends) = self.keep_alives.get(&stream) {
                    tracing::trace!(stream = stream.0, "keep-alive sent");
                    let _ = sends.send(());
                    self.unanswered
                        .entry(stream)
                        .or_insert_with(tokio::time::Instant::now);
                }
            }
            Command::CloseKeepAlive { stream } => {
                self.streams.abort(stream);
                self.keep_alives.remove(&stream);
                self.unanswered.remove(&stream);
            }
            Command::Watch {
                op,
                key,
                prefix,
                start_revision,
            } => {
                let (control, control_rx) = mpsc::unbounded_channel();
                self.watches.insert(op, control);
                let (opened, opened_rx) = oneshot::channel();
                self.read(op, read_first(opened_rx));
                let stream = WatchStream {
                    op,
                    key: key.0,
                    prefix,
                    start: start_revision,
                };
                let task = stream.run(self.api.clone(), self.done.clone(), opened, control_rx);
                self.streams.spawn(op, task);
            }
            Command::RequestProgress { stream } => {
                if let Some(control) = self.watches.get(&stream) {
                    let _ = control.send(Control::Progress);
                }
            }
            Command::CancelWatch { stream } => {
                // Nothing more is read from it.
                self.readers.remove(&stream);
                match self.watches.remove(&stream) {
                    // The task cancels the watch on the server and ends.
                    Some(control) if control.send(Control::Cancel).is_ok() => {
                        self.streams.finished(stream);
                    }
                    _ => self.streams.abort(stream),
                }
            }
            Command::Abandon { op } => self.requests.abort(op),
        }
    }

    fn request<F>(&mut self, op: OpId, request: F)
    where
        F: Future<Output = Completion> + Send + 'static,
    {
        let done = self.done.clone();
        self.requests.spawn(op, async move {
            let _ = done.send(request.await);
        });
    }
}

/// Owns one keep-alive stream: opens it, sends a keep-alive whenever the
/// run loop asks, and (in a reader task of its own) forwards every reply at
/// once, so replies are always drained whatever the user does.
async fn keep_alive_stream<A: EtcdApi>(
    api: A,
    op: OpId,
    lease: LeaseId,
    done: mpsc::UnboundedSender<Completion>,
    mut sends: mpsc::UnboundedReceiver<()>,
) {
    let closed = move |done: &mpsc::UnboundedSender<Completion>, failure: Failure| {
        let _ = done.send(Completion::KeepAliveClosed {
            stream: op,
            failure,
        });
    };
    let (mut keeper, mut replies) = match api.lease_keep_alive(lease).await {
        Ok(pair) => pair,
        Err(e) => return closed(&done, e.into_failure()),
    };
    let reader_done = done.clone();
    let _reader = spawn_reader(async move {
        loop {
            match replies.next().await {
                Some(Ok(ttl_secs)) => {
                    let reply = Completion::KeepAliveReply {
                        stream: op,
                        ttl_secs,
                    };
                    if reader_done.send(reply).is_err() {
                        return;
                    }
                }
                Some(Err(e)) => return closed(&reader_done, e.into_failure()),
                None => {
                    let failure = Failure::StreamClosed("keep-alive stream ended".into());
                    return closed(&reader_done, failure);
                }
            }
        }
    });
    while let Some(()) = sends.recv().await {
        if let Err(e) = keeper.send().await {
            return closed(&done, e.into_failure());
        }
    }
}

/// One watch stream to open.
struct WatchStream {
    op: OpId,
    key: Vec<u8>,
    prefix: bool,
    start: Revision,
}

impl WatchStream {
    /// Owns the stream's request half: opens the stream, hands its
    /// response half to the run loop (which reads it when it has room:
    /// that is the backpressure), and sends progress requests and the
    /// cancel when asked.
    async fn run<A: EtcdApi>(
        self,
        api: A,
        done: mpsc::UnboundedSender<Completion>,
        opened: oneshot::Sender<A::WatchEvents>,
        mut control_rx: mpsc::UnboundedReceiver<Control>,
    ) {
        let op = self.op;
        let closed = move |done: &mpsc::UnboundedSender<Completion>, failure: Failure| {
            let _ = done.send(Completion::WatchClosed {
                stream: op,
                failure,
            });
        };
        let (mut control, stream) = match api.watch(self.key, self.prefix, self.start).await {
            Ok(pair) => pair,
            Err(e) => return closed(&done, e.into_failure()),
        };
        // Unwanted already (cancelled before it opened): the cancel is
        // in `control_rx`, and is sent below.
        let _ = opened.send(stream);
        while let Some(ask) = control_rx.recv().await {
            match ask {
                Control::Progress => {
                    if let Err(e) = control.request_progress().await {
                        return closed(&done, e.into_failure());
                    }
                }
                Control::Cancel => {
                    control.cancel().await;
                    return;
                }
            }
        }
    }
}
