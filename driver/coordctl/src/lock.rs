//! `coordctl lock`: `etcdctl lock NAME CMD` with fencing and the lost
//! signal.

use coord::lock::{
    FileConfig, FlockConfig, Holder, LockError, Locker, PostgresConfig, RedisConfig, Slots,
};
use coord::{Error, Mutex};

use crate::cli::{Global, Lock, LockBackend};
use crate::elect::{hold_then_release, interrupted, session_options};
use crate::exit::Failure;
use crate::guard::Guard;
use crate::output::{Printer, Record};
use crate::setup::{self, Signals};
use crate::supervise::{run_while_held, ttl_outlives, Ended, Guarded, HoldInfo};

/// Takes the lock (waiting, bounded by `--timeout`, or not at all with
/// `--try`), runs the command while holding it, releases it when the
/// command ends, and returns the command's status.
pub async fn run(
    global: &Global,
    args: &Lock,
    signals: &mut Signals,
    printer: Printer,
) -> Result<u8, Failure> {
    if args.backend != LockBackend::Etcd {
        return run_local(args, signals, printer).await;
    }
    if args.slots != 1 || args.dir.is_some() || args.url.is_some() {
        return Err(Failure::Usage(
            "--slots, --dir and --url are not for --backend etcd".into(),
        ));
    }
    coord::validate_name(&args.name)?;
    let options = session_options(global, &args.hold)?;
    if args.command.is_empty() {
        return Err(Failure::Usage("no command given after --".into()));
    }
    let client = setup::connect(global).await?;
    let mutex = Mutex::new(client, &args.name, options).await?;
    printer.event(&Record::new("waiting").with("name", args.name.as_str()));
    let taken = tokio::select! {
        taken = async {
            if args.try_lock {
                mutex.try_lock().await
            } else if let Some(timeout) = args.timeout {
                mutex.lock_timeout(timeout).await
            } else {
                mutex.lock().await
            }
        } => taken,
        number = signals.next() => {
            let _ = mutex.close().await;
            return Ok(interrupted(&args.command, number));
        }
    };
    let guard = match taken {
        Ok(guard) => guard,
        Err(e) => {
            let _ = mutex.close().await;
            if matches!(e, Error::Locked | Error::Timeout) {
                printer.event(&Record::new("held").with("name", args.name.as_str()));
            }
            return Err(e.into());
        }
    };
    let result = hold_then_release(
        "locked",
        &args.name,
        guard,
        &args.hold,
        &args.command,
        signals,
        printer,
    )
    .await;
    let _ = mutex.close().await;
    result
}

/// `lock --backend flock|file|redis|postgres`: the same contract on a
/// lock in a directory of this host, on Redis or on Postgres. The command gets `COORD_FENCE`
/// (the token) and `COORD_KEY` (the lock's name).
async fn run_local(args: &Lock, signals: &mut Signals, printer: Printer) -> Result<u8, Failure> {
    if args.command.is_empty() {
        return Err(Failure::Usage("no command given after --".into()));
    }
    coord::lock::validate_lock_name(&args.name).map_err(LockError::from)?;
    let slots = Slots::new(args.slots).map_err(|e| Failure::Usage(e.to_string()))?;
    let dir = || {
        args.dir
            .clone()
            .ok_or_else(|| Failure::Usage("--dir is needed with --backend flock or file".into()))
    };
    let url = || {
        args.url.clone().ok_or_else(|| {
            Failure::Usage("--url is needed with --backend redis or postgres".into())
        })
    };
    // Started first: a file lock's marker names the guard, which
    // outlives coordctl until the command is gone.
    let guard = Guard::start()?;
    let guard_pid = guard
        .pid()
        .ok_or_else(|| Failure::Guard(std::io::Error::other("the guard exited at once")))?;
    let ttl = std::time::Duration::from_secs(args.hold.ttl);
    let locker = match args.backend {
        LockBackend::Flock => Locker::flock(FlockConfig::new(dir()?).with_slots(slots))?,
        LockBackend::File => Locker::file(
            FileConfig::new(dir()?)
                .with_slots(slots)
                .with_stale_after(args.stale_after)
                .with_owner(guard_pid),
        )?,
        LockBackend::Redis => {
            Locker::redis(RedisConfig::new(url()?).with_slots(slots).with_ttl(ttl))?
        }
        LockBackend::Postgres => Locker::postgres(PostgresConfig::new(url()?).with_slots(slots))?,
        LockBackend::Etcd => return Err(Failure::Usage("etcd is not this path".into())),
    };
    printer.event(&Record::new("waiting").with("name", args.name.as_str()));
    let taken = tokio::select! {
        taken = async {
            if args.try_lock {
                locker.try_acquire(&args.name).await
            } else {
                locker.acquire(&args.name, args.timeout).await
            }
        } => taken,
        number = signals.next() => return Ok(interrupted(&args.command, number)),
    };
    let mut holder = match taken {
        Ok(h) => h,
        Err(e) => {
            if matches!(e, LockError::Locked | LockError::Timeout) {
                printer.event(&Record::new("held").with("name", args.name.as_str()));
            }
            return Err(e.into());
        }
    };
    printer.event(&held_record(&args.name, &holder));
    let info = HoldInfo {
        fence: holder.token().0,
        key: args.name.clone(),
    };
    let guarded = Guarded {
        guard,
        keep: holder.hold_fds(),
        outlives: match args.backend {
            LockBackend::Redis | LockBackend::Etcd => Some(ttl_outlives(ttl)),
            // On its own host a marker lives while the guard it names
            // does; another host (NFS) judges it by the stale window,
            // refreshed every third of it, as a TTL is.
            LockBackend::File => Some(ttl_outlives(args.stale_after)),
            LockBackend::Flock | LockBackend::Postgres => None,
        },
    };
    let ended = run_while_held(
        &args.command,
        &info,
        holder.lost(),
        args.hold.grace,
        guarded,
        signals,
        printer,
    )
    .await;
    let released = holder.release().await;
    printer.event(&Record::new("released").with(
        "confirmed",
        matches!(released, Ok(coord::lock::Released::Released)),
    ));
    match ended? {
        Ended::Exited(code) => Ok(code),
        Ended::Lost(lost) => Err(Failure::LockLost(lost)),
    }
}

fn held_record(name: &str, holder: &Holder) -> Record {
    Record::new("locked")
        .with("name", name)
        .with("slot", holder.slot())
        .with("fence", holder.token().0)
}
