//! A counted fleet returns on its slots: 40 hosts on the simulated etcd,
//! each with a client (and prober) of its own, take their census, then
//! etcd has no leader for 20 s. Each host's first reopen of its keep-alive
//! after etcd answers again is sent on its slot: wall-clock time ≡
//! rank × 5 ms (mod 40 × 5 ms), a distinct rank per host.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use coord::{
    EtcdApi, EtcdError, Granted, HostLiveness, HostMetadata, LeaseId, LivenessOptions, Revision,
};
use coord_core::io::{Listing, RangeRequest, Txn, TxnResponse};
use madsim::net::Endpoint;
use madsim::runtime::Handle;
use madsim::time::Instant;

use crate::client::{SimEtcd, SimKeeper, SimReplies, SimWatchControl, SimWatchEvents};
use crate::server;
use crate::test_fakes::{block_on_within, lock, sim_client};

const HOSTS: u64 = 40;

/// When each keep-alive stream was asked for (virtual time since the
/// test's start, ms), by host.
type Opens = Arc<Mutex<Vec<(u64, u64)>>>;

/// A simulated client that notes when it is asked to open a keep-alive.
#[derive(Clone)]
struct Noting {
    inner: SimEtcd,
    host: u64,
    start: Instant,
    opens: Opens,
}

impl EtcdApi for Noting {
    type Keeper = SimKeeper;
    type Replies = SimReplies;
    type WatchControl = SimWatchControl;
    type WatchEvents = SimWatchEvents;

    async fn range(&self, request: RangeRequest) -> Result<Listing, EtcdError> {
        self.inner.range(request).await
    }
    async fn txn(&self, txn: Txn) -> Result<TxnResponse, EtcdError> {
        self.inner.txn(txn).await
    }
    async fn watch(
        &self,
        key: Vec<u8>,
        prefix: bool,
        start: Revision,
    ) -> Result<(SimWatchControl, SimWatchEvents), EtcdError> {
        self.inner.watch(key, prefix, start).await
    }
    async fn lease_grant(&self, ttl_secs: i64) -> Result<Granted, EtcdError> {
        self.inner.lease_grant(ttl_secs).await
    }
    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), EtcdError> {
        self.inner.lease_revoke(lease).await
    }
    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<(SimKeeper, SimReplies), EtcdError> {
        let at = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        lock(&self.opens).push((self.host, at));
        self.inner.lease_keep_alive(lease).await
    }
    fn probe_hub(&self) -> Option<coord::ProbeHub> {
        self.inner.probe_hub()
    }
    fn for_probe(&self) -> Self {
        Noting {
            inner: self.inner.for_probe(),
            ..self.clone()
        }
    }
    async fn silent(&self) {
        self.inner.silent().await;
    }
}

#[test]
fn a_counted_fleet_reopens_on_its_slots_when_etcd_returns() {
    let opens: Opens = Arc::default();
    let noted = Arc::clone(&opens);
    let run = block_on_within(12, async move {
        let start = Instant::now();
        let wall_at_start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
        let addr = SocketAddr::from((Ipv4Addr::new(192, 0, 2, 1), 2379));
        let state = server::new_state();
        let etcd = Handle::current()
            .create_node()
            .name("etcd")
            .ip(addr.ip())
            .build();
        let Ok(Ok(ep)) = etcd.spawn(Endpoint::bind(addr)).await else {
            return Err("etcd's endpoint".to_string());
        };
        etcd.spawn(server::serve(state.clone(), ep.clone(), start));
        etcd.spawn(server::lessor(state.clone(), start));
        etcd.spawn(server::flush_watches(state.clone(), ep.clone()));
        let client = Handle::current()
            .create_node()
            .name("hosts")
            .ip(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10)))
            .build();
        let hosts = client
            .spawn(async move {
                let mut hosts = Vec::new();
                for h in 0..HOSTS {
                    let api = Noting {
                        inner: sim_client(addr, h + 1, start).await?,
                        host: h,
                        start,
                        opens: Arc::clone(&noted),
                    };
                    let opts = LivenessOptions {
                        seed: Some(h),
                        ..LivenessOptions::default()
                    };
                    let meta = HostMetadata::new(format!("host-{h:02}"), "sim");
                    let host = HostLiveness::register(api, meta, opts)
                        .await
                        .map_err(|e| e.to_string())?;
                    hosts.push(host);
                }
                Ok::<_, String>(hosts)
            })
            .await
            .map_err(|e| format!("{e:?}"))??;
        // Every host's first census is due 12-24 s after it registered.
        madsim::time::sleep(Duration::from_secs(30)).await;
        let down_at = u64::try_from(start.elapsed().as_millis()).unwrap_or(0);
        etcd.spawn(server::leader_change(
            state.clone(),
            ep,
            start,
            Duration::from_secs(20),
        ))
        .await
        .map_err(|e| format!("{e:?}"))?;
        let back_at = down_at + 20_000;
        madsim::time::sleep(Duration::from_secs(30)).await;
        let registered = hosts
            .iter()
            .filter(|h| {
                matches!(
                    *h.state().borrow(),
                    coord::LivenessStatus::Registered { .. }
                )
            })
            .count();
        Ok((wall_at_start, back_at, registered, hosts))
    });
    let (wall_at_start, back_at, registered, _hosts) = match run {
        Ok(r) => r,
        Err(e) => panic!("the run failed: {e}"),
    };
    assert_eq!(registered, 40, "every host is back");
    // Each host's last reopen: the one etcd answered (sent as it came
    // back, or after).
    let all = lock(&opens).clone();
    let mut last: Vec<(u64, u64)> = Vec::new();
    for (host, at) in all.into_iter().rev() {
        if !last.iter().any(|(h, _)| *h == host) {
            last.push((host, at));
        }
    }
    assert_eq!(last.len(), 40, "every host reopened: {last:?}");
    // On the grid of 5 ms slots (sent within a millisecond of its slot),
    // one host per slot; within a probe interval of etcd's return, then a
    // period of 200 ms.
    let mut slots = BTreeSet::new();
    for (host, at) in &last {
        let phase = (wall_at_start + at) % 200;
        assert!(
            phase % 5 <= 1,
            "host {host} reopened at {at}, phase {phase}"
        );
        slots.insert(phase / 5);
        assert!(
            (back_at - 100..back_at + 1_250).contains(at),
            "host {host} reopened at {at}, etcd back at {back_at}"
        );
    }
    assert_eq!(slots.len(), 40, "two hosts on one slot: {last:?}");
}
