//! Election, lock and pool processes in the simulation: each runs the real
//! driver (`Election`, `Mutex`, `ElectionPool`) over [`SimEtcd`](crate::etcd::client::SimEtcd), campaigns
//! in a loop (waiting, trying, or waiting with a timeout that withdraws),
//! holds for a while writing to a fenced resource through the guarded
//! transaction, then resigns, unless it loses its leadership first. The
//! observer samples every leadership from outside through its probe.

use std::collections::BTreeMap;
use std::time::Duration;

use coord::{
    Election, ElectionPool, Error, Key, LeaderProbe, Leadership, LeaseId, Mutex, SessionOptions,
    Txn, TxnOp,
};
use madsim::runtime::Handle;
use madsim::time::sleep;
use tokio::sync::watch;

use crate::etcd::server::EtcdState;
use crate::faults::schedule::{Case, ContenderKind, ContenderSpec};
use crate::history::{client_id, resource_key, RESIGNED};
use crate::history::{
    Aftermath, CampaignMode, Condition, ContenderEvent, ContenderSample, Entry, WriteOutcome,
};
use crate::world::fleet::{contender_ip, fleet, ContenderSlot, Proc, Variant, World};

/// The options every contender's session uses: coord's defaults but its
/// TTL, a seed per process, and retrying the first grant.
pub fn session_options(ttl_secs: u64, seed: u64) -> SessionOptions {
    SessionOptions::default()
        .with_ttl(Duration::from_secs(ttl_secs))
        .with_seed(seed)
        .with_retry_first_grant(true)
}

/// Creates a node per contender of `case`.
pub(crate) fn spawn_all<W: Variant>(w: &World, wrap: &W, case: &Case) {
    let handle = Handle::current();
    for (c, spec) in case.contenders.iter().copied().enumerate() {
        let (stop, _) = watch::channel(false);
        fleet(&w.fleet).contenders.push(ContenderSlot {
            proc: Proc::new(w.etcd_node),
            incarnation: 0,
            probes: BTreeMap::new(),
            session: None,
            stop,
            stopped: false,
        });
        let (w2, wrap, names, seed) = (w.clone(), wrap.clone(), case.names_of(c), case.seed);
        let node = handle
            .create_node()
            .name(format!("contender-{c}"))
            .ip(contender_ip(c))
            .init(move || agent(w2.clone(), wrap.clone(), c, spec, names.clone(), seed))
            .build();
        fleet(&w.fleet).contenders[c].proc.node = node.id();
    }
}

/// What a process campaigns with.
#[derive(Clone)]
enum Queue {
    Election(std::sync::Arc<Election>),
    Mutex(std::sync::Arc<Mutex>),
}

impl Queue {
    fn session(&self) -> &coord::Session {
        match self {
            Queue::Election(e) => e.session(),
            Queue::Mutex(m) => m.session(),
        }
    }

    /// Reads the leader through `Election::leader` (a lock has no such
    /// call): `None` for a lock or a failed read.
    async fn read_leader(&self) -> Option<Option<(String, i64, Vec<u8>)>> {
        let Queue::Election(e) = self else {
            return None;
        };
        let leader = e.leader().await.ok()?;
        Some(leader.map(|l| (l.key.to_string(), l.token.0, l.value)))
    }

    /// Steps down: `Leadership::resign` for an election, `unlock` for a
    /// lock.
    async fn release(&self, leadership: Leadership) -> Result<(), Error> {
        match self {
            Queue::Election(_) => leadership.resign().await,
            Queue::Mutex(_) => leadership.unlock().await,
        }
    }

    async fn wait(&self, value: &str) -> Result<Leadership, Error> {
        match self {
            Queue::Election(e) => e.campaign(value).await,
            Queue::Mutex(m) => m.lock().await,
        }
    }

    async fn try_once(&self, value: &str) -> Result<Option<Leadership>, Error> {
        let tried = match self {
            Queue::Election(e) => e.try_campaign(value).await,
            Queue::Mutex(m) => m.try_lock().await,
        };
        match tried {
            Ok(leadership) => Ok(Some(leadership)),
            Err(Error::Locked) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The handle that owns a process's session: closing it revokes the
/// session's lease.
enum Owner {
    Election(std::sync::Arc<Election>),
    Mutex(std::sync::Arc<Mutex>),
    Pool(ElectionPool),
}

impl Owner {
    async fn close(&self) -> Result<(), Error> {
        match self {
            Owner::Election(e) => e.close().await,
            Owner::Mutex(m) => m.close().await,
            Owner::Pool(p) => p.close().await,
        }
    }
}

/// What the handle of a leadership that has ended says: `leads` is its
/// `is_leader()` (asked of the `Leadership` itself while the caller still
/// has it), the rest comes from its probe.
async fn aftermath(leads: bool, probe: &LeaderProbe) -> Aftermath {
    let ended = probe.has_ended();
    let loss = if ended {
        Some(
            probe
                .lost()
                .await
                .map_or(RESIGNED.into(), |l| l.to_string()),
        )
    } else {
        None
    };
    Aftermath { leads, ended, loss }
}

/// One contender process: its session (or pool), a campaign loop per name.
async fn agent<W: Variant>(
    w: World,
    wrap: W,
    c: usize,
    spec: ContenderSpec,
    names: Vec<String>,
    seed: u64,
) {
    let (incarnation, stop) = {
        let mut f = fleet(&w.fleet);
        f.contenders[c].incarnation += 1;
        (
            f.contenders[c].incarnation,
            f.contenders[c].stop.subscribe(),
        )
    };
    let client = client_id(c, incarnation);
    let Some(etcd) = w.client(client).await else {
        return;
    };
    let api = wrap.wrap(etcd);
    let opts = wrap.session_options(session_options(
        spec.ttl,
        seed ^ client.wrapping_mul(0x9E37_79B9_7F4A_7C15),
    ));
    // Each election's name comes from its own `name()`.
    let (owner, queues): (Owner, Vec<(String, Queue)>) = match spec.kind {
        ContenderKind::Candidate => match Election::new(api, "e", opts).await {
            Ok(e) => {
                let e = std::sync::Arc::new(e);
                let queue = (e.name().to_string(), Queue::Election(e.clone()));
                (Owner::Election(e), vec![queue])
            }
            Err(_) => return,
        },
        ContenderKind::Locker => match Mutex::new(api, "l", opts).await {
            Ok(m) => {
                let m = std::sync::Arc::new(m);
                (Owner::Mutex(m.clone()), vec![("l".into(), Queue::Mutex(m))])
            }
            Err(_) => return,
        },
        ContenderKind::Pool => {
            let Ok(pool) = ElectionPool::new(api, opts).await else {
                return;
            };
            let queues = names
                .iter()
                .filter_map(|n| pool.election(n).ok())
                .map(|e| (e.name().to_string(), Queue::Election(e.into())))
                .collect();
            (Owner::Pool(pool), queues)
        }
    };
    let first_name = queues.first().map(|(n, _)| n.clone());
    let session = match &queues.first() {
        Some((_, Queue::Election(e))) => e.session().clone(),
        Some((_, Queue::Mutex(m))) => m.session().clone(),
        None => return,
    };
    if let Some(slot) = fleet(&w.fleet).contenders.get_mut(c) {
        slot.session = Some(session.clone());
    }
    // One stop channel per loop, set in order by one forwarder: several
    // tasks waiting on one tokio watch channel wake in an order drawn from
    // tokio's own RNG, which madsim does not seed (a run would then not be
    // a function of its seed).
    let mut stops = Vec::new();
    let loops: Vec<_> = queues
        .into_iter()
        .map(|(name, queue)| {
            let (tx, rx) = watch::channel(false);
            stops.push(tx);
            let l = Loop {
                w: w.clone(),
                c,
                incarnation,
                name,
                queue,
                stop: rx,
            };
            madsim::task::spawn(l.run())
        })
        .collect();
    let mut stop = stop;
    madsim::task::spawn(async move {
        let _ = stop.wait_for(|s| *s).await;
        for tx in stops {
            tx.send_replace(true);
        }
    });
    for l in loops {
        let _ = l.await;
    }
    let lease = session.lease_id().map(|l| l.0);
    let ok = owner.close().await.is_ok();
    if let Some(name) = first_name {
        w.record(Entry::Contender {
            contender: c,
            incarnation,
            name,
            event: ContenderEvent::Closed { ok, lease },
        });
    }
}

/// One name's campaign loop in a contender process.
struct Loop {
    w: World,
    c: usize,
    incarnation: u64,
    name: String,
    queue: Queue,
    stop: watch::Receiver<bool>,
}

enum End {
    Lost(Option<coord::Loss>),
    Resign,
    Stop,
}

fn random_ms(lo: u64, hi: u64) -> Duration {
    Duration::from_millis(lo + madsim::rand::random::<u64>() % (hi - lo).max(1))
}

impl Loop {
    fn record(&self, event: ContenderEvent) {
        self.w.record(Entry::Contender {
            contender: self.c,
            incarnation: self.incarnation,
            name: self.name.clone(),
            event,
        });
    }

    async fn run(mut self) {
        let value = format!("c{}", self.c);
        loop {
            if *self.stop.borrow() {
                return;
            }
            let roll = madsim::rand::random::<u32>() % 100;
            let mode = match roll {
                0..=66 => CampaignMode::Wait,
                67..=81 => CampaignMode::Try,
                // Withdrawn within a join's round trip or two: the join may
                // land after the withdrawal.
                82..=86 => CampaignMode::WaitAtMost(
                    u64::try_from(random_ms(1, 20).as_millis()).unwrap_or(5),
                ),
                _ => CampaignMode::WaitAtMost(
                    u64::try_from(random_ms(200, 3000).as_millis()).unwrap_or(1000),
                ),
            };
            self.record(ContenderEvent::Started { mode });
            let queue = self.queue.clone();
            let campaign = async {
                match mode {
                    CampaignMode::Wait => queue.wait(&value).await.map(Some),
                    CampaignMode::Try => queue.try_once(&value).await,
                    CampaignMode::WaitAtMost(ms) => {
                        let d = Duration::from_millis(ms);
                        match madsim::time::timeout(d, queue.wait(&value)).await {
                            Ok(r) => r.map(Some),
                            Err(_) => Err(Error::Timeout),
                        }
                    }
                }
            };
            let mut stop = self.stop.clone();
            let result = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return,
                r = campaign => r,
            };
            match result {
                Ok(Some(leadership)) => {
                    if matches!(self.hold(leadership).await, End::Stop) {
                        return;
                    }
                }
                Ok(None) => {
                    self.record(ContenderEvent::TryLost);
                    self.read_leader().await;
                }
                Err(Error::Timeout) => {
                    let lease = self.queue.session().lease_id().map(|l| l.0);
                    self.record(ContenderEvent::Cancelled { lease });
                    if matches!(mode, CampaignMode::WaitAtMost(ms) if ms < 100) {
                        // Stay away long enough for the checker to see the
                        // withdrawn key gone before any new campaign.
                        sleep(Duration::from_secs(7)).await;
                    }
                }
                Err(e) => {
                    let lost = matches!(e, Error::Lost(_));
                    self.record(ContenderEvent::Failed {
                        error: e.to_string(),
                        lost,
                    });
                    sleep(Duration::from_millis(200)).await;
                }
            }
            sleep(random_ms(0, 300)).await;
        }
    }

    /// Reads the leader through the election's public call and records
    /// what it read (nothing for a lock or a failed read).
    async fn read_leader(&self) {
        let since_ms = self.w.now();
        if let Some(leader) = self.queue.read_leader().await {
            self.record(ContenderEvent::LeaderRead { since_ms, leader });
        }
    }

    /// Leads until lost, stopped, or a random hold time passed (then
    /// resigns or, one time in four, drops the handle), writing its token
    /// through the guarded transaction, now and then proclaiming a new
    /// value or reading the leader. Everything goes through the public
    /// `Leadership` calls; the probe is for the samples taken from outside.
    async fn hold(&mut self, leadership: Leadership) -> End {
        let probe = leadership.probe();
        let token = leadership.token();
        let key = leadership.key();
        if let Some(slot) = fleet(&self.w.fleet).contenders.get_mut(self.c) {
            slot.probes.insert(self.name.clone(), probe.clone());
        }
        self.record(ContenderEvent::Elected {
            token: token.0,
            lease: leadership.lease().0,
            key: key.clone(),
            leads: leadership.is_leader(),
            ended: probe.has_ended(),
        });
        let until = madsim::time::Instant::now() + random_ms(500, 4000);
        let mut stop = self.stop.clone();
        let mut proclaimed = 0u32;
        let end = loop {
            tokio::select! {
                biased;
                lost = leadership.lost() => break End::Lost(lost),
                _ = stop.wait_for(|s| *s) => break End::Stop,
                () = sleep(random_ms(200, 400)) => {}
            }
            if madsim::time::Instant::now() >= until {
                break End::Resign;
            }
            match madsim::rand::random::<u32>() % 8 {
                0 => {
                    proclaimed += 1;
                    let value = format!("c{}-{proclaimed}", self.c).into_bytes();
                    let ok = leadership.proclaim(value.clone()).await.is_ok();
                    self.record(ContenderEvent::Proclaimed {
                        token: token.0,
                        key: key.clone(),
                        value,
                        ok,
                    });
                }
                1 => self.read_leader().await,
                _ => {}
            }
            let leads = leadership.is_leader();
            let write = Txn {
                compares: Vec::new(),
                success: vec![TxnOp::Put {
                    key: Key(resource_key(&self.name).into_bytes()),
                    value: token.0.to_string().into_bytes(),
                    lease: LeaseId(0),
                }],
                failure: Vec::new(),
            };
            let since_ms = self.w.now();
            let outcome = match leadership.txn(write).await {
                Ok(_) => WriteOutcome::Applied,
                Err(Error::NotLeader) => WriteOutcome::NotLeader,
                Err(_) => WriteOutcome::Failed,
            };
            self.record(ContenderEvent::Write {
                since_ms,
                token: token.0,
                outcome,
                leads,
            });
        };
        if let Some(slot) = fleet(&self.w.fleet).contenders.get_mut(self.c) {
            slot.probes.remove(&self.name);
        }
        match &end {
            End::Lost(reason) => {
                let after = aftermath(leadership.is_leader(), &probe).await;
                self.record(ContenderEvent::Lost {
                    reason: reason.as_ref().map_or(RESIGNED.into(), ToString::to_string),
                    after,
                });
            }
            End::Resign if madsim::rand::random::<u32>().is_multiple_of(4) => {
                self.record(ContenderEvent::Dropped {
                    token: token.0,
                    key,
                });
                drop(leadership);
            }
            End::Resign => {
                self.record(ContenderEvent::Resigning);
                let ok = self.queue.release(leadership).await.is_ok();
                let after = aftermath(probe.is_leader(), &probe).await;
                self.record(ContenderEvent::Resigned { ok, after });
            }
            End::Stop => drop(leadership),
        }
        end
    }
}

/// Every contender's leaderships now, judged from outside the process.
pub(crate) fn sample(w: &World, st: &EtcdState) -> Vec<ContenderSample> {
    let f = fleet(&w.fleet);
    // Ascending, as etcd's leases are kept.
    let live = st.model.leases();
    let is_live = |lease: &i64| live.binary_search(lease).is_ok();
    // Each client's live leases, ascending.
    let mut live_of: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for lease in &live {
        if let Some(life) = st.lease_log.get(lease) {
            live_of.entry(life.client).or_default().push(*lease);
        }
    }
    f.contenders
        .iter()
        .enumerate()
        .map(|(c, slot)| {
            let believes = match slot.proc.condition {
                Condition::Crashed => Vec::new(),
                _ => slot
                    .probes
                    .iter()
                    .filter(|(_, p)| p.is_leader())
                    .map(|(name, p)| {
                        let present = st.model.get(p.key().as_bytes()).is_some();
                        (name.clone(), p.key().to_string(), p.token().0, present)
                    })
                    .collect(),
            };
            let me = client_id(c, slot.incarnation);
            let leases = live_of.get(&me).cloned().unwrap_or_default();
            let session_lease = match slot.proc.condition {
                Condition::Crashed => None,
                _ => slot
                    .session
                    .as_ref()
                    .and_then(coord::Session::lease_id)
                    .map(|l| (l.0, is_live(&l.0))),
            };
            let leaderships = match slot.proc.condition {
                Condition::Crashed => Vec::new(),
                _ => slot
                    .probes
                    .iter()
                    .map(|(name, p)| (name.clone(), p.lease().0, p.has_ended()))
                    .collect(),
            };
            ContenderSample {
                condition: slot.proc.condition,
                believes,
                leases,
                session_lease,
                leaderships,
            }
        })
        .collect()
}

/// Tells every contender to stop (resign and close).
pub(crate) fn stop_all(w: &World) {
    for slot in fleet(&w.fleet).contenders.iter_mut() {
        slot.stopped = true;
        slot.stop.send_replace(true);
    }
}
