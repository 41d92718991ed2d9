//! Two of the examples, run as a user runs them, against a real etcd: the
//! agent (registers, watches, leads, and leaves nothing behind on SIGTERM)
//! and the fenced writer (its stale write refused by etcd).

#![cfg(not(madsim))]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use coord_tests::etcd::EtcdCluster;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// Generous on a loaded 2-core machine.
const DEADLINE: Duration = Duration::from_secs(60);

/// The example's binary, which `cargo test` builds beside this test.
fn example(name: &str) -> Command {
    let exe = std::env::current_exe().unwrap();
    let dir: PathBuf = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo test -p etcd-coord` (which builds the examples), or `cargo build --examples` first",
        path.display()
    );
    let mut c = Command::new(path);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    c
}

/// Reads lines until one starts with `prefix`, returning it.
async fn line_starting(lines: &mut Lines<BufReader<ChildStdout>>, prefix: &str) -> String {
    tokio::time::timeout(DEADLINE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with(prefix) {
                return line;
            }
        }
        panic!("the example ended without printing {prefix:?}");
    })
    .await
    .unwrap_or_else(|_| panic!("no line {prefix:?} within {DEADLINE:?}"))
}

/// The number after the last space of `line`.
fn last_number(line: &str) -> i64 {
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

async fn exit_ok(child: &mut Child) {
    let status = tokio::time::timeout(DEADLINE, child.wait())
        .await
        .expect("the example did not exit")
        .unwrap();
    assert!(status.success(), "the example exited with {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_registers_leads_and_leaves_nothing_behind_on_sigterm() {
    let etcd = EtcdCluster::single().await;
    let mut kv = etcd.client().await;
    let mut agent = example("agent")
        .env("ETCD_ENDPOINTS", etcd.endpoints().join(","))
        .env("AGENT_ID", "agent-under-test")
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(agent.stdout.take().unwrap()).lines();
    line_starting(&mut lines, "registered /coord/hosts/agent-under-test").await;
    let token =
        last_number(&line_starting(&mut lines, "leading scheduler with fencing token").await);
    // Its own host, seen through its watcher.
    line_starting(&mut lines, "agent-under-test is up").await;

    // What it wrote is in etcd: its host key, and its candidate key, whose
    // create revision is the token it printed.
    let host = kv.get("/coord/hosts/agent-under-test", None).await.unwrap();
    assert_eq!(host.kvs().len(), 1, "the host key is there");
    let meta: serde_json::Value = serde_json::from_slice(host.kvs()[0].value()).unwrap();
    assert_eq!(meta["host_uuid"], "agent-under-test");
    let queue = kv
        .get(
            "scheduler/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    assert_eq!(queue.kvs().len(), 1, "one candidate, leading");
    assert_eq!(queue.kvs()[0].create_revision(), token);
    assert_eq!(queue.kvs()[0].value(), b"agent-under-test");

    kill(
        Pid::from_raw(i32::try_from(agent.id().unwrap()).unwrap()),
        Signal::SIGTERM,
    )
    .unwrap();
    line_starting(&mut lines, "stopped").await;
    exit_ok(&mut agent).await;
    let host = kv.get("/coord/hosts/agent-under-test", None).await.unwrap();
    assert!(
        host.kvs().is_empty(),
        "the host key was revoked with its lease"
    );
    let queue = kv
        .get(
            "scheduler/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    assert!(queue.kvs().is_empty(), "the candidate key was resigned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fenced_writer_writes_while_leading_and_is_refused_after() {
    let etcd = EtcdCluster::single().await;
    let mut kv = etcd.client().await;
    let mut writer = example("leader_fenced_writes")
        .env("ETCD_ENDPOINTS", etcd.endpoints().join(","))
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(writer.stdout.take().unwrap()).lines();
    let token =
        last_number(&line_starting(&mut lines, "leading jobs-leader with fencing token").await);
    assert_eq!(
        line_starting(&mut lines, "jobs started by this leader").await,
        "jobs started by this leader: true"
    );
    line_starting(
        &mut lines,
        "refused once the lead was lost: nothing applied",
    )
    .await;
    exit_ok(&mut writer).await;

    let owner = kv.get("/jobs/owner", None).await.unwrap();
    assert_eq!(
        owner.kvs()[0].value_str().unwrap(),
        format!("writer-1, token {token}")
    );
    assert_eq!(
        owner.kvs()[0].version(),
        1,
        "the stale write was not applied"
    );
    let started = kv.get("/jobs/started", None).await.unwrap();
    assert_eq!(started.kvs()[0].value_str().unwrap(), token.to_string());
    let queue = kv
        .get(
            "jobs-leader/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    assert!(queue.kvs().is_empty(), "nothing left in the queue");
}
