//! The testkit's example in full: a job scheduler whose leader must never
//! run a job twice, tested under GC pauses of each scheduler in turn. The
//! scheduler as it should be (it claims each job with one transaction
//! fenced by its leadership) passes every seed; the same scheduler with a
//! planted bug (it checks that a job is not done, runs it, then marks it
//! done) runs a job twice when its leader is paused mid-job, and the same
//! scenario catches it.

#![cfg(madsim)]

use std::collections::BTreeMap;
use std::time::Duration;

use coord::{Compare, CompareOp, Election, Get, Revision, SessionOptions, Txn, TxnOp};
use coord_sim::testkit::{self, Cluster, Failure, Outcome, Recorder, SimEtcd};

/// Jobs to run, each exactly once.
const JOBS: u32 = 20;

/// How a leader makes sure nobody ran a job before it runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// One transaction, fenced by the leadership: the job's key is put
    /// only if it is absent and this leadership still holds.
    Fenced,
    /// The planted bug: read the job's key, run the job if absent, then
    /// put the key (fenced, but too late: the check and the run are not
    /// one step).
    CheckThenMark,
}

/// One run of a job: which, and by whom.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ran {
    job: u32,
    by: String,
}

/// A scheduler: campaigns for the lead and, while it leads, runs every
/// job not run yet, each taking 300 ms; then holds the lead until it
/// loses it, and campaigns again.
async fn scheduler(etcd: SimEtcd, me: String, claim: Claim, ran: Recorder<Ran>) {
    let opts = SessionOptions::default().with_ttl(Duration::from_secs(2));
    let Ok(election) = Election::new(etcd, "scheduler", opts).await else {
        return;
    };
    loop {
        let Ok(leader) = election.campaign(me.clone()).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        for job in 0..JOBS {
            let key = format!("/jobs/{job}");
            let run = match claim {
                Claim::Fenced => {
                    let claim = Txn::new()
                        .when([Compare::create_revision(
                            key.as_str(),
                            CompareOp::Equal,
                            Revision(0),
                        )])
                        .and_then([TxnOp::put(key.as_str(), me.clone())]);
                    match leader.txn(claim).await {
                        Ok(claimed) => claimed.succeeded,
                        Err(_) => break,
                    }
                }
                Claim::CheckThenMark => {
                    let read = Txn::new().and_then([TxnOp::get(Get::key(key.as_str().into()))]);
                    match leader.txn(read).await {
                        Ok(r) => r.kvs(0).is_some_and(<[_]>::is_empty),
                        Err(_) => break,
                    }
                }
            };
            if !run {
                continue;
            }
            ran.record(Ran {
                job,
                by: me.clone(),
            });
            tokio::time::sleep(Duration::from_millis(300)).await;
            if claim == Claim::CheckThenMark {
                let mark = Txn::new().and_then([TxnOp::put(key.as_str(), me.clone())]);
                if leader.txn(mark).await.is_err() {
                    break;
                }
            }
        }
        let _ = leader.lost().await;
    }
}

/// Three schedulers; each in turn is paused for 4 s (twice its TTL, so a
/// paused leader loses the lead), then all run undisturbed. Every job
/// must have run exactly once.
async fn scenario(cluster: Cluster, claim: Claim) -> Result<(), String> {
    let ran = Recorder::new(&cluster);
    let nodes: Vec<_> = (0..3)
        .map(|i| {
            let ran = ran.clone();
            cluster.node(&format!("scheduler-{i}"), move |etcd| {
                scheduler(etcd, format!("s{i}"), claim, ran.clone())
            })
        })
        .collect();
    for node in &nodes {
        cluster.sleep(Duration::from_millis(700)).await;
        cluster.pause(node);
        cluster.sleep(Duration::from_secs(4)).await;
        cluster.resume(node);
    }
    cluster.sleep(Duration::from_secs(15)).await;
    let mut runs: BTreeMap<u32, Vec<(Duration, String)>> = BTreeMap::new();
    for entry in ran.entries() {
        runs.entry(entry.event.job)
            .or_default()
            .push((entry.at, entry.event.by));
    }
    if let Some((job, twice)) = runs.iter().find(|(_, r)| r.len() > 1) {
        return Err(format!("job {job} ran more than once: {twice:?}"));
    }
    let missing: Vec<u32> = (0..JOBS).filter(|j| !runs.contains_key(j)).collect();
    if !missing.is_empty() {
        return Err(format!("jobs never run: {missing:?}"));
    }
    Ok(())
}

fn fenced(cluster: Cluster) -> impl std::future::Future<Output = Result<(), String>> {
    scenario(cluster, Claim::Fenced)
}

fn check_then_mark(cluster: Cluster) -> impl std::future::Future<Output = Result<(), String>> {
    scenario(cluster, Claim::CheckThenMark)
}

#[test]
fn a_fenced_scheduler_runs_every_job_once_under_pauses() {
    let failure = testkit::find_failure(1..=20, fenced);
    assert_eq!(failure, None);
}

#[test]
fn a_scheduler_that_checks_then_marks_is_caught_running_a_job_twice() {
    let Some(Failure { seed, outcome }) = testkit::find_failure(1..=20, check_then_mark) else {
        panic!("the planted double run went unseen in 20 seeds");
    };
    let Outcome::Failed(why) = &outcome else {
        panic!("seed {seed}: {outcome:?}");
    };
    assert!(why.contains("ran more than once"), "seed {seed}: {why}");
    println!("caught by seed {seed}: {why}");
    // The seed replays the failure exactly.
    let replayed = testkit::run(seed, check_then_mark);
    assert_eq!(replayed, Ok(Err(why.clone())));
}

#[test]
fn a_run_is_a_function_of_its_seed() {
    let record = |cluster: Cluster| async move {
        let ran = Recorder::new(&cluster);
        let r = ran.clone();
        let node = cluster.node("scheduler", move |etcd| {
            scheduler(etcd, "s".into(), Claim::Fenced, r.clone())
        });
        cluster.sleep(Duration::from_secs(2)).await;
        cluster.crash(&node);
        cluster.etcd_leader_change(Duration::from_millis(500));
        cluster.sleep(Duration::from_secs(1)).await;
        cluster.restart(&node);
        cluster.sleep(Duration::from_secs(10)).await;
        ran.entries()
    };
    let first = testkit::run(7, record);
    assert!(
        first.as_ref().is_ok_and(|r| r.len() == JOBS as usize),
        "{first:?}"
    );
    assert_eq!(first, testkit::run(7, record));
}

#[test]
fn a_panic_in_a_node_ends_the_run_with_its_message() {
    let run = testkit::run(9, |cluster: Cluster| async move {
        cluster.node("faulty", |_etcd| async move {
            panic!("planted in a node");
        });
        cluster.sleep(Duration::from_secs(1)).await;
    });
    assert!(
        matches!(&run, Err(testkit::RunError::Panicked { seed: 9, message }) if message.contains("planted in a node")),
        "{run:?}"
    );
}

#[test]
fn a_panicking_scenario_is_reported_with_its_seed() {
    let failure = testkit::find_failure(3..=5, |_cluster: Cluster| async move {
        if true {
            panic!("planted");
        }
        Ok::<(), String>(())
    });
    assert!(
        matches!(&failure, Some(Failure { seed: 3, outcome: Outcome::Panicked(m) }) if m.contains("planted")),
        "{failure:?}"
    );
}
