//! A host process: the real `HostLiveness` on a node of its own, recorded
//! as it goes.

use std::time::Duration;

use coord::{HostLiveness, HostMetadata, LivenessOptions, LivenessStatus};
use tokio::sync::broadcast;

use crate::history::Entry;
use crate::world::fleet::{fleet, Variant, World};

/// The key of host `i`.
pub fn host_key(i: usize) -> String {
    format!("{}host-{i}", coord::DEFAULT_PREFIX)
}

/// The driver options every simulated host uses (coord's defaults, but the
/// TTL, a seed per process, and retrying the first registration).
pub fn host_options(ttl_secs: u64, seed: u64) -> LivenessOptions {
    LivenessOptions::default()
        .with_ttl(Duration::from_secs(ttl_secs))
        .with_seed(seed)
        .with_retry_first_registration(true)
}

/// One host process: registers, records every event, stops when told.
pub(crate) async fn agent<W: Variant>(w: World, wrap: W, i: usize, ttl: u64, seed: u64) {
    let (incarnation, mut stop) = {
        let mut f = fleet(&w.fleet);
        f.hosts[i].incarnation += 1;
        (f.hosts[i].incarnation, f.hosts[i].stop.subscribe())
    };
    let client = (u64::try_from(i).unwrap_or(0) << 32) | incarnation;
    let Some(etcd) = w.client(client).await else {
        return;
    };
    let meta = HostMetadata {
        host_uuid: format!("host-{i}"),
        hostname: format!("host-{i}.sim"),
        hypervisor: "madsim".into(),
        version: String::new(),
        started_at_unix_ns: i64::try_from(incarnation).unwrap_or(1),
        extra: serde_json::Map::new(),
    };
    let process_seed = seed ^ client.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let opts = wrap.host_options(host_options(ttl, process_seed));
    let host = match HostLiveness::register(wrap.wrap(etcd), meta, opts).await {
        Ok(h) => h,
        Err(e) => {
            w.record(Entry::Stopped {
                host: i,
                result: Err(e),
            });
            return;
        }
    };
    let mut events = host.subscribe();
    let status = host.state();
    fleet(&w.fleet).hosts[i].status = Some(status.clone());
    loop {
        tokio::select! {
            biased;
            ev = events.recv() => match ev {
                Ok(event) => {
                    w.record(Entry::Event { host: i, incarnation, event });
                    let state_lease = match &*status.borrow() {
                        LivenessStatus::Registered { lease } => Some(lease.0),
                        _ => None,
                    };
                    w.record(Entry::LeaseIdRead {
                        host: i,
                        lease_id: host.lease_id().map(|l| l.0),
                        state_lease,
                    });
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    w.record(Entry::EventsLagged { host: i });
                }
                Err(broadcast::error::RecvError::Closed) => break,
            },
            res = stop.wait_for(|s| *s) => {
                if res.is_ok() {
                    break;
                }
            }
        }
    }
    let result = host.stop().await;
    while let Ok(event) = events.try_recv() {
        w.record(Entry::Event {
            host: i,
            incarnation,
            event,
        });
    }
    w.record(Entry::Stopped { host: i, result });
    let mut state = host.state();
    let ended = madsim::time::timeout(Duration::from_secs(2), async {
        while state.changed().await.is_ok() {}
    })
    .await
    .is_ok();
    w.record(Entry::TaskEnded { host: i, ended });
}
