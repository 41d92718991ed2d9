//! A counted fleet returns on its slots: 40 hosts on the simulated etcd,
//! each with a client (and prober) of its own, take their census, then
//! etcd has no leader for 20 s. Once the probers find etcd silent, no host
//! reopens its keep-alive until etcd answers again; each host's first
//! reopen after that is sent on its slot: wall-clock time ≡ rank × 5 ms
//! (mod 40 × 5 ms), a distinct rank per host.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use coord::etcd::{EtcdApi, EtcdError, Intercept, Intercepted, KeepAliveStream};
use coord::{HostLiveness, HostMetadata, LivenessOptions};
use madsim::runtime::Handle;
use madsim::time::Instant;
use std::future::Future;

use crate::driver_tests::test_fakes::{block_on_within, lock, sim_client, simulated_etcd_node};
use crate::etcd::hooks;

const HOSTS: u64 = 40;

/// When each keep-alive stream was asked for (virtual time since the
/// test's start, ms), by host.
type Opens = Arc<Mutex<Vec<(u64, u64)>>>;

/// Notes when host `host` asks for a keep-alive stream; bends nothing.
#[derive(Clone)]
struct Noting {
    host: u64,
    start: Instant,
    opens: Opens,
}

impl Intercept for Noting {
    fn lease_keep_alive<A: EtcdApi>(
        &self,
        api: &A,
        stream: &KeepAliveStream,
    ) -> impl Future<Output = Result<(A::Keeper, A::Replies), EtcdError>> + Send {
        let at = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        lock(&self.opens).push((self.host, at));
        api.lease_keep_alive(stream.lease)
    }
}

#[test]
fn a_counted_fleet_reopens_on_its_slots_when_etcd_returns() {
    let opens: Opens = Arc::default();
    let noted = Arc::clone(&opens);
    let run = block_on_within(12, async move {
        let etcd = simulated_etcd_node().await?;
        let (addr, start) = (etcd.addr, etcd.start);
        let wall_at_start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
        let client = Handle::current()
            .create_node()
            .name("hosts")
            .ip(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10)))
            .build();
        let hosts = client
            .spawn(async move {
                let mut hosts = Vec::new();
                for h in 0..HOSTS {
                    let noting = Noting {
                        host: h,
                        start,
                        opens: Arc::clone(&noted),
                    };
                    let api = Intercepted::new(sim_client(addr, h + 1, start).await?, noting);
                    let opts = LivenessOptions::default().with_seed(h);
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
        etcd.node
            .spawn(hooks::leader_change(
                etcd.state.clone(),
                etcd.ep.clone(),
                start,
                Duration::from_secs(20),
            ))
            .await
            .map_err(|e| format!("{e:?}"))?;
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
        Ok::<_, String>((wall_at_start, down_at, registered, hosts))
    });
    let (wall_at_start, down_at, registered, _hosts) = match run {
        Ok(r) => r,
        Err(e) => panic!("the run failed: {e}"),
    };
    assert_eq!(registered, 40, "every host is back");
    let back_at = down_at + 20_000;
    let all = lock(&opens).clone();
    // Once the probers found etcd silent (their first probe, refused at
    // once), the hosts' retries wait for its return: the few in the
    // silence are each host's own first ones, sent within a second.
    let in_silence: Vec<&(u64, u64)> = all
        .iter()
        .filter(|(_, at)| (down_at + 1_000..back_at).contains(at))
        .collect();
    assert_eq!(in_silence, Vec::<&(u64, u64)>::new(), "asked a silent etcd");
    // Each host's last reopen: the one etcd answered (sent as it came
    // back, or after).
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
