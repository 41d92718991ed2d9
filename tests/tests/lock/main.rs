//! The lock family (issue 12), backend by backend: exclusion, tokens,
//! release, `lost()`, and each backend's crash recovery. Child processes
//! stand for holders that die (kill -9).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, SystemTime};

use coord::lock::{
    FileConfig, FileLocks, FlockConfig, LockError, LockLost, Locker, MemoryLocks, Released, Slots,
    Strategy,
};
use coord::Session;
use coord_core::lock::Marker;
use coord_tests::etcd::EtcdCluster;
use coord_tests::init_tracing;
use coord_tests::postgres::PostgresServer;
use coord_tests::queue::session_opts;
use coord_tests::redis::RedisServer;

/// Generous for a loaded 2-core machine.
const DEADLINE: Duration = Duration::from_secs(20);

/// Exclusion, increasing tokens, idempotent release, waiting with and
/// without a timeout: the same contract on every backend.
async fn the_contract(a: &Locker, b: &Locker) {
    let mut first = a.try_acquire("job").await.unwrap();
    assert_eq!(b.try_acquire("job").await.err(), Some(LockError::Locked));
    assert_eq!(
        b.acquire("job", Some(Duration::from_millis(300)))
            .await
            .err(),
        Some(LockError::Timeout)
    );
    // Another name is another lock.
    let other = b.try_acquire("other").await.unwrap();
    assert_eq!(first.release().await, Ok(Released::Released));
    assert_eq!(first.release().await, Ok(Released::AlreadyGone));
    let second = b.acquire("job", Some(DEADLINE)).await.unwrap();
    assert!(
        second.token() > first.token(),
        "{:?} then {:?}",
        first.token(),
        second.token()
    );
    // A waiter gets the lock once it is released.
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move { a.acquire("job", Some(DEADLINE)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "a waiter got a held lock");
    let second_token = second.token();
    drop(second);
    let third = waiter.await.unwrap().unwrap();
    assert!(third.token() > second_token);
    drop(other);
    // Bad names: refused before anything is written.
    for bad in ["", "a/b", ".hidden", "a b"] {
        assert!(
            matches!(a.try_acquire(bad).await, Err(LockError::BadName(_))),
            "{bad:?}"
        );
    }
}

/// A semaphore of 2: two holders, the third refused, slots 0 and 1.
async fn two_slots(a: &Locker, b: &Locker) {
    let mut x = a.try_acquire("sem").await.unwrap();
    let y = b.try_acquire("sem").await.unwrap();
    assert_eq!(
        (x.slot(), y.slot()),
        (0, 1),
        "slots {} and {}",
        x.slot(),
        y.slot()
    );
    assert!(y.token() > x.token());
    assert_eq!(a.try_acquire("sem").await.err(), Some(LockError::Locked));
    assert_eq!(x.release().await, Ok(Released::Released));
    let z = a.try_acquire("sem").await.unwrap();
    assert_eq!(z.slot(), 0);
    assert!(z.token() > y.token());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_locks_keep_the_contract_and_an_eviction_is_lost() {
    let locks = MemoryLocks::new();
    let a = Locker::memory(&locks, Slots::ONE);
    let b = Locker::memory(&locks, Slots::ONE);
    the_contract(&a, &b).await;
    let two = Slots::new(2).unwrap();
    two_slots(&Locker::memory(&locks, two), &Locker::memory(&locks, two)).await;
    let mut held = a.try_acquire("evicted").await.unwrap();
    assert!(locks.evict("evicted", 0));
    let lost = tokio::time::timeout(DEADLINE, held.lost()).await.unwrap();
    assert_eq!(lost, LockLost::TakenOver);
    assert_eq!(held.release().await, Ok(Released::AlreadyGone));
    assert_eq!(held.extend().await.err(), Some(LockError::NoTtl("memory")));
}

fn flock_locker(dir: &Path, slots: u32) -> Locker {
    Locker::flock(FlockConfig::new(dir).with_slots(Slots::new(slots).unwrap())).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flock_locks_keep_the_contract_and_tokens_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    the_contract(&flock_locker(dir.path(), 1), &flock_locker(dir.path(), 1)).await;
    two_slots(&flock_locker(dir.path(), 2), &flock_locker(dir.path(), 2)).await;
    // A new locker on the same directory (a restarted process) goes on
    // from the last token.
    let before = flock_locker(dir.path(), 1)
        .try_acquire("job")
        .await
        .unwrap();
    let last = before.token();
    drop(before);
    let after = flock_locker(dir.path(), 1)
        .try_acquire("job")
        .await
        .unwrap();
    assert!(after.token() > last);
    let mut after = after;
    assert_eq!(after.extend().await.err(), Some(LockError::NoTtl("flock")));
    // A corrupt counter is reported, never guessed past.
    drop(after);
    fs::write(dir.path().join("job.token"), "not a number").unwrap();
    let e = flock_locker(dir.path(), 1).try_acquire("job").await.err();
    assert!(
        matches!(
            e,
            Some(LockError::Backend {
                backend: "flock",
                ..
            })
        ),
        "{e:?}"
    );
    assert!(matches!(
        Locker::flock(FlockConfig::new(dir.path().join("missing"))),
        Err(LockError::Backend { .. })
    ));
}

/// A process that holds `<dir>/job.lock` with flock(1) until killed: a
/// shell that locks its fd 9 and becomes `sleep` (the same process, so
/// killing it closes the fd).
fn flock_holder(dir: &Path) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg("exec 9>>\"$0\" && flock 9 && exec sleep 600")
        .arg(dir.join("job.lock"))
        .spawn()
        .expect("sh and flock(1) from util-linux")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flock_holder_killed_9_frees_the_lock_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let locker = flock_locker(dir.path(), 1);
    let mut holder = flock_holder(dir.path());
    // Wait until the child holds it.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        match locker.try_acquire("job").await {
            Err(LockError::Locked) => break,
            Ok(h) => drop(h),
            Err(e) => panic!("{e}"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "flock(1) never locked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.acquire("job", Some(DEADLINE)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished());
    holder.kill().unwrap();
    holder.wait().unwrap();
    let held = waiter.await.unwrap().unwrap();
    assert_eq!(held.slot(), 0);
}

fn file_config(dir: &Path) -> FileConfig {
    FileConfig::new(dir).with_stale_after(Duration::from_secs(3))
}

fn file_locker(config: FileConfig) -> Locker {
    Locker::file(config).unwrap()
}

/// Writes a marker as another holder would have.
fn plant(dir: &Path, file: &str, pid: u32, start_time: Option<u64>, host: &str, age: Duration) {
    let marker = Marker {
        pid,
        start_time,
        host: host.into(),
        acquired_ms: 1,
        token: 1,
    };
    let path = dir.join(file);
    fs::write(&path, marker.encode().unwrap()).unwrap();
    let f = fs::File::options().write(true).open(&path).unwrap();
    f.set_modified(SystemTime::now() - age).unwrap();
}

/// The pid of a process that has exited (and was reaped).
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_locks_keep_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let a = file_locker(file_config(dir.path()));
    let b = file_locker(file_config(dir.path()));
    the_contract(&a, &b).await;
    let two = file_config(dir.path()).with_slots(Slots::new(2).unwrap());
    two_slots(&file_locker(two.clone()), &file_locker(two)).await;
    // Bad options: refused.
    for bad in [Duration::from_millis(10), Duration::from_secs(86_401)] {
        let e = Locker::file(file_config(dir.path()).with_stale_after(bad));
        assert!(matches!(e, Err(LockError::BadOptions(_))), "{bad:?}");
    }
    let e = Locker::file(file_config(dir.path()).with_host("two words"));
    assert!(matches!(e, Err(LockError::BadOptions(_))));
}

/// Holders racing for one file lock and one flock lock, four at a time:
/// each hold's token is above the one before it, however the creators
/// interleave. (CI found the file backend issuing a token before creating
/// its marker: two creators could issue tokens in one order and link
/// their markers in the other.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_holders_get_tokens_in_the_order_they_hold() {
    const HOLDS: usize = 150;
    let dir = tempfile::tempdir().unwrap();
    type MakeLocker = fn(&Path) -> Locker;
    let lockers: [(&str, MakeLocker); 2] = [
        ("file", |dir| file_locker(file_config(dir))),
        ("flock", |dir| flock_locker(dir, 1)),
    ];
    for (backend, locker) in lockers {
        let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let racers: Vec<_> = (0..4)
            .map(|_| {
                let locker = locker(dir.path());
                let held = std::sync::Arc::clone(&held);
                tokio::spawn(async move {
                    let mut holds = 0;
                    while holds < HOLDS {
                        match locker.try_acquire("race").await {
                            Ok(mut h) => {
                                // While held: in the order of holds.
                                held.lock().unwrap().push(h.token().0);
                                holds += 1;
                                assert_eq!(h.release().await, Ok(Released::Released));
                            }
                            Err(LockError::Locked) => tokio::task::yield_now().await,
                            Err(e) => panic!("{e}"),
                        }
                    }
                })
            })
            .collect();
        for racer in racers {
            tokio::time::timeout(Duration::from_secs(300), racer)
                .await
                .expect("a racer never finished")
                .unwrap();
        }
        let tokens = held.lock().unwrap().clone();
        assert_eq!(tokens.len(), 4 * HOLDS);
        let behind: Vec<_> = tokens.windows(2).filter(|w| w[0] >= w[1]).collect();
        assert!(
            behind.is_empty(),
            "{backend}: a hold's token not above the one before: {behind:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_markers_are_judged_by_pid_then_by_age() {
    let dir = tempfile::tempdir().unwrap();
    let here = "this-host".to_string();
    let config = file_config(dir.path()).with_host(here.clone());
    let locker = file_locker(config.clone());
    let fresh = Duration::ZERO;
    let old = Duration::from_secs(60);
    let me = std::process::id();
    let my_start = fs::read_to_string(format!("/proc/{me}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s[s.rfind(')')? + 1..].to_string();
            rest.split_whitespace().nth(19)?.parse::<u64>().ok()
        })
        .unwrap();
    // (what, pid, start time, host, age, taken over?)
    type Case<'a> = (&'a str, u32, Option<u64>, &'a str, Duration, bool);
    let cases: Vec<Case> = vec![
        (
            "dead holder on this host",
            dead_pid(),
            Some(1),
            &here,
            fresh,
            true,
        ),
        (
            "live holder on this host",
            me,
            Some(my_start),
            &here,
            old,
            false,
        ),
        ("pid reused", me, Some(my_start + 1), &here, fresh, true),
        (
            "no start time recorded, fresh",
            me,
            None,
            &here,
            fresh,
            false,
        ),
        ("no start time recorded, old", me, None, &here, old, true),
        (
            "another host, fresh",
            dead_pid(),
            Some(1),
            "elsewhere",
            fresh,
            false,
        ),
        (
            "another host, old",
            dead_pid(),
            Some(1),
            "elsewhere",
            old,
            true,
        ),
    ];
    for (what, pid, start, host, age, taken) in cases {
        plant(dir.path(), "m.held", pid, start, host, age);
        let got = locker.try_acquire("m").await;
        assert_eq!(got.is_ok(), taken, "{what}: {got:?}");
        if let Ok(mut h) = got {
            assert_eq!(h.release().await, Ok(Released::Released), "{what}");
        }
        let _ = fs::remove_file(dir.path().join("m.held"));
    }
    // PidOnly never takes over on age; TimeOnly never asks the pid.
    let pid_only = file_locker(config.clone().with_strategy(Strategy::PidOnly));
    plant(dir.path(), "m.held", dead_pid(), Some(1), "elsewhere", old);
    assert_eq!(
        pid_only.try_acquire("m").await.err(),
        Some(LockError::Locked)
    );
    let time_only = file_locker(config.clone().with_strategy(Strategy::TimeOnly));
    plant(dir.path(), "m.held", dead_pid(), Some(1), &here, fresh);
    assert_eq!(
        time_only.try_acquire("m").await.err(),
        Some(LockError::Locked)
    );
    plant(dir.path(), "m.held", me, Some(my_start), &here, old);
    assert!(time_only.try_acquire("m").await.is_ok());
    // A corrupt marker: held while fresh, taken over once stale.
    fs::write(dir.path().join("c.held"), b"\x00garbage").unwrap();
    assert_eq!(locker.try_acquire("c").await.err(), Some(LockError::Locked));
    let f = fs::File::options()
        .write(true)
        .open(dir.path().join("c.held"))
        .unwrap();
    f.set_modified(SystemTime::now() - old).unwrap();
    assert!(locker.try_acquire("c").await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_marker_is_lost_and_released_as_gone() {
    let dir = tempfile::tempdir().unwrap();
    let config = file_config(dir.path()).with_stale_after(Duration::from_millis(600));
    let locker = file_locker(config);
    let mut held = locker.try_acquire("r").await.unwrap();
    assert_eq!(held.extend().await, Ok(()));
    fs::remove_file(dir.path().join("r.held")).unwrap();
    let lost = tokio::time::timeout(DEADLINE, held.lost()).await.unwrap();
    assert_eq!(lost, LockLost::TakenOver);
    assert_eq!(
        held.extend().await.err(),
        Some(LockError::Lost(LockLost::TakenOver))
    );
    // Someone else's marker now: release leaves it alone.
    let mut other = locker.try_acquire("r").await.unwrap();
    assert_eq!(held.release().await, Ok(Released::AlreadyGone));
    assert!(dir.path().join("r.held").exists());
    assert_eq!(other.release().await, Ok(Released::Released));
    // A live holder keeps its marker fresh: never judged stale.
    let kept = locker.try_acquire("k").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let elsewhere = file_locker(
        file_config(dir.path())
            .with_host("elsewhere")
            .with_stale_after(Duration::from_millis(600)),
    );
    assert_eq!(
        elsewhere.try_acquire("k").await.err(),
        Some(LockError::Locked)
    );
    drop(kept);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_removes_dead_markers_and_dead_semaphore_slots() {
    let dir = tempfile::tempdir().unwrap();
    let here = "this-host";
    let locks = FileLocks::open(file_config(dir.path()).with_host(here)).unwrap();
    let me = std::process::id();
    plant(
        dir.path(),
        "s.held",
        dead_pid(),
        Some(1),
        here,
        Duration::ZERO,
    );
    plant(
        dir.path(),
        "s.held.1",
        dead_pid(),
        Some(1),
        here,
        Duration::ZERO,
    );
    plant(
        dir.path(),
        "s.held.2",
        dead_pid(),
        Some(1),
        here,
        Duration::ZERO,
    );
    plant(dir.path(), "live.held", me, None, here, Duration::ZERO);
    fs::write(dir.path().join("unrelated.txt"), "x").unwrap();
    let swept = locks.sweep().unwrap();
    let names: Vec<String> = swept
        .removed
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["s.held", "s.held.1", "s.held.2"]);
    assert_eq!(swept.kept, 1);
    assert!(dir.path().join("live.held").exists());
    assert!(dir.path().join("unrelated.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takers_racing_for_one_dead_marker_leave_one_holder() {
    let dir = tempfile::tempdir().unwrap();
    let config = file_config(dir.path()).with_host("this-host");
    for round in 0..30 {
        plant(
            dir.path(),
            "race.held",
            dead_pid(),
            Some(1),
            "this-host",
            Duration::ZERO,
        );
        let takers: Vec<_> = (0..4)
            .map(|_| {
                let locker = file_locker(config.clone());
                tokio::spawn(async move { locker.try_acquire("race").await })
            })
            .collect();
        let mut won = Vec::new();
        for t in takers {
            if let Ok(h) = t.await.unwrap() {
                won.push(h);
            }
        }
        assert_eq!(won.len(), 1, "round {round}: {} holders", won.len());
        drop(won);
        assert!(!dir.path().join("race.held").exists());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_locks_keep_the_contract() {
    init_tracing();
    let etcd = EtcdCluster::single().await;
    let client = etcd.client().await;
    let sa = Session::new(client.clone(), session_opts(5)).await.unwrap();
    let sb = Session::new(client.clone(), session_opts(5)).await.unwrap();
    let a = Locker::etcd(&sa, coord::lock::DEFAULT_ETCD_PREFIX, Slots::ONE);
    let b = Locker::etcd(&sb, coord::lock::DEFAULT_ETCD_PREFIX, Slots::ONE);
    // By default lock "n" is the lock `etcdctl lock n` and `coordctl lock
    // n` take: the one key `n/<lease in hex>`, with an empty value.
    let named = a.try_acquire("named").await.unwrap();
    let keys = client
        .clone()
        .get("named/", Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .unwrap();
    let lease = sa.lease_id().unwrap();
    assert_eq!(keys.kvs().len(), 1);
    assert_eq!(keys.kvs()[0].key_str().unwrap(), format!("named/{lease}"));
    assert!(keys.kvs()[0].value().is_empty());
    drop(named);
    the_contract(&a, &b).await;
    let two = Slots::new(2).unwrap();
    two_slots(
        &Locker::etcd(&sa, coord::lock::DEFAULT_ETCD_PREFIX, two),
        &Locker::etcd(&sb, coord::lock::DEFAULT_ETCD_PREFIX, two),
    )
    .await;
    // The session's lease revoked from outside: the hold is lost.
    let held = a.try_acquire("lease").await.unwrap();
    client
        .clone()
        .lease_revoke(sa.lease_id().unwrap().0)
        .await
        .unwrap();
    let lost = tokio::time::timeout(DEADLINE, held.lost()).await.unwrap();
    assert!(matches!(lost, LockLost::Etcd(_)), "{lost:?}");
    // A failure keeps coord's error of it: a closed session is told apart
    // from an unreachable etcd, and nothing is written.
    sb.close().await.unwrap();
    let closed = b.try_acquire("after-close").await.err();
    assert!(
        matches!(closed, Some(LockError::Etcd(coord::Error::Closed))),
        "{closed:?}"
    );
    let keys = client
        .clone()
        .get(
            format!("{}after-close", coord::lock::DEFAULT_ETCD_PREFIX),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    assert!(keys.kvs().is_empty(), "nothing written");
}

mod processes;

/// A FIFO (or anything but a regular file) where a lock, marker or token
/// file belongs is refused with `NotAFile` at once, never opened for good
/// (a FIFO's open would wait for a writer for ever), and nothing is
/// written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_in_a_lock_directory_is_refused_without_blocking() {
    let fifo = |path: &Path| {
        nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    };
    for (backend, planted) in [
        ("flock", "job.lock"),
        ("flock", "job.token"),
        ("file", "job.held"),
        ("file", "job.token"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        fifo(&dir.path().join(planted));
        let locker = match backend {
            "flock" => flock_locker(dir.path(), 1),
            _ => file_locker(file_config(dir.path())),
        };
        let before: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        let tried = tokio::time::timeout(DEADLINE, locker.try_acquire("job"))
            .await
            .unwrap_or_else(|_| panic!("{backend} {planted}: blocked on the FIFO"));
        match tried {
            Err(LockError::NotAFile { path, found, .. }) => {
                assert_eq!(path, dir.path().join(planted), "{backend}");
                assert_eq!(found, "FIFO", "{backend}");
            }
            other => panic!("{backend} {planted}: {other:?}"),
        }
        let after: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(before, after, "{backend} {planted}: nothing written");
    }
    // A marker name swept: refused too, not blocked on.
    let dir = tempfile::tempdir().unwrap();
    fifo(&dir.path().join("job.held"));
    let sweep = FileLocks::open(file_config(dir.path())).unwrap().sweep();
    assert!(
        matches!(sweep, Err(LockError::NotAFile { .. })),
        "{sweep:?}"
    );
}

/// A holder that has died but is not reaped yet (a zombie) is dead: its
/// marker is taken over at once, not after the stale window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_holder_counts_as_dead() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    let stat = || fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let start: Option<u64> = stat()
        .rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().nth(19))
        .and_then(|t| t.parse().ok());
    // Wait for it to exit, unreaped.
    let deadline = std::time::Instant::now() + DEADLINE;
    while !stat()
        .rsplit(')')
        .next()
        .unwrap_or("")
        .trim_start()
        .starts_with('Z')
    {
        assert!(std::time::Instant::now() < deadline, "never a zombie");
        std::thread::sleep(Duration::from_millis(5));
    }
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    plant(dir.path(), "job.held", pid, start, &host, Duration::ZERO);
    let locker =
        file_locker(FileConfig::new(dir.path()).with_stale_after(Duration::from_secs(3_600)));
    let held = locker.try_acquire("job").await;
    assert!(held.is_ok(), "a zombie's marker was kept: {held:?}");
    child.wait().unwrap();
}

/// A marker names `owner` when one is set: alive, the lock is held even
/// though the process that took it is this one; once the owner dies, it
/// is taken over at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marker_names_its_owner_and_dies_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = Command::new("sleep").arg("600").spawn().unwrap();
    let config = file_config(dir.path()).with_owner(owner.id());
    let holder = file_locker(config).try_acquire("job").await.unwrap();
    let marker = Marker::parse(&fs::read(dir.path().join("job.held")).unwrap()).unwrap();
    assert_eq!(marker.pid, owner.id());
    let other = file_locker(file_config(dir.path()));
    assert!(matches!(
        other.try_acquire("job").await,
        Err(LockError::Locked)
    ));
    // Never released (as if the process that took it died): once the
    // owner dies too, the marker is taken over at once.
    std::mem::forget(holder);
    assert!(matches!(
        other.try_acquire("job").await,
        Err(LockError::Locked)
    ));
    owner.kill().unwrap();
    owner.wait().unwrap();
    let taken = other.try_acquire("job").await;
    assert!(taken.is_ok(), "{taken:?}");
}

/// A flock hold's descriptor is its lock file's; a duplicate of it (a
/// guard process' copy) shares the lock, and `release` frees it for every
/// duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flock_hold_shares_its_file_and_release_frees_every_duplicate() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let locker = flock_locker(dir.path(), 1);
    let mut holder = locker.try_acquire("job").await.unwrap();
    let fds = holder.hold_fds();
    assert_eq!(fds.len(), 1);
    let kept = fs::File::from(fds[0].try_clone_to_owned().unwrap());
    let lock_file = fs::metadata(dir.path().join("job.lock")).unwrap();
    assert_eq!(kept.metadata().unwrap().ino(), lock_file.ino());
    // The duplicate's open file description holds the lock: a flock
    // through it succeeds at once (it is the holder's own lock).
    let kept = nix::fcntl::Flock::lock(kept, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| e)
        .expect("the duplicate shares the hold");
    assert!(matches!(
        locker.try_acquire("job").await,
        Err(LockError::Locked)
    ));
    assert_eq!(holder.release().await, Ok(Released::Released));
    assert!(holder.hold_fds().is_empty());
    let next = locker.try_acquire("job").await;
    assert!(next.is_ok(), "release frees every duplicate: {next:?}");
    drop(next);
    drop(kept);
}
