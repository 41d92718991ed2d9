//! `EtcdApi` over madsim's network to the simulated etcd server: what the
//! real driver runs on inside the simulator.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use coord::{
    EtcdApi, EtcdError, Granted, KeepAliveReplies, KeepAliveSender, LeaseId, WatchControl,
    WatchEvents, WatchMessage,
};
use coord_core::io::{Listing, MessageKind, RangeRequest, Txn, TxnResponse};
use coord_core::Revision;
use madsim::net::Endpoint;

use crate::etcd::wire::{Envelope, Reply, Request, StreamBody, StreamMessage, REQUEST_TAG};

/// What every simulated client of a run reports to the harness.
#[derive(Debug, Clone)]
pub struct ClientLog {
    /// Protocol anomalies: a message of the wrong type on a tag, which
    /// would mean the simulator itself mixed up messages.
    pub anomalies: Arc<AtomicU64>,
    /// When each lease grant or keep-alive open was sent (virtual ms since
    /// `start`): the load a fleet decides to put on etcd, before etcd's
    /// own queueing spreads it.
    pub heal_sends: Arc<Mutex<Vec<u64>>>,
    /// The run's start.
    pub start: madsim::time::Instant,
}

impl ClientLog {
    /// An empty log for a run started at `start`.
    pub fn new(start: madsim::time::Instant) -> Self {
        ClientLog {
            anomalies: Arc::default(),
            heal_sends: Arc::default(),
            start,
        }
    }

    fn heal_sent(&self) {
        let at = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.heal_sends
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(at);
    }
}

/// A client of the simulated etcd. Cheap to clone. Requests whose packets
/// are dropped (a partition) never complete; the driver's deadlines end
/// them, as with a blackholed real etcd.
#[derive(Clone)]
pub struct SimEtcd {
    ep: Endpoint,
    server: SocketAddr,
    client: u64,
    tags: Arc<AtomicU64>,
    log: ClientLog,
    /// One prober for every handle of this process, as `coord::connect`'s
    /// clients share one.
    probe: coord::ProbeHub,
}

impl std::fmt::Debug for SimEtcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimEtcd")
            .field("server", &self.server)
            .field("client", &self.client)
            .finish()
    }
}

impl SimEtcd {
    /// Binds an endpoint on the current node and talks to `server`.
    /// `client` identifies this process in the recorded history; what it
    /// reports goes to `log`.
    pub async fn connect(
        server: SocketAddr,
        client: u64,
        log: ClientLog,
    ) -> std::io::Result<SimEtcd> {
        let ep = Endpoint::bind("0.0.0.0:0").await?;
        Ok(SimEtcd {
            probe: coord::ProbeHub::new(),
            ep,
            server,
            client,
            // A restarted process may get the same address as its previous
            // incarnation, whose stream messages can still be in flight:
            // start tags at a (seeded) random point so they never collide.
            tags: Arc::new(AtomicU64::new(
                (madsim::rand::random::<u64>() >> 1) | (REQUEST_TAG + 1),
            )),
            log,
        })
    }

    /// This client with a prober of its own that probes as `config` says
    /// (the simulator's own tests run slowed probers with it).
    pub fn with_probe(mut self, config: coord::ProbeConfig) -> SimEtcd {
        self.probe = coord::ProbeHub::with_config(config);
        self
    }

    fn tag(&self) -> u64 {
        self.tags.fetch_add(1, Ordering::Relaxed)
    }

    async fn send(&self, reply_tag: u64, request: Request) -> Result<(), EtcdError> {
        let envelope = Envelope {
            reply_tag,
            client: self.client,
            request,
        };
        self.ep
            .send_to_raw(self.server, REQUEST_TAG, Box::new(envelope))
            .await
            .map_err(|e| EtcdError::Unavailable(e.to_string()))
    }

    async fn call(&self, request: Request) -> Result<Reply, EtcdError> {
        let tag = self.tag();
        self.send(tag, request).await?;
        let (payload, _) = self
            .ep
            .recv_from_raw(tag)
            .await
            .map_err(|e| EtcdError::Indeterminate(e.to_string()))?;
        payload.downcast::<Reply>().map(|r| *r).map_err(|_| {
            self.log.anomalies.fetch_add(1, Ordering::Relaxed);
            EtcdError::Other("unexpected reply type".into())
        })
    }
}

fn done(r: Reply) -> Result<(), EtcdError> {
    match r {
        Reply::Done => Ok(()),
        Reply::Failed(e) => Err(e),
        Reply::Granted { .. } | Reply::Listed { .. } | Reply::Txn(_) => {
            Err(EtcdError::Other("unexpected reply".into()))
        }
    }
}

/// The messages of one simulated stream, delivered in order (madsim may
/// reorder same-tag messages); a lost message stalls the stream, as a
/// partitioned TCP stream would.
struct OrderedStream {
    ep: Endpoint,
    stream: u64,
    next: u64,
    early: BTreeMap<u64, StreamBody>,
    anomalies: Arc<AtomicU64>,
}

impl OrderedStream {
    fn new(etcd: &SimEtcd, stream: u64) -> Self {
        OrderedStream {
            ep: etcd.ep.clone(),
            stream,
            next: 0,
            early: BTreeMap::new(),
            anomalies: Arc::clone(&etcd.log.anomalies),
        }
    }

    /// The next message body; `None` if the endpoint is gone.
    async fn next_body(&mut self) -> Option<StreamBody> {
        loop {
            if let Some(body) = self.early.remove(&self.next) {
                self.next += 1;
                return Some(body);
            }
            let (payload, _) = self.ep.recv_from_raw(self.stream).await.ok()?;
            match payload.downcast::<StreamMessage>() {
                Ok(msg) => {
                    let StreamMessage { seq, body } = *msg;
                    if seq >= self.next {
                        self.early.insert(seq, body);
                    }
                }
                Err(_) => {
                    self.anomalies.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Sends keep-alives on a simulated stream.
pub struct SimKeeper {
    etcd: SimEtcd,
    lease: i64,
    stream: u64,
}

/// Receives a simulated stream's replies, in order.
pub struct SimReplies {
    stream: OrderedStream,
    ended: bool,
}

/// Sends progress requests on a simulated watch.
pub struct SimWatchControl {
    etcd: SimEtcd,
    stream: u64,
}

/// Receives a simulated watch's messages, in order.
pub struct SimWatchEvents {
    stream: OrderedStream,
    ended: bool,
}

impl WatchControl for SimWatchControl {
    async fn request_progress(&mut self) -> Result<(), EtcdError> {
        let request = Request::WatchProgress {
            stream: self.stream,
        };
        self.etcd.send(self.stream, request).await
    }

    async fn cancel(&mut self) {
        let request = Request::CancelWatch {
            stream: self.stream,
        };
        let _ = self.etcd.send(self.stream, request).await;
    }
}

impl WatchEvents for SimWatchEvents {
    async fn next(&mut self) -> Option<Result<WatchMessage, EtcdError>> {
        if self.ended {
            return None;
        }
        let Some(body) = self.stream.next_body().await else {
            self.ended = true;
            return Some(Err(EtcdError::Indeterminate("endpoint closed".into())));
        };
        let message = |kind, events, revision, cluster| {
            Some(Ok(WatchMessage {
                kind,
                events,
                revision: Revision(revision),
                cluster: coord_core::ClusterId(cluster),
            }))
        };
        match body {
            StreamBody::WatchCreated { revision, cluster } => {
                message(MessageKind::Created, Vec::new(), revision, cluster)
            }
            StreamBody::WatchEvents {
                events,
                revision,
                cluster,
            } => message(MessageKind::Events, events, revision, cluster),
            StreamBody::WatchProgress { revision, cluster } => {
                message(MessageKind::Progress, Vec::new(), revision, cluster)
            }
            StreamBody::WatchCompacted { compact_revision } => {
                self.ended = true;
                Some(Err(EtcdError::Compacted { compact_revision }))
            }
            StreamBody::Broken(why) => {
                self.ended = true;
                Some(Err(EtcdError::Indeterminate(why)))
            }
            StreamBody::Ttl(_) => {
                self.stream.anomalies.fetch_add(1, Ordering::Relaxed);
                self.ended = true;
                Some(Err(EtcdError::Other("keep-alive reply on a watch".into())))
            }
        }
    }
}

impl KeepAliveSender for SimKeeper {
    async fn send(&mut self) -> Result<(), EtcdError> {
        let request = Request::KeepAlive {
            lease: self.lease,
            stream: self.stream,
            open: false,
        };
        self.etcd.send(self.stream, request).await
    }
}

impl KeepAliveReplies for SimReplies {
    async fn next(&mut self) -> Option<Result<i64, EtcdError>> {
        if self.ended {
            return None;
        }
        match self.stream.next_body().await {
            Some(StreamBody::Ttl(ttl)) => Some(Ok(ttl)),
            Some(StreamBody::Broken(why)) => {
                self.ended = true;
                Some(Err(EtcdError::Indeterminate(why)))
            }
            Some(_) => {
                self.stream.anomalies.fetch_add(1, Ordering::Relaxed);
                self.ended = true;
                Some(Err(EtcdError::Other(
                    "watch message on a keep-alive".into(),
                )))
            }
            None => {
                self.ended = true;
                Some(Err(EtcdError::Indeterminate("endpoint closed".into())))
            }
        }
    }
}

impl EtcdApi for SimEtcd {
    type Keeper = SimKeeper;
    type Replies = SimReplies;
    type WatchControl = SimWatchControl;
    type WatchEvents = SimWatchEvents;

    fn probe_hub(&self) -> Option<coord::ProbeHub> {
        Some(self.probe.clone())
    }

    async fn range(&self, request: RangeRequest) -> Result<Listing, EtcdError> {
        match self.call(Request::Range { request }).await? {
            Reply::Listed(listing) => Ok(listing),
            Reply::Failed(e) => Err(e),
            _ => Err(EtcdError::Other("unexpected reply".into())),
        }
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, EtcdError> {
        match self.call(Request::Txn { txn }).await? {
            Reply::Txn(response) => Ok(response),
            Reply::Failed(e) => Err(e),
            _ => Err(EtcdError::Other("unexpected reply".into())),
        }
    }

    async fn watch(
        &self,
        key: Vec<u8>,
        prefix: bool,
        start_revision: Revision,
    ) -> Result<(SimWatchControl, SimWatchEvents), EtcdError> {
        let stream = self.tag();
        let request = Request::Watch {
            key,
            prefix,
            start_revision: start_revision.0,
            stream,
        };
        self.send(stream, request).await?;
        Ok((
            SimWatchControl {
                etcd: self.clone(),
                stream,
            },
            SimWatchEvents {
                stream: OrderedStream::new(self, stream),
                ended: false,
            },
        ))
    }

    async fn lease_grant(&self, ttl_secs: i64) -> Result<Granted, EtcdError> {
        self.log.heal_sent();
        match self.call(Request::Grant { ttl: ttl_secs }).await? {
            Reply::Granted { lease, ttl } => Ok(Granted {
                lease: LeaseId(lease),
                ttl_secs: ttl,
            }),
            Reply::Failed(e) => Err(e),
            _ => Err(EtcdError::Other("unexpected reply".into())),
        }
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), EtcdError> {
        done(self.call(Request::Revoke { lease: lease.0 }).await?)
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<(SimKeeper, SimReplies), EtcdError> {
        let stream = self.tag();
        let open = Request::KeepAlive {
            lease: lease.0,
            stream,
            open: true,
        };
        self.log.heal_sent();
        self.send(stream, open).await?;
        Ok((
            SimKeeper {
                etcd: self.clone(),
                lease: lease.0,
                stream,
            },
            SimReplies {
                stream: OrderedStream::new(self, stream),
                ended: false,
            },
        ))
    }
}
