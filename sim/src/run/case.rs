//! One case's run: etcd and the world built on madsim nodes; phase 1
//! injects the case's faults, phase 2 heals everything and waits for the
//! longer of the heal, watcher and election bounds plus a settled
//! stretch; then every process is stopped and the run goes on for two
//! TTLs, so that a key reappearing after stop (or a watcher missing the
//! Downs) would be seen.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use madsim::net::Endpoint;
use madsim::runtime::Handle;
use madsim::task::NodeId;
use madsim::time::{sleep, sleep_until, Instant};
use tokio::sync::watch;

use crate::history::{host_index, Entry, History, KeyChange, Recorder, SeenRecord};

use crate::check::bounds::{election_bound, heal_bound, watcher_bound, SETTLED};

use crate::etcd::server::{self, lock};
use crate::faults::schedule::{Case, WATCHERS};
use crate::world::process::Proc;

use crate::faults::inject::{heal_all, inject};
use crate::world::fleet::{
    fleet, host_ip, watcher_ip, Slot, Variant, WatcherSlot, World, ETCD_IP, ETCD_PORT,
};
use crate::world::hosts::agent;
use crate::world::sampler::sample_forever;
use crate::world::watchers::watcher_agent;

/// Runs `case` inside the current madsim runtime and returns its history.
pub async fn run<W: Variant>(case: &Case, wrap: W) -> History {
    let handle = Handle::current();
    let start = Instant::now();
    let etcd = server::new_state();
    let etcd_node = handle
        .create_node()
        .name("etcd")
        .ip(IpAddr::V4(ETCD_IP))
        .build();
    let etcd_ep = match etcd_node
        .spawn(Endpoint::bind(SocketAddr::from((ETCD_IP, ETCD_PORT))))
        .await
    {
        Ok(Ok(ep)) => ep,
        _ => return History::default(),
    };
    etcd_node.spawn(server::serve(etcd.clone(), etcd_ep.clone(), start));
    etcd_node.spawn(server::lessor(etcd.clone(), start));
    etcd_node.spawn(server::flush_watches(etcd.clone(), etcd_ep.clone()));

    let world = World {
        start,
        etcd,
        etcd_node: etcd_node.id(),
        etcd_ep,
        fleet: Arc::default(),
        recorder: Recorder::default(),
        log: crate::etcd::client::ClientLog::new(start),
    };
    for i in 0..WATCHERS {
        let w = world.clone();
        let wrap = wrap.clone();
        let seed = case.seed;
        let names = case.names();
        let generator = case.generator;
        // The slot exists before the node, whose init reads it.
        fleet(&world.fleet).watchers.push(WatcherSlot {
            proc: Proc::new(etcd_node.id()),
            view: None,
            status: None,
            stall_until: 0,
        });
        let node = handle
            .create_node()
            .name(format!("watcher-{i}"))
            .ip(watcher_ip(i))
            .init(move || {
                let opts = (i, seed, generator);
                watcher_agent(w.clone(), wrap.clone(), opts, names.clone())
            })
            .build();
        fleet(&world.fleet).watchers[i].proc.node = node.id();
    }
    for (i, ttl) in case.ttls.iter().copied().enumerate() {
        let (stop, _) = watch::channel(false);
        fleet(&world.fleet).hosts.push(Slot {
            proc: Proc::new(etcd_node.id()),
            status: None,
            incarnation: 0,
            stop,
            stopped: false,
        });
        let w = world.clone();
        let wrap = wrap.clone();
        let seed = case.seed;
        let node = handle
            .create_node()
            .name(format!("host-{i}"))
            .ip(host_ip(i))
            .init(move || agent(w.clone(), wrap.clone(), i, ttl, seed))
            .build();
        fleet(&world.fleet).hosts[i].proc.node = node.id();
    }
    crate::world::contenders::spawn_all(&world, &wrap, case);
    let sampler = madsim::task::spawn(sample_forever(world.clone()));

    for tf in &case.faults {
        sleep_until(start + Duration::from_millis(tf.at_ms)).await;
        inject(&world, case, &tf.fault);
    }
    sleep_until(start + Duration::from_millis(case.phase1_ms)).await;
    heal_all(&world);
    world.record(Entry::HealAll);
    let mut settle = heal_bound().max(watcher_bound()) + SETTLED;
    if !case.contenders.is_empty() {
        // Room for the election checks' windows after their bound.
        settle = settle.max(election_bound(case) + 2 * SETTLED);
    }
    sleep(settle).await;

    world.record(Entry::StopAll);
    for slot in fleet(&world.fleet).hosts.iter_mut() {
        slot.stopped = true;
        slot.stop.send_replace(true);
    }
    crate::world::contenders::stop_all(&world);
    let max_ttl = case.ttls.iter().copied().max().unwrap_or(2).max(2);
    sleep(Duration::from_secs(2 * max_ttl) + Duration::from_secs(10)).await;
    sampler.abort();
    let anomalies = world
        .log
        .anomalies
        .load(std::sync::atomic::Ordering::Relaxed);
    world.record(Entry::SimulatorAnomalies(anomalies));
    let (times, grants, changes, puts, lease_log) = {
        let st = lock(&world.etcd);
        let prefix = coord::DEFAULT_PREFIX.as_bytes();
        let changes = st
            .key_changes
            .iter()
            .filter_map(|(at, key, rev, present, history)| {
                let host = std::str::from_utf8(key.strip_prefix(prefix)?).ok()?;
                Some(KeyChange {
                    at_ms: *at,
                    host: host_index(host)?,
                    revision: *rev,
                    present: *present,
                    history: *history,
                })
            })
            .collect();
        let puts: Vec<(u64, usize, SeenRecord)> = st
            .host_puts
            .iter()
            .filter_map(|p| {
                let host = std::str::from_utf8(p.key.strip_prefix(prefix)?).ok()?;
                Some((p.at_ms, host_index(host)?, p.record.clone()))
            })
            .collect();
        (
            st.revision_times.clone(),
            st.grant_times.clone(),
            changes,
            puts,
            st.lease_log.clone(),
        )
    };
    let heal_requests = world
        .log
        .heal_sends
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    world.record(Entry::HostPuts(puts));
    world.record(Entry::RevisionTimes(times));
    if !case.contenders.is_empty() {
        let (log, unanswered) = {
            let st = lock(&world.etcd);
            (st.other_changes.clone(), st.joins_unanswered.clone())
        };
        world.record(Entry::ElectionLog(log));
        world.record(Entry::JoinsUnanswered(unanswered));
    }
    world.record(Entry::LeaseLog(lease_log));
    world.record(Entry::GrantTimes(grants));
    world.record(Entry::HealRequests(heal_requests));
    world.record(Entry::KeyChanges(changes));
    let history = world.recorder.take();
    // Tear the simulation down: the nodes' tasks and init closures hold the
    // world (and madsim handles) in cycles that dropping the runtime alone
    // does not free.
    let nodes: Vec<NodeId> = {
        let f = fleet(&world.fleet);
        f.hosts
            .iter()
            .map(|s| s.proc.node)
            .chain(f.watchers.iter().map(|s| s.proc.node))
            .chain(f.contenders.iter().map(|s| s.proc.node))
            .collect()
    };
    for node in nodes {
        handle.kill(node);
    }
    handle.kill(world.etcd_node);
    history
}
