//! `HostLiveness`: registers a host under a TTL lease and keeps it there.
//!
//! A background task runs the core [`Liveness`] machine: it executes the
//! machine's commands against etcd (each request on its own task, tagged
//! with its `OpId`), always drains keep-alive replies, and sleeps until the
//! machine's next deadline. Only this task reads the clock.

use std::collections::BTreeMap;
use std::time::Duration;

use coord_core::liveness::{
    Command, Event, Input, Liveness, LivenessConfig, LivenessState, Output, Reply, RevokeOutcome,
    StartPolicy,
};
use coord_core::{BackoffConfig, Failure, Key, LeaseId, OpId, Outcome};
use serde::Serialize;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tracing::{debug, info, warn};

use crate::api::{outcome, EtcdApi, KeepAliveReplies, KeepAliveSender};
use crate::clock::Clock;
use crate::error::Error;
use crate::exec::{map_outcome, sleep_until, spawn_reader, Tasks};
use crate::metadata::{validate_host_id, HostMetadata, MAX_METADATA_LEN};

/// go-coord's default key prefix for hosts.
pub const DEFAULT_PREFIX: &str = "/coord/hosts/";

/// Options of [`HostLiveness::register`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LivenessOptions {
    /// Key prefix; the host's key is `<prefix><host id>`. Default
    /// `/coord/hosts/`.
    pub prefix: String,
    /// Lease TTL, 1 s to 1 day, asked in whole seconds (rounded up). etcd
    /// may grant more (its minimum). Default 10 s.
    pub ttl: Duration,
    /// Keep-alive interval, at least 10 ms and below the TTL. Default TTL/3.
    pub refresh: Option<Duration>,
    /// Deadline of each etcd request. Default 5 s.
    pub request_timeout: Duration,
    /// Pacing of heal attempts. Default 100 ms doubling to 30 s, and at
    /// most 1 s between attempts while etcd refuses at once.
    pub backoff: BackoffConfig,
    /// Seed of the backoff jitter. Default: derived from the host id and
    /// the start time, so a fleet's hosts jitter differently.
    pub seed: Option<u64>,
    /// When true, a failing first registration is retried in the
    /// background (like after a loss) and `register` returns at once with
    /// the handle. Default false: `register` fails fast.
    pub retry_first_registration: bool,
}

impl Default for LivenessOptions {
    fn default() -> Self {
        LivenessOptions {
            prefix: DEFAULT_PREFIX.to_string(),
            ttl: Duration::from_secs(10),
            refresh: None,
            request_timeout: Duration::from_secs(5),
            backoff: BackoffConfig::default(),
            seed: None,
            retry_first_registration: false,
        }
    }
}

/// The liveness of a registered host, as [`HostLiveness::state`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LivenessStatus {
    /// The first registration is in flight.
    Registering,
    /// The key exists, attached to this lease, kept alive.
    Registered {
        /// The live lease.
        lease: LeaseId,
    },
    /// The registration was lost; re-registering with backoff.
    Healing {
        /// Failed attempts since the last success.
        attempt: u32,
    },
    /// `stop` is revoking the lease.
    Stopping,
    /// Stopped by `stop` or by a failed first registration.
    Stopped {
        /// What happened to the lease.
        revoke: RevokeOutcome,
    },
    /// The background task ended without a stop (the handle was dropped):
    /// the lease is left to expire.
    Abandoned,
}

enum Request {
    Stop,
}

enum Msg {
    Completed { op: OpId, outcome: Outcome<Reply> },
    Reply { stream: OpId, ttl_secs: i64 },
    Closed { stream: OpId, failure: Failure },
}

/// A registered host. Dropping it without [`stop`](Self::stop) ends the
/// keep-alive and leaves the lease to expire (an ungraceful stop: the key
/// disappears within one TTL).
#[derive(Debug)]
pub struct HostLiveness {
    key: String,
    requests: mpsc::UnboundedSender<Request>,
    status: watch::Receiver<LivenessStatus>,
    events: broadcast::Sender<Event>,
}

impl HostLiveness {
    /// Registers `meta` at `<prefix><meta.host_uuid>` under a new lease and
    /// keeps it alive in the background.
    ///
    /// Fails fast, writing nothing, on an invalid host id, options or
    /// oversized metadata. Unless `retry_first_registration` is set, a
    /// grant, put or keep-alive failure of the first registration returns
    /// an error after revoking any lease it granted. `started_at_unix_ns`
    /// is set to now when 0.
    pub async fn register<A: EtcdApi>(
        client: A,
        mut meta: HostMetadata,
        opts: LivenessOptions,
    ) -> Result<HostLiveness, Error> {
        if meta.started_at_unix_ns == 0 {
            meta.started_at_unix_ns = unix_now_ns();
        }
        let host_id = meta.host_uuid.clone();
        Self::register_with(client, &host_id, &meta, opts).await
    }

    /// Like [`register`](Self::register) with metadata of the caller's own
    /// type, serialised as JSON, at `<prefix><host_id>`.
    pub async fn register_with<A: EtcdApi, M: Serialize + ?Sized>(
        client: A,
        host_id: &str,
        meta: &M,
        opts: LivenessOptions,
    ) -> Result<HostLiveness, Error> {
        validate_host_id(host_id)?;
        if opts.prefix.is_empty() || opts.prefix.chars().any(char::is_control) {
            return Err(Error::InvalidPrefix(opts.prefix));
        }
        let value = serde_json::to_vec(meta).map_err(|e| Error::Encode(e.to_string()))?;
        if value.len() > MAX_METADATA_LEN {
            return Err(Error::MetadataTooLarge {
                size: value.len(),
                max: MAX_METADATA_LEN,
            });
        }
        let key = format!("{}{}", opts.prefix, host_id);
        let config = LivenessConfig {
            key: Key(key.clone().into_bytes()),
            value,
            ttl: opts.ttl,
            refresh: opts.refresh.unwrap_or(opts.ttl / 3),
            request_timeout: opts.request_timeout,
            backoff: opts.backoff,
            seed: opts.seed.unwrap_or_else(|| default_seed(host_id)),
            start: if opts.retry_first_registration {
                StartPolicy::Retry
            } else {
                StartPolicy::FailFast
            },
        };
        let machine = Liveness::new(config)?;
        let (requests, requests_rx) = mpsc::unbounded_channel();
        let (status_tx, status) = watch::channel(LivenessStatus::Registering);
        let (events, _) = broadcast::channel(64);
        let (ready_tx, ready_rx) = oneshot::channel();
        let runner = Runner::new(client, machine, status_tx, events.clone(), ready_tx);
        tokio::spawn(runner.run(requests_rx));
        let handle = HostLiveness {
            key,
            requests,
            status,
            events,
        };
        if opts.retry_first_registration {
            return Ok(handle);
        }
        match ready_rx.await {
            Ok(Ok(lease)) => {
                info!(key = %handle.key, %lease, "registered");
                Ok(handle)
            }
            Ok(Err(err)) => Err(err),
            Err(_) => Err(Error::TaskGone),
        }
    }

    /// Stops: revokes the lease (the key is gone at once) and ends the
    /// background task. Idempotent: later calls return the first outcome.
    /// Returns `RevokeNotConfirmed` if etcd could not confirm the revoke
    /// within the request timeout; the key then expires within one TTL.
    pub async fn stop(&self) -> Result<(), Error> {
        let _ = self.requests.send(Request::Stop);
        let mut status = self.status.clone();
        let done = status
            .wait_for(|s| {
                matches!(
                    s,
                    LivenessStatus::Stopped { .. } | LivenessStatus::Abandoned
                )
            })
            .await
            .map(|s| s.clone());
        match done {
            Ok(LivenessStatus::Stopped {
                revoke: RevokeOutcome::NotConfirmed(lease),
            }) => Err(Error::RevokeNotConfirmed { lease }),
            Ok(LivenessStatus::Stopped { .. }) => Ok(()),
            _ => Err(Error::TaskGone),
        }
    }

    /// The lease the key is attached to while registered; `None` while
    /// registering, healing or stopped. After a heal onto a new lease it
    /// names the new lease.
    pub fn lease_id(&self) -> Option<LeaseId> {
        match &*self.status.borrow() {
            LivenessStatus::Registered { lease } => Some(*lease),
            _ => None,
        }
    }

    /// The host's key, `<prefix><host id>`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// A receiver of the liveness state; it changes on every transition.
    pub fn state(&self) -> watch::Receiver<LivenessStatus> {
        self.status.clone()
    }

    /// A receiver of every liveness event from now on (lost, healing,
    /// reregistered, ...). A receiver that falls 64 events behind skips
    /// the oldest (`RecvError::Lagged`); the state above is never lost.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }
}

fn unix_now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// FNV-1a of the host id mixed with the start time: distinct per host and
/// per run, so a fleet restarted together still jitters apart.
pub(crate) fn default_seed(host_id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in host_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^ unix_now_ns().unsigned_abs()
}

type Ready = oneshot::Sender<Result<LeaseId, Error>>;

struct Runner<A: EtcdApi> {
    api: A,
    machine: Liveness,
    clock: Clock,
    status: watch::Sender<LivenessStatus>,
    events: broadcast::Sender<Event>,
    ready: Option<Ready>,
    first_failure: Option<Error>,
    tx: mpsc::UnboundedSender<Msg>,
    rx: mpsc::UnboundedReceiver<Msg>,
    requests: Tasks,
    streams: Tasks,
    sends: BTreeMap<OpId, mpsc::UnboundedSender<()>>,
}

impl<A: EtcdApi> Runner<A> {
    fn new(
        api: A,
        machine: Liveness,
        status: watch::Sender<LivenessStatus>,
        events: broadcast::Sender<Event>,
        ready: Ready,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Runner {
            api,
            machine,
            clock: Clock::start(),
            status,
            events,
            ready: Some(ready),
            first_failure: None,
            tx,
            rx,
            requests: Tasks::default(),
            streams: Tasks::default(),
            sends: BTreeMap::new(),
        }
    }

    async fn run(mut self, mut user: mpsc::UnboundedReceiver<Request>) {
        let now = self.clock.now();
        if let Err(e) = self.machine.handle(now, Input::Start) {
            warn!(error = %e, "liveness refused to start");
        }
        loop {
            self.drain();
            if self.machine.is_stopped() {
                break;
            }
            let deadline = self
                .machine
                .poll_timeout()
                .map(|d| self.clock.to_runtime(d));
            let input = tokio::select! {
                biased;
                Some(msg) = self.rx.recv() => match msg {
                                        Msg::Completed { op, outcome } => {
                        self.requests.finished(op);
                        Input::Completed { op, outcome }
                    }
                    Msg::Reply { stream, ttl_secs } => Input::KeepAliveReply { stream, ttl_secs },
                    Msg::Closed { stream, failure } => {
                        self.streams.finished(stream);
                        self.sends.remove(&stream);
                        Input::KeepAliveClosed { stream, failure }
                    }
                },
                req = user.recv() => match req {
                    Some(Request::Stop) => Input::Stop,
                    None => {
                        // Every handle is gone: an ungraceful stop.
                        debug!("liveness handle dropped; leaving the lease to expire");
                        self.status.send_replace(LivenessStatus::Abandoned);
                        break;
                    }
                },
                () = sleep_until(deadline) => Input::Timeout,
            };
            let now = self.clock.now();
            if let Err(e) = self.machine.handle(now, input) {
                warn!(error = %e, "liveness input refused");
            }
        }
        self.requests.abort_all();
        self.streams.abort_all();
    }

    fn drain(&mut self) {
        while let Some(output) = self.machine.poll() {
            match output {
                Output::Command(c) => self.execute(c),
                Output::Event(e) => self.publish(e),
            }
        }
        let status = match self.machine.state() {
            LivenessState::Registering => LivenessStatus::Registering,
            LivenessState::Registered { lease } => LivenessStatus::Registered { lease },
            LivenessState::Healing { attempt } => LivenessStatus::Healing { attempt },
            LivenessState::Stopping => LivenessStatus::Stopping,
            // Set by the Stopped event, which carries the outcome.
            LivenessState::Stopped => return,
        };
        let registered = match status {
            LivenessStatus::Registered { lease } => Some(lease),
            _ => None,
        };
        self.status.send_if_modified(|s| {
            let changed = *s != status;
            *s = status;
            changed
        });
        // Only once the state says so, so `register` never returns a handle
        // whose `lease_id()` is still `None`.
        if let Some(lease) = registered {
            if let Some(ready) = self.ready.take() {
                let _ = ready.send(Ok(lease));
            }
        }
    }

    fn publish(&mut self, event: Event) {
        match &event {
            Event::Registered { lease, ttl } => info!(%lease, ?ttl, "host registered"),
            Event::Lost { lease, reason } => warn!(%lease, %reason, "host registration lost"),
            Event::KeepAliveInterrupted { lease, failure } => {
                info!(%lease, %failure, "keep-alive stream interrupted; reopening")
            }
            Event::Healing {
                attempt,
                last_failure,
                ..
            } => debug!(attempt, ?last_failure, "healing"),
            Event::Reregistered { lease, resumed } => info!(%lease, resumed, "host re-registered"),
            Event::RegistrationFailed { reason } => {
                warn!(%reason, "first registration failed");
                self.first_failure = Some(Error::from_first_attempt(reason.clone()));
            }
            Event::Stopped { revoke } => {
                info!(?revoke, "liveness stopped");
                if let Some(ready) = self.ready.take() {
                    let err = self.first_failure.take().unwrap_or(Error::TaskGone);
                    let _ = ready.send(Err(err));
                }
                self.status.send_replace(LivenessStatus::Stopped {
                    revoke: revoke.clone(),
                });
            }
        }
        let _ = self.events.send(event);
    }

    fn execute(&mut self, command: Command) {
        match command {
            Command::Grant { op, ttl_secs } => {
                let api = self.api.clone();
                self.spawn_request(op, async move {
                    map_outcome(outcome(api.lease_grant(ttl_secs).await), |g| {
                        Reply::Granted {
                            lease: g.lease,
                            ttl_secs: g.ttl_secs,
                        }
                    })
                });
            }
            Command::PutKey {
                op,
                key,
                value,
                lease,
            } => {
                let api = self.api.clone();
                self.spawn_request(op, async move {
                    map_outcome(
                        outcome(api.put_if_changed(key.0, value, lease).await),
                        |()| Reply::Done,
                    )
                });
            }
            Command::Revoke { op, lease } => {
                let api = self.api.clone();
                self.spawn_request(op, async move {
                    map_outcome(outcome(api.lease_revoke(lease).await), |()| Reply::Done)
                });
            }
            Command::OpenKeepAlive { op, lease } => {
                let (sends, sends_rx) = mpsc::unbounded_channel();
                let task =
                    keep_alive_stream(self.api.clone(), op, lease, self.tx.clone(), sends_rx);
                self.streams.spawn(op, task);
                self.sends.insert(op, sends);
            }
            Command::SendKeepAlive { stream, .. } => {
                if let Some(sends) = self.sends.get(&stream) {
                    let _ = sends.send(());
                }
            }
            Command::CloseKeepAlive { stream } => {
                self.streams.abort(stream);
                self.sends.remove(&stream);
            }
            Command::Abandon { op } => self.requests.abort(op),
        }
    }

    fn spawn_request<F>(&mut self, op: OpId, request: F)
    where
        F: std::future::Future<Output = Outcome<Reply>> + Send + 'static,
    {
        let tx = self.tx.clone();
        self.requests.spawn(op, async move {
            let outcome = request.await;
            let _ = tx.send(Msg::Completed { op, outcome });
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
    tx: mpsc::UnboundedSender<Msg>,
    mut sends: mpsc::UnboundedReceiver<()>,
) {
    let closed = move |tx: &mpsc::UnboundedSender<Msg>, failure: Failure| {
        let _ = tx.send(Msg::Closed {
            stream: op,
            failure,
        });
    };
    let (mut keeper, mut replies) = match api.lease_keep_alive(lease).await {
        Ok(pair) => pair,
        Err(e) => return closed(&tx, e.into_failure()),
    };
    let reader_tx = tx.clone();
    let _reader = spawn_reader(async move {
        loop {
            match replies.next().await {
                Some(Ok(ttl_secs)) => {
                    if reader_tx
                        .send(Msg::Reply {
                            stream: op,
                            ttl_secs,
                        })
                        .is_err()
                    {
                        return;
                    }
                }
                Some(Err(e)) => return closed(&reader_tx, e.into_failure()),
                None => {
                    let failure = Failure::StreamClosed("keep-alive stream ended".into());
                    return closed(&reader_tx, failure);
                }
            }
        }
    });
    while let Some(()) = sends.recv().await {
        if let Err(e) = keeper.send().await {
            return closed(&tx, e.into_failure());
        }
    }
}
