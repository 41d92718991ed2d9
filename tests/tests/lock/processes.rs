//! Holders as processes: workers handing a lock over hundreds of times,
//! through a restart of the backend, and holders killed -9.

use super::*;

const WORKER: &str = env!("CARGO_BIN_EXE_coord-lock-worker");

/// Four `coord-lock-worker` processes on one lock.
struct Workers {
    backend: String,
    children: Vec<tokio::process::Child>,
}

impl Workers {
    /// Starts four workers: `worker <backend> <place> <how...> <a> <b>`.
    fn spawn(backend: &str, place: &str, how: [&str; 3], a: &Path, b: &Path) -> Workers {
        let children = (0..4)
            .map(|_| {
                tokio::process::Command::new(WORKER)
                    .args([backend, place])
                    .args(how)
                    .arg(a)
                    .arg(b)
                    .kill_on_drop(true)
                    .spawn()
                    .unwrap()
            })
            .collect();
        Workers {
            backend: backend.to_string(),
            children,
        }
    }

    /// Waits (5 minutes at most) for every worker to exit, successfully.
    async fn finish(self) {
        let backend = self.backend;
        for mut w in self.children {
            let status = tokio::time::timeout(Duration::from_secs(300), w.wait())
                .await
                .expect("a worker never finished")
                .unwrap();
            assert!(status.success(), "{backend}: a worker failed: {status}");
        }
    }
}

/// Four worker processes take turns 50 times each: the counter they
/// increment without atomicity of their own ends at 200, and the tokens,
/// in the order the holds were logged, strictly increase.
async fn handoffs(backend: &str, place: &str) {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let log = dir.path().join("log");
    let workers = Workers::spawn(backend, place, ["handoff", "rounds", "50"], &counter, &log);
    workers.finish().await;
    let count: u64 = fs::read_to_string(&counter)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(count, 200, "{backend}: lost updates, exclusion broken");
    let tokens: Vec<i64> = fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(tokens.len(), 200);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "{backend}: tokens not increasing: {tokens:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_hand_a_flock_or_file_lock_over_200_times() {
    let dir = tempfile::tempdir().unwrap();
    let place = dir.path().to_str().unwrap();
    handoffs("flock", place).await;
    handoffs("file", place).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_hand_an_etcd_lock_over_200_times() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    handoffs("etcd", &etcd.endpoints()[0]).await;
}

/// Four worker processes take turns 100 times each through a fencing
/// store, and the server is restarted once the first 50 rounds are
/// logged. The hold live at the restart may lose its write; every other
/// write must be accepted, which it is only if every token issued after
/// the restart is above every token issued before it.
async fn fenced_handoffs_through_a_restart<F, Fut>(backend: &str, place: &str, restart: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    const ROUNDS: usize = 4 * 100;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let log = dir.path().join("log");
    let workers = Workers::spawn(backend, place, ["fenced", "fenced", "100"], &store, &log);
    let logged = || {
        fs::read_to_string(&log)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while logged() < 50 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{backend}: fewer than 50 rounds in 120 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let before_restart = logged();
    restart().await;
    workers.finish().await;
    let lines = fs::read_to_string(&log).unwrap();
    let rounds: Vec<(&str, i64)> = lines
        .lines()
        .map(|l| {
            let (verdict, token) = l.split_once(' ').unwrap();
            (verdict, token.parse().unwrap())
        })
        .collect();
    assert_eq!(rounds.len(), ROUNDS);
    assert!(
        before_restart < ROUNDS,
        "{backend}: the run ended before the restart"
    );
    let rejected: Vec<_> = rounds.iter().filter(|(v, _)| *v == "rejected").collect();
    assert!(
        rejected.len() <= 1,
        "{backend}: the store refused {} holds, so tokens went back after the restart: {rounds:?}",
        rejected.len()
    );
    let accepted: Vec<i64> = rounds
        .iter()
        .filter(|(v, _)| *v == "accepted")
        .map(|(_, t)| *t)
        .collect();
    let mut distinct = accepted.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), accepted.len(), "{backend}: a token twice");
    let stored = fs::read_to_string(&store).unwrap();
    assert_eq!(
        stored.split_whitespace().next(),
        Some(accepted.len().to_string().as_str()),
        "{backend}: the store's count"
    );
}

/// A worker holding `name` is killed -9; returns how long the next
/// acquirer (`locker`) waited after the kill.
async fn killed_holder(backend: &str, place: &str, locker: &Locker) -> Duration {
    let mut holder = tokio::process::Command::new(WORKER)
        .args([backend, place, "dies", "hold"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = holder.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let line = tokio::time::timeout(DEADLINE, lines.next_line())
        .await
        .expect("the holder never held")
        .unwrap()
        .unwrap_or_default();
    let dead_token: i64 = line.strip_prefix("held ").unwrap().parse().unwrap();
    assert_eq!(
        locker.try_acquire("dies").await.err(),
        Some(LockError::Locked)
    );
    holder.start_kill().unwrap();
    let killed = tokio::time::Instant::now();
    holder.wait().await.unwrap();
    let next = locker
        .acquire("dies", Some(Duration::from_secs(60)))
        .await
        .unwrap();
    let waited = killed.elapsed();
    assert!(next.token().0 > dead_token);
    println!(
        "recovery latency, {backend}: {} ms after kill -9",
        waited.as_millis()
    );
    waited
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_9_is_recovered_from_on_every_backend() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let place = dir.path().to_str().unwrap();
    killed_holder("flock", place, &flock_locker(dir.path(), 1)).await;
    // The file backend probes the dead pid: no stale window to wait out
    // (30 s by default).
    let file = killed_holder("file", place, &file_locker(FileConfig::new(dir.path()))).await;
    assert!(
        file < Duration::from_secs(30),
        "waited out the stale window: {file:?}"
    );
    // etcd: the lease (TTL 5 s) must expire.
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let session = Session::new(client, session_opts(5)).await.unwrap();
    let locker = Locker::etcd(&session, coord::lock::DEFAULT_ETCD_PREFIX, Slots::ONE);
    killed_holder("etcd", &etcd.endpoints()[0], &locker).await;
}

/// `held` (a hold of "kept" from `a`) through a restart of its server:
/// lost as `expected`, released as already gone, and the next hold's
/// token is still greater.
async fn lost_to_a_restart(
    a: &Locker,
    mut held: coord::lock::Holder,
    restart: impl std::future::Future<Output = ()>,
    expected: LockLost,
) {
    let before = held.token();
    restart.await;
    let lost = tokio::time::timeout(DEADLINE, held.lost()).await.unwrap();
    assert_eq!(lost, expected);
    assert_eq!(held.release().await, Ok(Released::AlreadyGone));
    let after = a.try_acquire("kept").await.unwrap();
    assert!(
        after.token() > before,
        "{:?} then {:?}",
        before,
        after.token()
    );
}

/// With its server gone, `a` refuses with a clear error of `backend`
/// (within the deadline: not after a wait without end).
async fn refused_as_unreachable(a: &Locker, backend: &str) {
    let e = tokio::time::timeout(DEADLINE, a.try_acquire("other"))
        .await
        .expect("refused, not left waiting")
        .err();
    assert!(
        matches!(&e, Some(LockError::Backend { backend: b, .. }) if *b == backend),
        "{e:?}"
    );
}

fn redis_locker(server: &RedisServer, slots: u32) -> Locker {
    Locker::redis(
        coord::lock::RedisConfig::new(server.url())
            .with_slots(Slots::new(slots).unwrap())
            .with_ttl(Duration::from_secs(2)),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_locks_keep_the_contract_and_tokens_survive_a_restart() {
    init_tracing();
    let mut server = RedisServer::start().await;
    the_contract(&redis_locker(&server, 1), &redis_locker(&server, 1)).await;
    two_slots(&redis_locker(&server, 2), &redis_locker(&server, 2)).await;
    let a = redis_locker(&server, 1);
    // A live holder extends its key: still held after several TTLs.
    let mut held = a.try_acquire("kept").await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(a.try_acquire("kept").await.err(), Some(LockError::Locked));
    assert_eq!(held.extend().await, Ok(()));
    // The server restarts and forgets every key.
    lost_to_a_restart(&a, held, server.restart(), LockLost::Expired).await;
    server.kill();
    // Refused at once, and again while the client tries to reconnect
    // (redis 0.27's connection manager alone would make it wait minutes).
    refused_as_unreachable(&a, "redis").await;
    refused_as_unreachable(&a, "redis").await;
    assert!(matches!(
        Locker::redis(
            coord::lock::RedisConfig::new("redis://127.0.0.1:1/")
                .with_ttl(Duration::from_millis(1))
        ),
        Err(LockError::BadOptions(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_server_is_refused_and_its_holders_lose_at_the_ttl() {
    init_tracing();
    let server = RedisServer::start().await;
    let a = Locker::redis(
        coord::lock::RedisConfig::new(server.url())
            .with_ttl(Duration::from_secs(2))
            .with_request_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    let held = a.try_acquire("kept").await.unwrap();
    // A stall: the port accepts, nothing answers.
    server.pause();
    let e = tokio::time::timeout(DEADLINE, a.try_acquire("other"))
        .await
        .expect("refused, not left waiting")
        .err();
    assert!(
        matches!(
            &e,
            Some(LockError::Backend {
                backend: "redis",
                ..
            })
        ),
        "{e:?}"
    );
    // The holder cannot extend: it is told its lock is lost once the TTL
    // since its last extension has passed.
    let lost = tokio::time::timeout(DEADLINE, held.lost())
        .await
        .expect("told of the loss");
    assert_eq!(lost, LockLost::Expired);
    server.resume();
    assert!(a.try_acquire("again").await.is_ok());
    assert!(matches!(
        Locker::redis(
            coord::lock::RedisConfig::new(server.url())
                .with_request_timeout(Duration::from_millis(9))
        ),
        Err(LockError::BadOptions(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_hand_a_redis_lock_over_200_times_and_a_killed_holder_expires() {
    init_tracing();
    let server = RedisServer::start().await;
    handoffs("redis", &server.url()).await;
    let waited = killed_holder("redis", &server.url(), &redis_locker(&server, 1)).await;
    assert!(waited < Duration::from_secs(30), "{waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_tokens_keep_growing_through_a_restart_mid_run() {
    init_tracing();
    let mut server = RedisServer::start().await;
    let url = server.url();
    fenced_handoffs_through_a_restart("redis", &url, || server.restart()).await;
}

fn pg_locker(server: &PostgresServer, slots: u32) -> Locker {
    Locker::postgres(
        coord::lock::PostgresConfig::new(server.url()).with_slots(Slots::new(slots).unwrap()),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_locks_keep_the_contract_and_tokens_survive_a_restart() {
    init_tracing();
    let mut server = PostgresServer::start().await;
    the_contract(&pg_locker(&server, 1), &pg_locker(&server, 1)).await;
    two_slots(&pg_locker(&server, 2), &pg_locker(&server, 2)).await;
    let a = pg_locker(&server, 1);
    let mut held = a.try_acquire("kept").await.unwrap();
    assert_eq!(
        held.extend().await.err(),
        Some(LockError::NoTtl("postgres"))
    );
    // The server crashes and comes back: the session and its lock are
    // gone, the token row is not.
    lost_to_a_restart(&a, held, server.restart(), LockLost::Disconnected).await;
    assert!(matches!(
        Locker::postgres(coord::lock::PostgresConfig::new("port=notanumber")),
        Err(LockError::BadOptions(_))
    ));
    drop(server);
    refused_as_unreachable(&a, "postgres").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_postgres_server_is_refused_within_the_request_timeout() {
    init_tracing();
    let server = PostgresServer::start().await;
    let a = Locker::postgres(
        coord::lock::PostgresConfig::new(server.url())
            .with_request_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    // A stall: the port accepts, no session starts.
    server.pause();
    refused_as_unreachable(&a, "postgres").await;
    server.resume();
    let mut held = a.try_acquire("other").await.unwrap();
    assert_eq!(held.release().await, Ok(Released::Released));
    assert!(matches!(
        Locker::postgres(
            coord::lock::PostgresConfig::new(server.url())
                .with_request_timeout(Duration::from_secs(301))
        ),
        Err(LockError::BadOptions(_))
    ));
}

/// A server that stalls with a hold's session open: its connection stays
/// open and silent, so only the holder's own checks can tell. The holder
/// is told within two request timeouts and ends its connection, so the
/// server, once it runs again, drops the lock for the next holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_finds_a_stalled_postgres_server_out_and_ends_its_session() {
    init_tracing();
    let server = PostgresServer::start().await;
    let locker = |timeout| {
        Locker::postgres(
            coord::lock::PostgresConfig::new(server.url()).with_request_timeout(timeout),
        )
        .unwrap()
    };
    let a = locker(Duration::from_secs(1));
    let mut held = a.try_acquire("kept").await.unwrap();
    // Answered checks keep it held: three of them.
    let early = tokio::time::timeout(Duration::from_millis(3_500), held.lost()).await;
    assert!(early.is_err(), "lost while the server answered: {early:?}");
    server.stall();
    let lost = tokio::time::timeout(DEADLINE, held.lost())
        .await
        .expect("the holder is told its server went silent");
    assert_eq!(lost, LockLost::Unanswered);
    server.unstall();
    let b = locker(Duration::from_secs(5));
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let next = loop {
        match b.try_acquire("kept").await {
            Ok(next) => break next,
            Err(LockError::Locked) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the stalled holder's session kept the lock: {e:?}"),
        }
    };
    assert!(next.token() > held.token());
    assert_eq!(held.release().await, Ok(Released::AlreadyGone));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_hand_a_postgres_lock_over_200_times_and_a_killed_holder_is_dropped() {
    init_tracing();
    let server = PostgresServer::start().await;
    handoffs("postgres", &server.url()).await;
    let waited = killed_holder("postgres", &server.url(), &pg_locker(&server, 1)).await;
    assert!(waited < Duration::from_secs(30), "{waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tokens_keep_growing_through_a_crash_restart_mid_run() {
    init_tracing();
    let mut server = PostgresServer::start().await;
    let url = server.url();
    fenced_handoffs_through_a_restart("postgres", &url, || server.restart()).await;
}

/// A marker naming a live process the judge may not signal (`EPERM`):
/// the pid cannot tell, so the marker counts as held until the stale
/// window (30 s by default) has passed since its last refresh. As root the
/// judge runs as `nobody` and the marker names this (root) process; as
/// another user the marker names init.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marker_of_another_users_live_process_waits_for_the_stale_window() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let root = nix::unistd::geteuid().is_root();
    let pid = if root { std::process::id() } else { 1 };
    let host = fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    let judge = || {
        let mut c = if root {
            let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={}", nobody.uid))
                .arg(format!("--regid={}", nobody.gid))
                .arg("--clear-groups")
                .arg(WORKER);
            c
        } else {
            Command::new(WORKER)
        };
        c.args(["file", dir.path().to_str().unwrap(), "perm", "try"]);
        c.output().unwrap()
    };
    plant(dir.path(), "perm.held", pid, Some(1), &host, Duration::ZERO);
    let fresh = judge();
    assert_eq!(
        fresh.status.code(),
        Some(3),
        "a fresh marker of a live process was taken: {}",
        String::from_utf8_lossy(&fresh.stdout)
    );
    plant(
        dir.path(),
        "perm.held",
        pid,
        Some(1),
        &host,
        Duration::from_secs(60),
    );
    let old = judge();
    assert_eq!(
        old.status.code(),
        Some(0),
        "a marker past the stale window was kept: {} {}",
        String::from_utf8_lossy(&old.stdout),
        String::from_utf8_lossy(&old.stderr)
    );
}
