//! The simulated etcd server: serves the [`EtcdModel`] over madsim's
//! network and runs the lessor (expiry every 500 ms, as etcd's leader
//! does); its fault hooks are in [`hooks`](super::hooks).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use coord::EtcdError;
use coord_core::io as core_io;
use coord_core::kv::WatchEvent;
use coord_core::Revision;
use madsim::net::Endpoint;
use tokio::sync::Notify;

use crate::etcd::convert::{core_event, core_kv, failed, select, txn_request, txn_response};
use crate::etcd::model::{self, EtcdModel, ModelError, Select};
use crate::etcd::wire::{Envelope, Reply, Request, StreamBody, StreamMessage, REQUEST_TAG};

/// How often the lessor looks for expired leases (etcd: 500 ms).
pub const EXPIRY_CHECK: Duration = Duration::from_millis(500);

/// The server's state, shared with the outside observer (which only reads
/// the model) and the fault injector.
#[derive(Debug)]
pub struct EtcdState {
    /// etcd's data.
    pub model: EtcdModel,
    /// Until this virtual ms every request fails with `Unavailable` (no
    /// leader after a leader change).
    pub unavailable_until: u64,
    /// Until this virtual ms (at most `unavailable_until`) unary requests
    /// fail with `Refused` instead: etcd's process is down, and nothing
    /// listens at its address.
    pub refused_until: u64,
    /// Until this virtual ms requests are applied but not answered.
    pub drop_replies_until: u64,
    /// Bumped by every leader change; streams opened before are dead.
    pub epoch: u64,
    /// Open keep-alive streams: (client addr, stream tag) -> (epoch, next seq).
    pub streams: BTreeMap<(SocketAddr, u64), (u64, u64)>,
    /// Open watches: (client addr, stream tag) -> what they watch.
    pub watches: BTreeMap<(SocketAddr, u64), WatchEntry>,
    /// When each revision was made (virtual ms), for lag measurements.
    pub revision_times: Vec<(i64, u64)>,
    /// Woken after every change, so watches get their events.
    pub changed: Arc<Notify>,
    /// When each lease grant was served (virtual ms): the re-registration
    /// rate.
    pub grant_times: Vec<u64>,
    /// Every change of a key under the hosts' prefix: (virtual ms, key,
    /// revision, present after it, which history: the wipes before it).
    /// The exact truth the watchers owe.
    pub key_changes: Vec<(u64, Vec<u8>, i64, bool, u32)>,
    /// Wipes so far: each starts etcd's history of revisions over.
    pub wipes: u32,
    /// Every put of a key under the hosts' prefix, with what it wrote.
    pub host_puts: Vec<crate::history::HostPut>,
    /// Every change of any other key (election queues, fenced resources).
    pub other_changes: Vec<crate::history::LogEntry>,
    /// The cluster id response headers carry.
    pub cluster: u64,
    /// Every lease granted: to whom, with what TTL, when it ended.
    pub lease_log: BTreeMap<i64, crate::history::LeaseLife>,
    /// A member behind the others answering serializable reads, while on.
    pub stale_reads: Option<StaleReads>,
    /// Contenders whose next join is applied but left unanswered, with
    /// how many such joins each has still to send.
    pub unanswered_joins: BTreeMap<usize, u32>,
    /// Every join left unanswered: (virtual ms, contender).
    pub joins_unanswered: Vec<(u64, usize)>,
    /// Watches (client address, key) whose member went away: the next
    /// watch of that key from that address reaches a member one revision
    /// behind what its client has seen.
    pub lagging_watches: BTreeSet<(IpAddr, Vec<u8>)>,
    /// Clients whose replies are sent late, by how much (ms): a slow link
    /// or an overloaded member. Requests are applied on arrival.
    pub late_replies: BTreeMap<IpAddr, u64>,
}

/// A member behind the others answers serializable reads until `until_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleReads {
    /// Until this virtual ms.
    pub until_ms: u64,
    /// How far behind.
    pub behind: Behind,
}

/// How a stale member is behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Behind {
    /// It applies what the leader commits this many ms late.
    Lag(u64),
    /// It is cut off from the others, stuck at `revision` with `kvs`
    /// (every key then: it has not compacted anything since either).
    Frozen {
        /// Its revision.
        revision: i64,
        /// Its keys.
        kvs: Arc<Vec<model::KeyValue>>,
    },
}

/// One open watch.
#[derive(Debug, Clone)]
pub struct WatchEntry {
    pub(crate) key: Vec<u8>,
    pub(crate) prefix: bool,
    /// The next revision it has not been sent.
    pub(crate) next: i64,
    /// Every revision from `next` below this one was looked at and holds
    /// nothing of the watch's: where the next look begins.
    pub(crate) looked: i64,
    /// Next message number on its stream.
    pub(crate) seq: u64,
}

impl EtcdState {
    /// Revokes `lease` (a client's request or an outside revoke), logging
    /// its end.
    pub fn revoke_lease(&mut self, now: u64, lease: i64) -> Result<(), ModelError> {
        self.model.revoke(lease)?;
        self.lease_ended(now, lease);
        Ok(())
    }

    /// Logs that `lease` no longer exists in etcd (its first end only).
    pub fn lease_ended(&mut self, now: u64, lease: i64) {
        if let Some(life) = self.lease_log.get_mut(&lease) {
            life.ended_at.get_or_insert(now);
        }
    }

    /// Call after anything that may have changed the model: records when
    /// new revisions were made and wakes the watch flusher.
    pub fn after_change(&mut self, now: u64) {
        let last = self.revision_times.last().map_or(1, |(r, _)| *r);
        for rev in last + 1..=self.model.revision() {
            self.revision_times.push((rev, now));
        }
        if self.model.revision() > last {
            // Called after every change, before any compaction can drop it.
            let prefix = coord::DEFAULT_PREFIX.as_bytes();
            for e in self.model.events_since(b"", last + 1).unwrap_or_default() {
                let present = matches!(e, model::Event::Put { .. });
                if e.key().starts_with(prefix) {
                    self.key_changes.push((
                        now,
                        e.key().to_vec(),
                        e.revision(),
                        present,
                        self.wipes,
                    ));
                    if let model::Event::Put { kv, .. } = &e {
                        self.host_puts.push(crate::history::HostPut {
                            at_ms: now,
                            key: kv.key.clone(),
                            record: crate::history::SeenRecord {
                                mod_revision: kv.mod_revision,
                                lease: kv.lease,
                                raw: kv.value.clone(),
                            },
                        });
                    }
                    continue;
                }
                let (kv, cause) = match &e {
                    model::Event::Put { kv, .. } => (kv, None),
                    model::Event::Delete { prev, cause, .. } => (prev, Some(*cause)),
                };
                self.other_changes.push(crate::history::LogEntry {
                    at_ms: now,
                    revision: e.revision(),
                    key: String::from_utf8_lossy(e.key()).into_owned(),
                    present,
                    create_revision: kv.create_revision,
                    value: if present {
                        kv.value.clone()
                    } else {
                        Vec::new()
                    },
                    lease: kv.lease,
                    cause,
                });
            }
        }
        if self.model.revision() > last {
            self.changed.notify_one();
        }
    }
}

/// Shared handle to the server state.
pub type SharedEtcd = Arc<Mutex<EtcdState>>;

/// The cluster id of a fresh simulated etcd.
pub const FIRST_CLUSTER: u64 = 0xc0_5eed;

/// A fresh, empty server state.
pub fn new_state() -> SharedEtcd {
    Arc::new(Mutex::new(EtcdState {
        model: EtcdModel::new(),
        unavailable_until: 0,
        refused_until: 0,
        drop_replies_until: 0,
        epoch: 0,
        streams: BTreeMap::new(),
        watches: BTreeMap::new(),
        revision_times: Vec::new(),
        changed: Arc::new(Notify::new()),
        grant_times: Vec::new(),
        key_changes: Vec::new(),
        wipes: 0,
        host_puts: Vec::new(),
        other_changes: Vec::new(),
        lease_log: BTreeMap::new(),
        cluster: FIRST_CLUSTER,
        stale_reads: None,
        unanswered_joins: BTreeMap::new(),
        joins_unanswered: Vec::new(),
        lagging_watches: BTreeSet::new(),
        late_replies: BTreeMap::new(),
    }))
}

/// Locks the state; a poisoned lock (a panic elsewhere) is taken over, since
/// the simulation reports that panic anyway.
pub fn lock(state: &SharedEtcd) -> MutexGuard<'_, EtcdState> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Virtual milliseconds since the simulation began.
pub fn now_ms(start: madsim::time::Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Serves requests forever on `ep` (the etcd node's endpoint).
pub async fn serve(state: SharedEtcd, ep: Endpoint, start: madsim::time::Instant) {
    // madsim makes every receive and every send wait at least 1 ms: one
    // loop would serve at most 500 requests a second, and a fleet of 1,000
    // hosts would time out on the simulator rather than on coord. Workers
    // serve concurrently (the network reorders messages anyway; streams
    // carry sequence numbers).
    for _ in 1..SERVE_WORKERS {
        madsim::task::spawn(serve_one(state.clone(), ep.clone(), start));
    }
    serve_one(state, ep, start).await;
}

/// Concurrent request loops of the simulated server.
const SERVE_WORKERS: usize = 32;

async fn serve_one(state: SharedEtcd, ep: Endpoint, start: madsim::time::Instant) {
    loop {
        let Ok((payload, from)) = ep.recv_from_raw(REQUEST_TAG).await else {
            return;
        };
        let Ok(envelope) = payload.downcast::<Envelope>() else {
            continue;
        };
        let now = now_ms(start);
        let (reply, drop_reply, late) = {
            let mut st = lock(&state);
            let drop_reply = now < st.drop_replies_until;
            let late = st.late_replies.get(&from.ip()).copied();
            let reply = handle(&mut st, now, from, envelope.client, &envelope.request);
            let unanswered = matches!(reply, Answer::Unary(Reply::Txn(_)))
                && st.takes_unanswered_join(now, envelope.client, &envelope.request);
            if unanswered {
                // Another client's write lands right after the join.
                let _ = st.model.put(b"/coord-sim/after-join", b"", 0);
            }
            st.after_change(now);
            (reply, drop_reply || unanswered, late)
        };
        if drop_reply {
            continue;
        }
        match late {
            Some(delay_ms) => {
                let ep = ep.clone();
                madsim::task::spawn(async move {
                    madsim::time::sleep(Duration::from_millis(delay_ms)).await;
                    send(&ep, from, envelope.reply_tag, reply).await;
                });
            }
            None => send(&ep, from, envelope.reply_tag, reply).await,
        }
    }
}

/// Sends `answer` to the client at `from` (a unary reply on `reply_tag`).
async fn send(ep: &Endpoint, from: SocketAddr, reply_tag: u64, answer: Answer) {
    match answer {
        Answer::Unary(r) => {
            let _ = ep.send_to_raw(from, reply_tag, Box::new(r)).await;
        }
        Answer::Stream(tag, msgs) => {
            for msg in msgs {
                let _ = ep.send_to_raw(from, tag, Box::new(msg)).await;
            }
        }
        Answer::None => {}
    }
}

enum Answer {
    Unary(Reply),
    Stream(u64, Vec<StreamMessage>),
    None,
}

/// What a watch is owed now: its pending events, or a compaction notice
/// (after which it is dropped). Advances the watch.
fn catch_up(
    model: &EtcdModel,
    cluster: u64,
    w: &mut WatchEntry,
) -> Result<Option<StreamBody>, i64> {
    // A watch whose next revision is compacted is cancelled, whether or
    // not anything of its own was compacted.
    if w.next <= model.compacted() {
        return Err(model.compacted());
    }
    let mut next = w.next;
    let events: Vec<WatchEvent> = match model.events_from(&w.key, w.prefix, w.next.max(w.looked)) {
        Err(ModelError::Compacted(rev)) => return Err(rev),
        Err(_) => return Ok(None),
        Ok(events) => events
            .map(|e| {
                next = e.revision() + 1;
                core_event(e)
            })
            .collect(),
    };
    w.looked = model.revision() + 1;
    if events.is_empty() {
        return Ok(None);
    }
    w.next = next;
    Ok(Some(StreamBody::WatchEvents {
        events,
        revision: model.revision(),
        cluster,
    }))
}

fn stamp(w: &mut WatchEntry, body: StreamBody) -> StreamMessage {
    let msg = StreamMessage { seq: w.seq, body };
    w.seq += 1;
    msg
}

/// Sends every open watch its pending events, forever (woken on change).
pub async fn flush_watches(state: SharedEtcd, ep: Endpoint) {
    let changed = Arc::clone(&lock(&state).changed);
    loop {
        changed.notified().await;
        let out: Vec<(SocketAddr, u64, StreamMessage)> = {
            let mut guard = lock(&state);
            let st = &mut *guard;
            let mut out = Vec::new();
            let mut dropped = Vec::new();
            for (key, w) in st.watches.iter_mut() {
                match catch_up(&st.model, st.cluster, w) {
                    Ok(Some(body)) => out.push((key.0, key.1, stamp(w, body))),
                    Ok(None) => {}
                    Err(compact_revision) => {
                        out.push((
                            key.0,
                            key.1,
                            stamp(w, StreamBody::WatchCompacted { compact_revision }),
                        ));
                        dropped.push(*key);
                    }
                }
            }
            for key in dropped {
                st.watches.remove(&key);
            }
            out
        };
        for (addr, tag, msg) in out {
            let _ = ep.send_to_raw(addr, tag, Box::new(msg)).await;
        }
    }
}

impl EtcdState {
    /// The latest revision made at or before virtual ms `at`, never below
    /// the compaction (the model cannot read there).
    pub fn revision_at(&self, at: u64) -> i64 {
        let rev = self
            .revision_times
            .iter()
            .rev()
            .find(|(_, t)| *t <= at)
            .map_or(1, |(r, _)| *r);
        rev.min(self.model.revision())
            .max(self.model.compacted())
            .max(1)
    }

    /// A member stuck at etcd's state `lag_ms` before `now`.
    pub fn frozen_member(&self, now: u64, lag_ms: u64) -> Behind {
        let revision = self.revision_at(now.saturating_sub(lag_ms));
        let kvs = self
            .model
            .range(b"", Some(revision))
            .map(|(kvs, _)| kvs)
            .unwrap_or_default();
        Behind::Frozen {
            revision,
            kvs: Arc::new(kvs),
        }
    }

    /// Whether `request` from `client` is a join that an
    /// [`UnansweredJoin`](crate::faults::schedule::Fault::UnansweredJoin)
    /// leaves unanswered (it is then counted off).
    fn takes_unanswered_join(&mut self, now: u64, client: u64, request: &Request) -> bool {
        let Some(c) = crate::history::contender_of(client) else {
            return false;
        };
        let Request::Txn { txn } = request else {
            return false;
        };
        if !is_join(txn) {
            return false;
        }
        match self.unanswered_joins.get_mut(&c) {
            Some(left) if *left > 0 => {
                *left -= 1;
                if *left == 0 {
                    self.unanswered_joins.remove(&c);
                }
                self.joins_unanswered.push((now, c));
                true
            }
            _ => false,
        }
    }

    /// The stale member answering serializable reads at `now`, if any.
    fn stale_member(&self, now: u64) -> Option<&Behind> {
        self.stale_reads
            .as_ref()
            .filter(|s| now < s.until_ms)
            .map(|s| &s.behind)
    }
}

/// A campaign's join: `If(create(key) = 0) Then(Put(key), Get(queue*))`,
/// as etcd's Go `concurrency` package and coord send it.
fn is_join(txn: &core_io::Txn) -> bool {
    let creates_if_absent = matches!(
        txn.compares.as_slice(),
        [c] if !c.prefix
            && c.op == core_io::CompareOp::Equal
            && c.target == core_io::CompareTarget::CreateRevision(Revision(0))
    );
    let puts = txn
        .success
        .iter()
        .any(|op| matches!(op, core_io::TxnOp::Put { .. }));
    let reads_queue = txn
        .success
        .iter()
        .any(|op| matches!(op, core_io::TxnOp::Get(get) if get.prefix));
    creates_if_absent && puts && reads_queue
}

/// A range as etcd serves it: at the current revision or a pinned one,
/// after a key (a later page), at most `limit` keys with `more` set when
/// some were left out. The header names the current revision. A
/// serializable range answered by a stale member reads at (and names) the
/// member's revision, and one pinned past it fails with "future revision".
fn range(st: &EtcdState, now: u64, request: &core_io::RangeRequest) -> Reply {
    let get = &request.get;
    let stale = match request.consistency {
        core_io::Consistency::Serializable => st.stale_member(now),
        core_io::Consistency::Linearizable => None,
    };
    // The member's revision, and its keys if it keeps its own.
    let (header, own) = match stale {
        None => (st.model.revision(), None),
        Some(Behind::Lag(ms)) => (st.revision_at(now.saturating_sub(*ms)), None),
        Some(Behind::Frozen { revision, kvs }) => (*revision, Some((*revision, kvs))),
    };
    let pinned = match request.revision.0 {
        0 if stale.is_some() => header,
        rev if rev > header => return Reply::Failed(EtcdError::FutureRevision),
        rev => rev,
    };
    let mut kvs: Vec<model::KeyValue> =
        if let Some((_, own)) = own.filter(|(rev, _)| *rev == pinned) {
            own.iter()
                .filter(|kv| {
                    if get.prefix {
                        kv.key.starts_with(&get.key.0)
                    } else {
                        kv.key == get.key.0
                    }
                })
                .cloned()
                .collect()
        } else if pinned > 0 {
            // A read in the past: the keys as they were then (one key, or
            // every key under a prefix).
            match st.model.range(&get.key.0, Some(pinned)) {
                Ok((mut kvs, _)) => {
                    if !get.prefix {
                        kvs.retain(|kv| kv.key == get.key.0);
                    }
                    kvs
                }
                Err(ModelError::Compacted(rev)) => {
                    return Reply::Failed(EtcdError::Compacted {
                        compact_revision: rev,
                    })
                }
                Err(ModelError::FutureRevision) => return Reply::Failed(EtcdError::FutureRevision),
                Err(e) => return Reply::Failed(EtcdError::Other(format!("{e:?}"))),
            }
        } else {
            st.model.select(&Select {
                limit: 0,
                ..select(get)
            })
        };
    if let Some(after) = &request.after {
        kvs.retain(|kv| kv.key.as_slice() > after.0.as_slice());
    }
    let limit = usize::try_from(get.limit).unwrap_or(usize::MAX);
    let count = u64::try_from(kvs.len()).unwrap_or(u64::MAX);
    let more = limit > 0 && kvs.len() > limit;
    if limit > 0 {
        kvs.truncate(limit);
    }
    Reply::Listed(core_io::Listing {
        kvs: kvs.iter().map(core_kv).collect(),
        revision: Revision(header),
        more,
        count,
        cluster: coord_core::ClusterId(st.cluster),
    })
}

fn handle(st: &mut EtcdState, now: u64, from: SocketAddr, client: u64, req: &Request) -> Answer {
    if now < st.unavailable_until {
        return match req {
            Request::KeepAlive { stream, .. }
            | Request::Watch { stream, .. }
            | Request::WatchProgress { stream } => {
                // A stream request with no leader: the stream is refused.
                let seq = match st.watches.remove(&(from, *stream)) {
                    Some(w) => w.seq,
                    None => st
                        .streams
                        .remove(&(from, *stream))
                        .map_or(0, |(_, seq)| seq),
                };
                Answer::Stream(
                    *stream,
                    vec![StreamMessage {
                        seq,
                        body: StreamBody::Broken("etcdserver: no leader".into()),
                    }],
                )
            }
            _ if now < st.refused_until => Answer::Unary(Reply::Failed(EtcdError::Refused(
                "tcp connect error: Connection refused".into(),
            ))),
            _ => Answer::Unary(Reply::Failed(EtcdError::Unavailable(
                "etcdserver: no leader".into(),
            ))),
        };
    }
    match req {
        Request::Range { request } => Answer::Unary(range(st, now, request)),
        Request::Watch {
            key,
            prefix,
            start_revision,
            stream,
        } => {
            let mut w = WatchEntry {
                key: key.clone(),
                prefix: *prefix,
                next: (*start_revision).max(1),
                looked: (*start_revision).max(1),
                seq: 0,
            };
            // A member one revision behind what the client has seen (the
            // revision before its start) answers, with nothing to send yet.
            let lagging =
                *start_revision >= 3 && st.lagging_watches.remove(&(from.ip(), key.clone()));
            let created = StreamBody::WatchCreated {
                revision: if lagging {
                    start_revision - 2
                } else {
                    st.model.revision()
                },
                cluster: st.cluster,
            };
            let mut msgs = vec![stamp(&mut w, created)];
            if lagging {
                st.watches.insert((from, *stream), w);
                return Answer::Stream(*stream, msgs);
            }
            match catch_up(&st.model, st.cluster, &mut w) {
                Ok(backlog) => {
                    if let Some(body) = backlog {
                        msgs.push(stamp(&mut w, body));
                    }
                    st.watches.insert((from, *stream), w);
                }
                Err(compact_revision) => {
                    msgs.push(stamp(
                        &mut w,
                        StreamBody::WatchCompacted { compact_revision },
                    ));
                }
            }
            Answer::Stream(*stream, msgs)
        }
        Request::CancelWatch { stream } => {
            st.watches.remove(&(from, *stream));
            Answer::None
        }
        Request::WatchProgress { stream } => {
            let revision = st.model.revision();
            let cluster = st.cluster;
            let model = &st.model;
            match st.watches.get_mut(&(from, *stream)) {
                Some(w) => {
                    let mut msgs = Vec::new();
                    match catch_up(model, cluster, w) {
                        Ok(Some(body)) => msgs.push(stamp(w, body)),
                        Ok(None) => {}
                        Err(compact_revision) => {
                            msgs.push(stamp(w, StreamBody::WatchCompacted { compact_revision }));
                            st.watches.remove(&(from, *stream));
                            return Answer::Stream(*stream, msgs);
                        }
                    }
                    msgs.push(stamp(w, StreamBody::WatchProgress { revision, cluster }));
                    Answer::Stream(*stream, msgs)
                }
                // A watch from before a leader change: nothing answers.
                None => Answer::None,
            }
        }
        Request::Grant { ttl } => {
            st.grant_times.push(now);
            let (lease, ttl) = st.model.grant(now, *ttl);
            st.lease_log.insert(
                lease,
                crate::history::LeaseLife {
                    client,
                    ttl_secs: ttl,
                    granted_at: now,
                    ended_at: None,
                },
            );
            Answer::Unary(Reply::Granted { lease, ttl })
        }
        Request::Revoke { lease } => Answer::Unary(match st.revoke_lease(now, *lease) {
            Ok(()) => Reply::Done,
            Err(e) => failed(e),
        }),
        Request::Txn { txn } => Answer::Unary(match st.model.txn(&txn_request(txn)) {
            Ok(result) => Reply::Txn(txn_response(&result, st.model.revision(), st.cluster)),
            Err(e) => failed(e),
        }),
        Request::KeepAlive {
            lease,
            stream,
            open,
        } => {
            let epoch = st.epoch;
            let key = (from, *stream);
            if *open {
                st.streams.insert(key, (epoch, 0));
            }
            match st.streams.get_mut(&key) {
                Some((e, seq)) if *e == epoch => {
                    let msg = StreamMessage {
                        seq: *seq,
                        body: StreamBody::Ttl(st.model.keep_alive(now, *lease)),
                    };
                    *seq += 1;
                    Answer::Stream(*stream, vec![msg])
                }
                // A stream from before a leader change (already told it is
                // broken) or never opened: nothing to answer on.
                _ => Answer::None,
            }
        }
    }
}

/// The lessor: expires leases every [`EXPIRY_CHECK`].
pub async fn lessor(state: SharedEtcd, start: madsim::time::Instant) {
    loop {
        madsim::time::sleep(EXPIRY_CHECK).await;
        let now = now_ms(start);
        let mut st = lock(&state);
        if now >= st.unavailable_until {
            for lease in st.model.expire(now) {
                st.lease_ended(now, lease);
            }
            st.after_change(now);
        }
    }
}
