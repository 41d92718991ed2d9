//! Benchmark 7, watcher throughput and CPU: a writer process puts JSON
//! host records (`HostMetadata`) over a set of hosts as fast as etcd takes
//! them; a `HostWatcher` takes every event, against a raw etcd-client
//! watch loop that decodes the same JSON. Measured in this process, which
//! does nothing else meanwhile: events per second from the first event to
//! the last, and CPU time (user + system, `getrusage`) per event.

use std::time::{Duration, Instant};

use coord::{Driving, HostEvent, HostMetadata, HostWatcher, WatcherOptions};
use coord_tests::etcd::EtcdCluster;
use etcd_client::{EventType, GetOptions, PutOptions, WatchOptions};
use tokio::process::Command;

use crate::metrics::cpu_us;
use crate::stats::{Comparison, Series, Statistic};
use crate::{Rng, Settings};

const DEADLINE: Duration = Duration::from_secs(300);

/// What one consumer run measured.
struct Measured {
    events_per_s: f64,
    cpu_us_per_event: f64,
}

/// Runs the benchmark: `s.rounds` rounds, each a coord run per `Driving`
/// and a raw run.
pub async fn run(etcd: &EtcdCluster, s: &Settings, rng: &mut Rng) -> Vec<Comparison> {
    let (hosts, puts) = (s.hosts, s.puts);
    let mut rate = (Vec::new(), Vec::new());
    let mut cpu = (Vec::new(), Vec::new());
    let mut in_next = (Vec::new(), Vec::new());
    let mut own_task = Vec::new();
    for round in 0..s.rounds {
        let tag = rng.below(u64::MAX);
        let prefix = format!("/bench/watch/{tag:x}-c{round}/");
        match coord_consumer(etcd, &prefix, hosts, puts, Driving::Adaptive).await {
            Some(m) => {
                rate.0.push(m.events_per_s);
                cpu.0.push(m.cpu_us_per_event);
            }
            None => eprintln!("coord-bench: a coord watcher round timed out; left out"),
        }
        let prefix = format!("/bench/watch/{tag:x}-i{round}/");
        match coord_consumer(etcd, &prefix, hosts, puts, Driving::InNext).await {
            Some(m) => {
                in_next.0.push(m.events_per_s);
                in_next.1.push(m.cpu_us_per_event);
            }
            None => eprintln!("coord-bench: an in-next coord watcher round timed out; left out"),
        }
        let prefix = format!("/bench/watch/{tag:x}-o{round}/");
        match coord_consumer(etcd, &prefix, hosts, puts, Driving::OwnTask).await {
            Some(m) => own_task.push(m.cpu_us_per_event),
            None => eprintln!("coord-bench: an own-task coord watcher round timed out; left out"),
        }
        let prefix = format!("/bench/watch/{tag:x}-r{round}/");
        match raw_consumer(etcd, &prefix, hosts, puts).await {
            Some(m) => {
                rate.1.push(m.events_per_s);
                cpu.1.push(m.cpu_us_per_event);
            }
            None => eprintln!("coord-bench: a raw watch round timed out; left out"),
        }
    }
    let coord_name = "coord (HostWatcher)".to_string();
    let raw_name = "etcd-client watch + serde_json".to_string();
    vec![
        Comparison {
            id: "watcher-cpu-in-next".into(),
            title: format!(
                "Watcher CPU per event, loop driven by next(): {puts} puts over {hosts} hosts"
            ),
            unit: "us/event",
            lower_is_better: true,
            coord: Series {
                subject: "coord (HostWatcher, Driving::InNext)".to_string(),
                values: in_next.1,
            },
            baseline: Series {
                subject: raw_name.clone(),
                values: cpu.1.clone(),
            },
            ratio_of: Statistic::Median,
            note: None,
        },
        Comparison {
            id: "watcher-rate-in-next".into(),
            title: format!(
                "Watcher throughput, loop driven by next(): {puts} puts over {hosts} hosts"
            ),
            unit: "events/s",
            lower_is_better: false,
            coord: Series {
                subject: "coord (HostWatcher, Driving::InNext)".to_string(),
                values: in_next.0,
            },
            baseline: Series {
                subject: raw_name.clone(),
                values: rate.1.clone(),
            },
            ratio_of: Statistic::Median,
            note: None,
        },
        Comparison {
            id: "watcher-cpu-own-task".into(),
            title: format!(
                "Watcher CPU per event, loop always on its own task: {puts} puts over {hosts} hosts"
            ),
            unit: "us/event",
            lower_is_better: true,
            coord: Series {
                subject: "coord (HostWatcher, Driving::OwnTask)".to_string(),
                values: own_task,
            },
            baseline: Series {
                subject: raw_name.clone(),
                values: cpu.1.clone(),
            },
            ratio_of: Statistic::Median,
            note: None,
        },
        Comparison {
            id: "watcher-cpu".into(),
            title: format!("Watcher CPU per event: {puts} puts over {hosts} hosts"),
            unit: "us/event",
            lower_is_better: true,
            coord: Series {
                subject: coord_name.clone(),
                values: cpu.0,
            },
            baseline: Series {
                subject: raw_name.clone(),
                values: cpu.1,
            },
            ratio_of: Statistic::Median,
            note: None,
        },
        Comparison {
            id: "watcher-rate".into(),
            title: format!("Watcher throughput: {puts} puts over {hosts} hosts"),
            unit: "events/s",
            lower_is_better: false,
            coord: Series {
                subject: coord_name,
                values: rate.0,
            },
            baseline: Series {
                subject: raw_name,
                values: rate.1,
            },
            ratio_of: Statistic::Median,
            note: Some(
                "events/s from the first event to the last; the writer puts 64 at a time".into(),
            ),
        },
    ]
}

/// Starts the writer process: `puts` puts over `hosts` hosts under
/// `prefix`.
fn writer(endpoint: &str, prefix: &str, hosts: usize, puts: usize) -> tokio::process::Child {
    Command::new(std::env::current_exe().expect("own path"))
        .args([
            "__writer",
            endpoint,
            prefix,
            &hosts.to_string(),
            &puts.to_string(),
        ])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the writer")
}

async fn coord_consumer(
    etcd: &EtcdCluster,
    prefix: &str,
    hosts: usize,
    puts: usize,
    driving: Driving,
) -> Option<Measured> {
    let mut watcher = HostWatcher::<HostMetadata>::new(
        etcd.coord_client().await,
        WatcherOptions::default()
            .with_prefix(prefix)
            .with_buffer(65_536)
            .with_driving(driving),
    )
    .await
    .ok()?;
    let mut w = writer(&etcd.endpoints()[0], prefix, hosts, puts);
    let mut meter = Meter::new(puts);
    while !meter.done() {
        let event = tokio::time::timeout(meter.left()?, watcher.next())
            .await
            .ok()??;
        if matches!(event, HostEvent::Up { .. } | HostEvent::Updated { .. }) {
            meter.count();
        }
    }
    let m = meter.finish();
    let _ = w.wait().await;
    m
}

async fn raw_consumer(
    etcd: &EtcdCluster,
    prefix: &str,
    hosts: usize,
    puts: usize,
) -> Option<Measured> {
    let mut client = etcd.client().await;
    let start = client
        .get("/", Some(GetOptions::new().with_count_only()))
        .await
        .ok()?;
    let revision = start.header()?.revision();
    let mut stream = client
        .watch(
            prefix,
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(revision + 1),
            ),
        )
        .await
        .ok()?;
    let mut w = writer(&etcd.endpoints()[0], prefix, hosts, puts);
    let mut meter = Meter::new(puts);
    while !meter.done() {
        let msg = tokio::time::timeout(meter.left()?, stream.message())
            .await
            .ok()?
            .ok()??;
        for e in msg.events() {
            if e.event_type() != EventType::Put {
                continue;
            }
            let Some(kv) = e.kv() else { continue };
            // Decode the same JSON the watcher decodes.
            if serde_json::from_slice::<HostMetadata>(kv.value()).is_ok() {
                meter.count();
            }
        }
    }
    let m = meter.finish();
    let _ = w.wait().await;
    m
}

/// Counts a consumer's events up to a target, timing them from the first
/// to the last (wall clock and this process's CPU), within [`DEADLINE`].
struct Meter {
    target: usize,
    seen: usize,
    until: Instant,
    /// When the first event was counted: (wall clock, CPU µs).
    first: Option<(Instant, f64)>,
}

impl Meter {
    fn new(target: usize) -> Meter {
        Meter {
            target,
            seen: 0,
            until: Instant::now() + DEADLINE,
            first: None,
        }
    }

    /// Time left before the deadline; `None` once it passed.
    fn left(&self) -> Option<Duration> {
        self.until.checked_duration_since(Instant::now())
    }

    fn done(&self) -> bool {
        self.seen >= self.target
    }

    fn count(&mut self) {
        if self.first.is_none() {
            self.first = Some((Instant::now(), cpu_us()));
        }
        self.seen += 1;
    }

    /// The rate and CPU per event from the first event to now. The first
    /// event's own cost is not counted, so both divide by the events after
    /// it.
    fn finish(&self) -> Option<Measured> {
        let (t0, c0) = self.first?;
        let (t1, c1) = (Instant::now(), cpu_us());
        let n = self.seen.saturating_sub(1).max(1) as f64;
        let secs = t1.saturating_duration_since(t0).as_secs_f64().max(1e-9);
        Some(Measured {
            events_per_s: n / secs,
            cpu_us_per_event: (c1 - c0) / n,
        })
    }
}

/// The writer process (`coord-bench __writer ENDPOINT PREFIX HOSTS PUTS`):
/// puts a changing record of host `i % HOSTS` for each `i < PUTS`, 64 at a
/// time.
pub async fn write(args: &[String]) -> Result<(), String> {
    let [endpoint, prefix, hosts, puts] = args else {
        return Err("usage: coord-bench __writer ENDPOINT PREFIX HOSTS PUTS".into());
    };
    let hosts: usize = hosts.parse().map_err(|_| "HOSTS: a number")?;
    let puts: usize = puts.parse().map_err(|_| "PUTS: a number")?;
    let client = etcd_client::Client::connect([endpoint.as_str()], None)
        .await
        .map_err(|e| e.to_string())?;
    let mut tasks = Vec::new();
    let lanes = 64.min(puts.max(1));
    for lane in 0..lanes {
        let mut client = client.clone();
        let prefix = prefix.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = lane;
            while i < puts {
                let host = format!("host-{:05}", i % hosts.max(1));
                let meta = HostMetadata {
                    version: format!("v{i}"),
                    ..HostMetadata::new(&host, format!("{host}.bench"))
                };
                let value = serde_json::to_vec(&meta).map_err(|e| e.to_string())?;
                client
                    .put(format!("{prefix}{host}"), value, None::<PutOptions>)
                    .await
                    .map_err(|e| e.to_string())?;
                i += lanes;
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}
