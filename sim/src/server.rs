//! The simulated etcd server: serves the [`EtcdModel`] over madsim's
//! network, runs the lessor (expiry every 500 ms, as etcd's leader does) and
//! carries the fault hooks.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use coord::EtcdError;
use madsim::net::Endpoint;

use crate::model::{Compare, CompareOp, EtcdModel, ModelError, Target, TxnOp};
use crate::wire::{Envelope, Reply, Request, StreamBody, StreamMessage, REQUEST_TAG};

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
    /// Until this virtual ms requests are applied but not answered.
    pub drop_replies_until: u64,
    /// Bumped by every leader change; streams opened before are dead.
    pub epoch: u64,
    /// Open keep-alive streams: (client addr, stream tag) -> (epoch, next seq).
    pub streams: BTreeMap<(SocketAddr, u64), (u64, u64)>,
}

/// Shared handle to the server state.
pub type SharedEtcd = Arc<Mutex<EtcdState>>;

/// A fresh, empty server state.
pub fn new_state() -> SharedEtcd {
    Arc::new(Mutex::new(EtcdState {
        model: EtcdModel::new(),
        unavailable_until: 0,
        drop_replies_until: 0,
        epoch: 0,
        streams: BTreeMap::new(),
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
    loop {
        let Ok((payload, from)) = ep.recv_from_raw(REQUEST_TAG).await else {
            return;
        };
        let Ok(envelope) = payload.downcast::<Envelope>() else {
            continue;
        };
        let now = now_ms(start);
        let (reply, drop_reply) = {
            let mut st = lock(&state);
            let drop_reply = now < st.drop_replies_until;
            (handle(&mut st, now, from, &envelope.request), drop_reply)
        };
        if drop_reply {
            continue;
        }
        match reply {
            Answer::Unary(r) => {
                let _ = ep.send_to_raw(from, envelope.reply_tag, Box::new(r)).await;
            }
            Answer::Stream(tag, msg) => {
                let _ = ep.send_to_raw(from, tag, Box::new(msg)).await;
            }
            Answer::None => {}
        }
    }
}

enum Answer {
    Unary(Reply),
    Stream(u64, StreamMessage),
    None,
}

fn failed(e: ModelError) -> Reply {
    Reply::Failed(match e {
        ModelError::LeaseNotFound => EtcdError::LeaseNotFound,
        ModelError::Compacted(rev) => EtcdError::Compacted {
            compact_revision: rev,
        },
        ModelError::FutureRevision => EtcdError::Other("future revision".into()),
    })
}

fn handle(st: &mut EtcdState, now: u64, from: SocketAddr, req: &Request) -> Answer {
    if now < st.unavailable_until {
        return match req {
            Request::KeepAlive { stream, .. } => {
                // A stream request with no leader: the stream is refused.
                st.streams.remove(&(from, *stream));
                Answer::Stream(
                    *stream,
                    StreamMessage {
                        seq: 0,
                        body: StreamBody::Broken("etcdserver: no leader".into()),
                    },
                )
            }
            _ => Answer::Unary(Reply::Failed(EtcdError::Unavailable(
                "etcdserver: no leader".into(),
            ))),
        };
    }
    match req {
        Request::Grant { ttl } => {
            let (lease, ttl) = st.model.grant(now, *ttl);
            Answer::Unary(Reply::Granted { lease, ttl })
        }
        Request::Revoke { lease } => Answer::Unary(match st.model.revoke(*lease) {
            Ok(()) => Reply::Done,
            Err(e) => failed(e),
        }),
        Request::PutIfChanged { key, value, lease } => {
            let compares = [
                Compare {
                    key: key.clone(),
                    op: CompareOp::Equal,
                    target: Target::Lease(*lease),
                },
                Compare {
                    key: key.clone(),
                    op: CompareOp::Equal,
                    target: Target::Value(value.clone()),
                },
            ];
            let put = [TxnOp::Put {
                key: key.clone(),
                value: value.clone(),
                lease: *lease,
            }];
            Answer::Unary(match st.model.txn(&compares, &[], &put) {
                Ok(_) => Reply::Done,
                Err(e) => failed(e),
            })
        }
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
                    Answer::Stream(*stream, msg)
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
            st.model.expire(now);
        }
    }
}

/// A leader change: requests fail with `Unavailable` for `window`, every
/// lease TTL starts over, and every open stream is dropped (its client is
/// told on `ep`). Must run on the etcd node.
pub async fn leader_change(
    state: SharedEtcd,
    ep: Endpoint,
    start: madsim::time::Instant,
    window: Duration,
) {
    let now = now_ms(start);
    let streams = {
        let mut st = lock(&state);
        st.epoch += 1;
        let until = now + u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        st.unavailable_until = st.unavailable_until.max(until);
        st.model.reset_lease_ttls(until);
        std::mem::take(&mut st.streams)
    };
    for ((addr, tag), (_, seq)) in streams {
        let msg = StreamMessage {
            seq,
            body: StreamBody::Broken("leader changed".into()),
        };
        let _ = ep.send_to_raw(addr, tag, Box::new(msg)).await;
    }
}
