//! A command never outlives its hold: coordctl killed with SIGKILL under
//! each backend, its command is stopped by the guard, and the next holder
//! starts only once it is gone.

use super::*;

/// Where a lock lives, as `coordctl lock` flags name it.
struct Backend {
    name: &'static str,
    flags: Vec<String>,
    endpoints: Vec<String>,
}

/// The first holder's command: writes its pid, and on SIGTERM takes half a
/// second to stop, then writes `stopped`, unless `stubborn`, when it
/// ignores SIGTERM (and is SIGKILLed).
fn first_command(dir: &Path, stubborn: bool) -> Vec<String> {
    let pid = dir.join("pid");
    let stopped = dir.join("stopped");
    let trap = if stubborn {
        "trap '' TERM".to_string()
    } else {
        format!(
            "trap 'sleep 0.5; echo stopped > {}; exit 0' TERM",
            stopped.display()
        )
    };
    let script = format!(
        "{trap}; echo $$ > {}.new && mv {}.new {}; while :; do sleep 0.05; done",
        pid.display(),
        pid.display(),
        pid.display()
    );
    vec!["sh".into(), "-c".into(), script]
}

/// True while `pid` runs (a zombie runs nothing).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        })
        .unwrap_or(false)
}

async fn read_pid(dir: &Path) -> u32 {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(dir.join("pid")) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        assert!(start.elapsed() < DEADLINE, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Kills a holder with SIGKILL while its command runs; the command must
/// be gone (stopped by SIGTERM, or SIGKILLed after the grace if it
/// ignores SIGTERM) before the next holder's command starts.
async fn killed_holder_never_overlaps(backend: &Backend, stubborn: bool) {
    let dir = tempfile::tempdir().unwrap();
    let lock = |extra: &[&str], command: &[String]| {
        let mut c = coordctl(&backend.endpoints);
        c.args(["-w", "json", "lock"])
            .args(&backend.flags)
            .args(["jobs", "--ttl", "3", "--grace", "1500ms"])
            .args(extra)
            .arg("--")
            .args(command);
        c
    };
    let mut first = Peer::spawn(lock(&[], &first_command(dir.path(), stubborn)));
    next_event(&mut first, "started").await;
    let pid = read_pid(dir.path()).await;
    let killed_at = Instant::now();
    first.kill9().await;
    // The next holder records whether the first command still ran, or
    // had not finished stopping, when it started.
    let check = format!(
        "if [ -d /proc/{pid} ] && ! grep -q ') Z' /proc/{pid}/stat; then echo OVERLAP; \
         elif [ {stubborn} = false ] && [ ! -e {} ]; then echo UNFINISHED; else echo CLEAR; fi",
        dir.path().join("stopped").display()
    );
    let (code, out, err) = run(lock(
        &["--timeout", "60s"],
        &["sh".into(), "-c".into(), check],
    ))
    .await;
    assert_eq!(code, 0, "{}: {err}", backend.name);
    assert!(
        out.contains("CLEAR"),
        "{} (stubborn: {stubborn}): the next holder ran beside the first's command:\n{out}\n{err}",
        backend.name
    );
    // Gone within the grace (plus slack for a loaded machine), whatever
    // the next holder waited for.
    while running(pid) {
        assert!(
            killed_at.elapsed() < Duration::from_millis(1500) + Duration::from_secs(10),
            "{}: the command outlived its grace",
            backend.name
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_never_outlives_a_holder_killed_9_on_any_backend() {
    let etcd = EtcdCluster::single().await;
    let redis = coord_tests::redis::RedisServer::start().await;
    let postgres = coord_tests::postgres::PostgresServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let none = vec!["http://127.0.0.1:9".to_string()];
    let backends = [
        Backend {
            name: "flock",
            flags: vec![
                "--backend".into(),
                "flock".into(),
                "--dir".into(),
                d.clone(),
            ],
            endpoints: none.clone(),
        },
        Backend {
            name: "file",
            flags: vec!["--backend".into(), "file".into(), "--dir".into(), d.clone()],
            endpoints: none.clone(),
        },
        Backend {
            name: "redis",
            flags: vec![
                "--backend".into(),
                "redis".into(),
                "--url".into(),
                redis.url(),
            ],
            endpoints: none.clone(),
        },
        Backend {
            name: "postgres",
            flags: vec![
                "--backend".into(),
                "postgres".into(),
                "--url".into(),
                postgres.url(),
            ],
            endpoints: none.clone(),
        },
        Backend {
            name: "etcd",
            flags: vec![],
            endpoints: etcd.endpoints(),
        },
    ];
    for backend in &backends {
        killed_holder_never_overlaps(backend, false).await;
    }
    // A command that ignores SIGTERM is SIGKILLed after its grace, and
    // still before the next holder: where the lock is kept while the
    // command lives, and where the grace is cut to end before the TTL.
    for name in ["flock", "etcd"] {
        let backend = backends.iter().find(|b| b.name == name).unwrap();
        killed_holder_never_overlaps(backend, true).await;
    }
}

/// A marker file is judged from other hosts by its stale window: when
/// coordctl dies, the guard SIGKILLs a command that ignores SIGTERM within
/// two thirds of `--stale-after`, not after a longer `--grace`, so a taker
/// on another host never runs beside it.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_lock_cuts_the_grace_to_its_stale_window() {
    let dir = tempfile::tempdir().unwrap();
    let locks = tempfile::tempdir().unwrap();
    let none = vec!["http://127.0.0.1:9".to_string()];
    let mut c = coordctl(&none);
    c.args(["-w", "json", "lock", "--backend", "file", "--dir"])
        .arg(locks.path())
        .args(["jobs", "--stale-after", "3s", "--grace", "120s", "--"])
        .args(first_command(dir.path(), true));
    let mut first = Peer::spawn(c);
    next_event(&mut first, "started").await;
    let pid = read_pid(dir.path()).await;
    let killed_at = Instant::now();
    first.kill9().await;
    // Due by 1.75 s; the rest is slack for a loaded machine, far below
    // the grace.
    while running(pid) {
        assert!(
            killed_at.elapsed() < Duration::from_secs(30),
            "the command outlived the stale window"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Without a command, coordctl's statuses are 1-4; with one, they keep out
/// of the command's way (123-127), and the command's own status passes.
#[tokio::test(flavor = "multi_thread")]
async fn exit_statuses_never_collide_with_the_commands() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let none = vec!["http://127.0.0.1:9".to_string()];
    let flock = |extra: &[&str]| {
        let mut args = vec!["lock", "--backend", "flock", "--dir", d, "jobs"];
        args.extend_from_slice(extra);
        ctl(&none, &args)
    };
    // The command's own 2 and 3 are its own.
    for own in [2, 3, 4] {
        let (code, _, err) = run(flock(&["--", "sh", "-c", &format!("exit {own}")])).await;
        assert_eq!(code, own, "{err}");
    }
    // Not taken: 124.
    let mut holder = Peer::spawn(ctl(
        &none,
        &[
            "-w",
            "json",
            "lock",
            "--backend",
            "flock",
            "--dir",
            d,
            "jobs",
            "--",
            "sleep",
            "600",
        ],
    ));
    next_event(&mut holder, "started").await;
    let (code, _, err) = run(flock(&["--try", "--", "true"])).await;
    assert_eq!(code, 124, "{err}");
    holder.interrupt().await;
    // Bad usage with a command: 125 (clap's own, and coordctl's).
    let (code, _, err) = run(flock(&["--slots", "0", "--", "true"])).await;
    assert_eq!(code, 125, "{err}");
    let (code, _, err) = run(flock(&["--bogus", "--", "true"])).await;
    assert_eq!(code, 125, "{err}");
    // etcd unreachable with a command: 125; without one: 2.
    let (code, _, err) = run(ctl(
        &none,
        &["--dial-timeout", "300ms", "lock", "jobs", "--", "true"],
    ))
    .await;
    assert_eq!(code, 125, "{err}");
    let (code, _, err) = run(ctl(&none, &["--dial-timeout", "300ms", "leader", "jobs"])).await;
    assert_eq!(code, 2, "{err}");
    // Not found / cannot run: 127 / 126.
    let (code, _, err) = run(flock(&["--", "/nonexistent/cmd"])).await;
    assert_eq!(code, 127, "{err}");
    let (code, _, err) = run(flock(&["--", d])).await;
    assert_eq!(code, 126, "{err}");
}

/// A closed stdout ends coordctl quietly with 141, after it has cleaned
/// up: `coordctl hosts --watch | head -1` returns.
#[tokio::test(flavor = "multi_thread")]
async fn a_closed_stdout_ends_coordctl_with_141() {
    let etcd = EtcdCluster::single().await;
    let eps = etcd.endpoints();
    let bin = env!("CARGO_BIN_EXE_coordctl");
    let endpoints = eps.join(",");
    // The reader leaves after one line; the watch would go on for ever.
    let (code, out, err) = run({
        let mut c = Command::new("sh");
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .args([
                "-c",
                &format!(
                    "{bin} --endpoints {endpoints} register --id h1 --ttl 30 | head -1; \
                     {bin} --endpoints {endpoints} hosts --watch | head -1"
                ),
            ]);
        c
    })
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("registered"), "{out}");
    assert!(!err.contains("panicked"), "{err}");
    // Each side of the pipe ends; `register` revoked its lease on the way
    // out (its key is gone).
    assert!(keys(&eps).await.is_empty(), "register cleaned up");
    // The exit status of a pipeline's writer, through bash.
    let (code, out, err) = run({
        let mut c = Command::new("bash");
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .args([
                "-c",
                &format!(
                    "{bin} --endpoints {endpoints} observe jobs | head -0; echo ${{PIPESTATUS[0]}}"
                ),
            ]);
        c
    })
    .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "141", "{err}");
}

/// The guard stops the command even when stderr is closed (its reader
/// left): writing its notice there must not end it.
#[tokio::test(flavor = "multi_thread")]
async fn the_guard_stops_the_command_with_stderr_closed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    drop(read_end);
    let mut holder = coordctl(&["http://127.0.0.1:9".to_string()]);
    holder
        .args(["lock", "--backend", "flock", "--dir", d, "jobs", "--"])
        .args(first_command(dir.path(), false))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(write_end));
    let mut holder = holder.spawn().unwrap();
    let pid = read_pid(dir.path()).await;
    holder.start_kill().unwrap();
    holder.wait().await.unwrap();
    let start = Instant::now();
    while running(pid) {
        assert!(start.elapsed() < DEADLINE, "the command outlived coordctl");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        dir.path().join("stopped").exists(),
        "the command got SIGTERM and stopped"
    );
}
