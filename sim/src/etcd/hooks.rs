//! The simulated etcd's fault hooks: a leader change, a wipe (or restore),
//! a compaction, and watch streams broken under their clients.

use std::net::SocketAddr;
use std::time::Duration;

use madsim::net::Endpoint;

use crate::etcd::model::{self};
use crate::etcd::wire::{StreamBody, StreamMessage};

/// How often the lessor looks for expired leases (etcd: 500 ms).
use super::server::{lock, now_ms, EtcdState, SharedEtcd};

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
        let until = st.outage(now, window);
        st.model.reset_lease_ttls(until);
        st.drop_streams()
    };
    broken(&ep, streams, "leader changed").await;
}

/// How a wipe looks from outside.
#[derive(Debug, Clone, Copy)]
pub struct Wiped {
    /// Back under a new cluster id.
    pub new_cluster: bool,
    /// While down, unary requests are refused (`Refused`, nothing listens)
    /// rather than answered "no leader".
    pub refusing: bool,
}

/// etcd wiped (or restored from a snapshot older than anything written):
/// down for `window`, then back empty at revision 1 with no lease, under a
/// new cluster id if `new_cluster`. Every key's disappearance is logged at
/// the wipe. Must run on the etcd node.
pub async fn wipe(
    state: SharedEtcd,
    ep: Endpoint,
    start: madsim::time::Instant,
    window: Duration,
    Wiped {
        new_cluster,
        refusing,
    }: Wiped,
) {
    let now = now_ms(start);
    let streams = {
        let mut st = lock(&state);
        let until = st.outage(now, window);
        if refusing {
            st.refused_until = st.refused_until.max(until);
        }
        let prefix = coord::DEFAULT_PREFIX.as_bytes();
        for lease in st.model.leases() {
            st.lease_ended(now, lease);
        }
        st.wipes += 1;
        let history = st.wipes;
        for kv in st.model.wipe() {
            if kv.key.starts_with(prefix) {
                st.key_changes
                    .push((now, kv.key.clone(), 1, false, history));
                continue;
            }
            st.other_changes.push(crate::history::LogEntry {
                at_ms: now,
                revision: 1,
                key: String::from_utf8_lossy(&kv.key).into_owned(),
                present: false,
                create_revision: kv.create_revision,
                value: Vec::new(),
                lease: kv.lease,
                cause: Some(model::DeleteCause::Wiped),
            });
        }
        // Revisions start over: later changes are logged from 2.
        st.revision_times.push((1, now));
        // Every member was wiped alike.
        st.stale_reads = None;
        if new_cluster {
            st.cluster = st.cluster.wrapping_mul(31).wrapping_add(7);
        }
        st.changed.notify_one();
        st.drop_streams()
    };
    broken(&ep, streams, "etcd restarted").await;
}

/// A write outside every prefix the simulation uses, then a compaction at
/// the revision it made: every watcher's last revision is then compacted.
/// Returns the compaction revision.
pub fn bump_and_compact(st: &mut EtcdState, now: u64) -> Option<i64> {
    st.model.put(b"/coord-sim/bump", b"", 0).ok()?;
    st.after_change(now);
    let rev = st.model.revision();
    st.model.compact(rev).ok()?;
    Some(rev)
}

/// Breaks every watch of exactly `key` (as prefix), as if the member
/// serving them went away. Must run on the etcd node.
pub async fn break_watches(state: SharedEtcd, ep: Endpoint, key: Vec<u8>) {
    let streams: Vec<((SocketAddr, u64), u64)> = {
        let mut st = lock(&state);
        let ids: Vec<(SocketAddr, u64)> = st
            .watches
            .iter()
            .filter(|(_, w)| w.prefix && w.key == key)
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| st.watches.remove(&id).map(|w| (id, w.seq)))
            .collect()
    };
    broken(&ep, streams, "member went away").await;
}

/// The member serving every watch of the client at `client` goes away,
/// and the member each one's next watch reaches is behind: forgets those
/// watches and marks them lagging. Returns them, for
/// [`tell_broken`] to tell their client.
pub fn lag_watches_of(
    st: &mut EtcdState,
    client: std::net::IpAddr,
) -> Vec<((SocketAddr, u64), u64)> {
    let ids: Vec<(SocketAddr, u64)> = st
        .watches
        .keys()
        .filter(|(addr, _)| addr.ip() == client)
        .copied()
        .collect();
    ids.into_iter()
        .filter_map(|id| {
            let w = st.watches.remove(&id)?;
            st.lagging_watches.insert((client, w.key));
            Some((id, w.seq))
        })
        .collect()
}

/// Tells the clients of `streams` that they broke because their member
/// went away. Must run on the etcd node.
pub async fn tell_broken(ep: Endpoint, streams: Vec<((SocketAddr, u64), u64)>) {
    broken(&ep, streams, "member went away").await;
}

impl EtcdState {
    /// No answers until `now + window` (the later of that and any outage
    /// already on); streams opened before are dead. Returns its end.
    fn outage(&mut self, now: u64, window: Duration) -> u64 {
        self.epoch += 1;
        let until = now + u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        self.unavailable_until = self.unavailable_until.max(until);
        until
    }

    /// Forgets every open stream; returns them (with their next message
    /// number) so their clients can be told.
    fn drop_streams(&mut self) -> Vec<((SocketAddr, u64), u64)> {
        let mut streams: Vec<((SocketAddr, u64), u64)> = std::mem::take(&mut self.streams)
            .into_iter()
            .map(|(k, (_, seq))| (k, seq))
            .collect();
        streams.extend(
            std::mem::take(&mut self.watches)
                .into_iter()
                .map(|(k, w)| (k, w.seq)),
        );
        streams
    }
}

/// Tells each stream's client that it broke.
/// Tells every client of `streams` at once that its stream broke, as
/// etcd's connections all drop together (one send after another would
/// spread a fleet's reconnections over a millisecond per stream, hiding a
/// herd).
async fn broken(ep: &Endpoint, streams: Vec<((SocketAddr, u64), u64)>, why: &str) {
    let sends: Vec<_> = streams
        .into_iter()
        .map(|((addr, tag), seq)| {
            let ep = ep.clone();
            let msg = StreamMessage {
                seq,
                body: StreamBody::Broken(why.into()),
            };
            madsim::task::spawn(async move {
                let _ = ep.send_to_raw(addr, tag, Box::new(msg)).await;
            })
        })
        .collect();
    for send in sends {
        let _ = send.await;
    }
}
