//! The real `coordctl` binary against real etcd servers (and `etcdctl` as
//! the peer): every subcommand, the exit codes, JSON output, TLS and auth.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use coord_tests::certs::Certs;
use coord_tests::etcd::EtcdCluster;
use coord_tests::etcdctl::Peer;
use nix::sys::signal::Signal;
use serde_json::Value;
use tokio::process::Command;

/// Generous on a loaded 2-core machine.
const DEADLINE: Duration = Duration::from_secs(60);

fn coordctl(endpoints: &[String]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_coordctl"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .arg("--endpoints")
        .arg(endpoints.join(","));
    c
}

/// `coordctl --endpoints ... ARGS...`.
fn ctl(endpoints: &[String], args: &[&str]) -> Command {
    let mut c = coordctl(endpoints);
    c.args(args);
    c
}

fn etcdctl(endpoints: &[String]) -> Command {
    let mut c = Command::new("etcdctl");
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", endpoints.join(",")));
    c
}

/// Runs to completion: exit code, stdout, stderr.
async fn run(mut c: Command) -> (i32, String, String) {
    c.stdin(std::process::Stdio::null());
    let out = tokio::time::timeout(DEADLINE, c.output())
        .await
        .expect("the command finishes")
        .expect("the command runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every line as JSON (a line that does not parse fails the test).
fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The next line of `peer` that parses as JSON with `event` = `want`
/// (other lines are skipped; stderr lines are printed).
async fn next_event(peer: &mut Peer, want: &str) -> Value {
    let start = Instant::now();
    loop {
        let left = DEADLINE.saturating_sub(start.elapsed());
        let line = peer
            .try_line(left)
            .await
            .unwrap_or_else(|| panic!("no {want:?} event within {DEADLINE:?}"));
        if let Some(err) = line.strip_prefix("stderr: ") {
            eprintln!("coordctl: {err}");
            continue;
        }
        let v: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v["ts"].is_string(), "every line has a timestamp: {line}");
        if v["event"] == want {
            return v;
        }
    }
}

async fn keys(endpoints: &[String]) -> Vec<String> {
    let (code, out, err) = run({
        let mut c = etcdctl(endpoints);
        c.args(["get", "", "--prefix", "--keys-only"]);
        c
    })
    .await;
    assert_eq!(code, 0, "{err}");
    out.lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn register_prints_its_lease_and_sigterm_revokes_it() {
    let etcd = EtcdCluster::single().await;
    let eps = etcd.endpoints();
    let mut c = coordctl(&eps);
    c.args([
        "-w",
        "json",
        "register",
        "--id",
        "h1",
        "--hostname",
        "node-1",
    ])
    .args(["--version", "1.2.3", "--ttl", "30"]);
    let mut host = Peer::spawn(c);
    let registered = next_event(&mut host, "registered").await;
    assert_eq!(registered["key"], "/coord/hosts/h1");
    assert!(registered["lease"].is_string());
    let (_, value, _) = run({
        let mut c = etcdctl(&eps);
        c.args(["get", "/coord/hosts/h1", "--print-value-only"]);
        c
    })
    .await;
    let meta: Value = serde_json::from_str(value.trim()).expect("go-coord JSON");
    assert_eq!(meta["host_uuid"], "h1");
    assert_eq!(meta["hostname"], "node-1");
    assert_eq!(meta["version"], "1.2.3");

    host.signal(Signal::SIGTERM);
    let stopped = next_event(&mut host, "stopped").await;
    assert_eq!(stopped["revoked"], true);
    let status = host.wait(DEADLINE).await;
    assert_eq!(status.code(), Some(0));
    // The lease was revoked, not left to expire (TTL 30 s).
    assert!(keys(&eps).await.is_empty(), "the key is gone at exit");
}

#[tokio::test(flavor = "multi_thread")]
async fn hosts_lists_undecodable_metadata_and_watches_ups_and_downs() {
    let etcd = EtcdCluster::single().await;
    let eps = etcd.endpoints();
    let (code, _, err) = run({
        let mut c = etcdctl(&eps);
        c.args(["put", "/coord/hosts/broken", "{not json"]);
        c
    })
    .await;
    assert_eq!(code, 0, "{err}");
    let mut h1 = Peer::spawn(ctl(
        &eps,
        &[
            "-w",
            "json",
            "register",
            "--id",
            "h1",
            "--hostname",
            "node-1",
        ],
    ));
    next_event(&mut h1, "registered").await;

    let (code, out, err) = run(ctl(&eps, &["hosts", "--output", "json"])).await;
    assert_eq!(code, 0, "{err}");
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 2, "{out}");
    let row = |id: &str| rows.iter().find(|r| r["id"] == id).cloned().unwrap();
    assert_eq!(row("h1")["hostname"], "node-1");
    assert!(row("h1")["error"].is_null());
    assert!(row("broken")["error"]
        .as_str()
        .unwrap()
        .contains("does not decode"));
    assert_eq!(row("broken")["raw"], "{not json");

    let (code, table, err) = run({
        let mut c = coordctl(&eps);
        c.arg("hosts");
        c
    })
    .await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("ID"), "{table}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("h1") && l.contains("node-1")),
        "{table}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("broken") && l.contains("does not decode")),
        "{table}"
    );

    let mut watch = Peer::spawn(ctl(&eps, &["-w", "json", "hosts", "--watch"]));
    next_event(&mut watch, "host").await;
    next_event(&mut watch, "host").await;
    let mut h2 = Peer::spawn(ctl(
        &eps,
        &[
            "-w",
            "json",
            "register",
            "--id",
            "h2",
            "--hostname",
            "node-2",
        ],
    ));
    let up = next_event(&mut watch, "up").await;
    assert_eq!(up["id"], "h2");
    assert_eq!(up["hostname"], "node-2");
    h2.signal(Signal::SIGINT);
    assert_eq!(h2.wait(DEADLINE).await.code(), Some(0));
    let down = next_event(&mut watch, "down").await;
    assert_eq!(down["id"], "h2");
    assert_eq!(
        down["hostname"], "node-2",
        "Down carries the last-seen metadata"
    );
    watch.signal(Signal::SIGTERM);
    assert_eq!(watch.wait(DEADLINE).await.code(), Some(0));
    h1.signal(Signal::SIGTERM);
    assert_eq!(h1.wait(DEADLINE).await.code(), Some(0));
}

/// A holder's job: read the counter, sleep, write it plus one (lost
/// updates if two run at once), and record its fencing token: the create
/// revision of its key. coordctl passes it in `COORD_FENCE`; etcdctl's
/// `ETCD_LOCK_REV` is the revision at which it got the lock (later, under
/// contention), so its holders read their key's create revision.
fn holder_script(dir: &Path, endpoints: &[String]) -> PathBuf {
    let script = dir.join("hold.sh");
    let body = format!(
        "n=$(cat {d}/counter)\nsleep 0.02\necho $((n + 1)) > {d}/counter\n\
         if [ -n \"$COORD_FENCE\" ]; then f=$COORD_FENCE; else\n\
         f=$(etcdctl --endpoints={e} get \"$ETCD_LOCK_KEY\" -w fields \
         | sed -n 's/^\"CreateRevision\" : //p'); fi\n\
         echo \"$f\" >> {d}/fences\n",
        d = dir.display(),
        e = endpoints.join(",")
    );
    std::fs::write(&script, body).unwrap();
    script
}

#[tokio::test(flavor = "multi_thread")]
async fn lock_excludes_etcdctl_lock_over_50_handoffs_with_increasing_fences() {
    let etcd = EtcdCluster::single().await;
    let eps = etcd.endpoints();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("counter"), "0\n").unwrap();
    let script = holder_script(dir.path(), &eps);
    let rounds = 13;
    let mut workers = Vec::new();
    for worker in 0..4 {
        let (eps, script) = (eps.clone(), script.clone());
        workers.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let mut c = if worker % 2 == 0 {
                    ctl(&eps, &["lock", "jobs", "--ttl", "10", "--"])
                } else {
                    let mut c = etcdctl(&eps);
                    c.args(["lock", "jobs"]);
                    c
                };
                c.arg("sh").arg(&script);
                let (code, out, err) = run(c).await;
                assert_eq!(code, 0, "worker {worker}: {out}\n{err}");
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let counter = std::fs::read_to_string(dir.path().join("counter")).unwrap();
    assert_eq!(counter.trim(), (4 * rounds).to_string(), "no lost update");
    let fences: Vec<i64> = std::fs::read_to_string(dir.path().join("fences"))
        .unwrap()
        .lines()
        .map(|l| l.parse().expect("a fencing token"))
        .collect();
    assert_eq!(fences.len(), 4 * rounds);
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences increase across coordctl and etcdctl holders: {fences:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn try_lock_on_a_held_lock_exits_124_and_leaves_nothing() {
    let etcd = EtcdCluster::single().await;
    let eps = etcd.endpoints();
    let mut holder = Peer::lock(&eps, "jobs", 30);
    holder.line(DEADLINE).await;
    let before = keys(&eps).await;
    let (code, _, err) = run(ctl(&eps, &["lock", "jobs", "--try", "--", "true"])).await;
    assert_eq!(code, 124, "{err}");
    assert!(err.contains("held"), "{err}");
    let (code, _, err) = run(ctl(
        &eps,
        &["lock", "jobs", "--timeout", "300ms", "--", "true"],
    ))
    .await;
    assert_eq!(code, 124, "{err}");
    assert_eq!(keys(&eps).await, before, "the waiters withdrew");
    holder.interrupt().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_lease_terms_the_command_and_exits_123() {
    let etcd = EtcdCluster::single().await;
    let eps = etcd.endpoints();
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("term");
    let child = dir.path().join("child.sh");
    std::fs::write(
        &child,
        format!(
            "trap 'echo \"$COORD_FENCE $COORD_KEY\" > {}; kill $!; exit 0' TERM\nsleep 1000 &\nwait\n",
            mark.display()
        ),
    )
    .unwrap();
    let mut leader = Peer::spawn({
        let mut c = coordctl(&eps);
        c.args(["-w", "json", "campaign", "batch", "v1", "--ttl", "30"])
            .args(["--grace", "5s", "--", "sh"])
            .arg(&child);
        c
    });
    let elected = next_event(&mut leader, "elected").await;
    next_event(&mut leader, "started").await;
    let lease = elected["lease"].as_str().unwrap().to_string();
    let (code, _, err) = run({
        let mut c = etcdctl(&eps);
        c.args(["lease", "revoke", &lease]);
        c
    })
    .await;
    assert_eq!(code, 0, "{err}");
    next_event(&mut leader, "lost").await;
    let signalled = next_event(&mut leader, "signalled").await;
    assert_eq!(signalled["signal"], "SIGTERM");
    assert_eq!(leader.wait(DEADLINE).await.code(), Some(123));
    let seen = std::fs::read_to_string(&mark).expect("the command got SIGTERM");
    assert_eq!(
        seen.trim(),
        format!("{} {}", elected["fence"], elected["key"].as_str().unwrap()),
        "the command saw COORD_FENCE and COORD_KEY"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_past_its_grace_is_killed() {
    let etcd = EtcdCluster::single().await;
    let eps = etcd.endpoints();
    let mut leader = Peer::spawn({
        let mut c = coordctl(&eps);
        c.args(["-w", "json", "lock", "stubborn", "--grace", "1s", "--"])
            .args(["sh", "-c", "trap '' TERM; sleep 1000 & wait"]);
        c
    });
    let locked = next_event(&mut leader, "locked").await;
    next_event(&mut leader, "started").await;
    let key = locked["key"].as_str().unwrap().to_string();
    let (code, _, err) = run({
        let mut c = etcdctl(&eps);
        c.args(["del", &key]);
        c
    })
    .await;
    assert_eq!(code, 0, "{err}");
    let lost = next_event(&mut leader, "lost").await;
    assert!(lost["reason"].as_str().unwrap().contains("deleted"));
    next_event(&mut leader, "signalled").await;
    let killed = next_event(&mut leader, "signalled").await;
    assert_eq!(killed["signal"], "SIGKILL");
    assert_eq!(leader.wait(DEADLINE).await.code(), Some(123));
}

#[tokio::test(flavor = "multi_thread")]
async fn campaign_leader_and_observe_share_an_election_with_etcdctl_elect() {
    let etcd = EtcdCluster::single().await;
    let eps = etcd.endpoints();
    let mut ours = Peer::spawn(ctl(&eps, &["-w", "json", "campaign", "sched", "coord-1"]));
    let elected = next_event(&mut ours, "elected").await;
    let (code, out, err) = run(ctl(&eps, &["-w", "json", "leader", "sched"])).await;
    assert_eq!(code, 0, "{err}");
    let leader = &json_lines(&out)[0];
    assert_eq!(leader["value"], "coord-1");
    assert_eq!(leader["key"], elected["key"]);
    assert_eq!(leader["fence"], elected["fence"]);

    let mut observer = Peer::spawn(ctl(&eps, &["-w", "json", "observe", "sched"]));
    assert_eq!(
        next_event(&mut observer, "leader").await["value"],
        "coord-1"
    );
    let mut theirs = Peer::elect(&eps, "sched", "etcdctl-2");
    // etcdctl queues behind coordctl's candidate; SIGINT resigns.
    assert!(theirs.try_line(Duration::from_millis(500)).await.is_none());
    ours.signal(Signal::SIGINT);
    assert_eq!(ours.wait(DEADLINE).await.code(), Some(0));
    let their_key = theirs.line(DEADLINE).await;
    assert!(their_key.starts_with("sched/"), "{their_key}");
    let next = next_event(&mut observer, "leader").await;
    let next = if next["value"].is_null() {
        next_event(&mut observer, "leader").await
    } else {
        next
    };
    assert_eq!(next["value"], "etcdctl-2");
    assert_eq!(next["key"], their_key.as_str());
    observer.signal(Signal::SIGTERM);
    assert_eq!(observer.wait(DEADLINE).await.code(), Some(0));
    theirs.interrupt().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_exits_1_or_125_with_a_command_and_writes_nothing() {
    let etcd = EtcdCluster::single().await;
    let eps = etcd.endpoints();
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate").unwrap();
    let garbage = garbage.to_str().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["register", "--id", "a/b"],
        vec!["register", "--id", ".."],
        vec!["register", "--id", ""],
        vec!["register", "--id", "bad\u{7}bell"],
        vec!["register", "--id", "ok", "--ttl", "0"],
        vec!["register", "--id", "ok", "--ttl", "100000"],
        vec!["register"],
        vec!["campaign", "", "v"],
        vec!["campaign", "name/", "v"],
        vec!["campaign", "e", "v", "--ttl", "0"],
        vec!["--command-timeout", "1ms", "register", "--id", "ok"],
        vec!["--command-timeout", "1ms", "lock", "jobs", "--", "true"],
        vec!["lock", "jobs"],
        vec!["lock", "", "--", "true"],
        vec!["lock", "jobs", "--try", "--timeout", "1s", "--", "true"],
        vec!["leader", "bad\nname"],
        vec!["--cacert", "/nonexistent/ca.pem", "hosts"],
        vec!["--cacert", garbage, "hosts"],
        vec!["--cert", garbage, "hosts"],
        vec!["--user", ":pw", "hosts"],
        vec!["--dial-timeout", "soon", "hosts"],
        vec!["no-such-subcommand"],
    ];
    for args in cases {
        let (code, out, err) = run(ctl(&eps, &args)).await;
        // `lock` always runs a command: its bad usage is 125.
        let want = if args.contains(&"lock") { 125 } else { 1 };
        assert_eq!(code, want, "{args:?}: stdout {out:?} stderr {err:?}");
        assert!(!err.trim().is_empty(), "{args:?}: says why");
    }
    assert!(keys(&eps).await.is_empty(), "nothing was written");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_etcd_exits_2_within_the_dial_timeout() {
    let port = coord_tests::etcd::free_ports(1)[0];
    let eps = vec![format!("127.0.0.1:{port}")];
    for args in [
        vec!["hosts"],
        vec!["register", "--id", "h1"],
        vec!["lock", "jobs", "--", "true"],
        vec!["leader", "e"],
    ] {
        let start = Instant::now();
        let (code, _, err) = run({
            let mut c = coordctl(&eps);
            c.args(["--dial-timeout", "1s"]).args(&args);
            c
        })
        .await;
        let want = if args.contains(&"--") { 125 } else { 2 };
        assert_eq!(code, want, "{args:?}: {err}");
        assert!(err.contains("unreachable"), "{args:?}: {err}");
        assert!(start.elapsed() < DEADLINE / 2, "no hang");
    }
}

mod guard;
mod inspect;
mod setups;
