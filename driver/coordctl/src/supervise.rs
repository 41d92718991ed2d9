//! Running a command while holding leadership or a lock: the contract of
//! `coordctl campaign ... -- CMD` and `coordctl lock ... -- CMD`.

use std::os::fd::BorrowedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tracing::{info, warn};

use crate::exit::Failure;
use crate::guard::Guard;
use crate::output::{Printer, Record};
use crate::setup::Signals;

/// How a held command ended.
#[derive(Debug)]
pub enum Ended<L> {
    /// It exited by itself (or after a signal coordctl forwarded); the
    /// status coordctl exits with.
    Exited(u8),
    /// The hold was lost (why: `L`); the command was stopped.
    Lost(L),
}

/// What the command is told about the hold it runs under.
#[derive(Debug, Clone)]
pub struct HoldInfo {
    /// The fencing token (`COORD_FENCE`).
    pub fence: i64,
    /// The holder's key, or the lock's name (`COORD_KEY`).
    pub key: String,
}

/// The command's guard (see `guard`), and what it needs to know.
#[derive(Debug)]
pub struct Guarded<'a> {
    /// The guard, started.
    pub guard: Guard,
    /// The descriptors that keep the hold (`Holder::hold_fds`): the guard
    /// keeps them open until the command is gone.
    pub keep: Vec<BorrowedFd<'a>>,
    /// How long the hold surely outlives coordctl's death, for a hold that
    /// expires by itself (etcd, redis; a marker file, for takers on other
    /// hosts); `None` for one that lasts while the guard keeps `keep` open
    /// (flock, postgres).
    pub outlives: Option<Duration>,
}

impl Guarded<'_> {
    /// How long after SIGTERM the guard sends SIGKILL: the grace, cut to
    /// end within what the hold outlives coordctl.
    fn kill_after(&self, grace: Duration) -> Duration {
        self.outlives.map_or(grace, |o| grace.min(o))
    }
}

/// How long a hold that coordctl refreshes every third of `ttl` surely
/// outlives coordctl's death: two thirds of the TTL (refreshed on time,
/// it had at least that left), less a quarter second for the refresh's
/// own round trip and the guard's reaction.
pub fn ttl_outlives(ttl: Duration) -> Duration {
    (ttl * 2 / 3).saturating_sub(Duration::from_millis(250))
}

/// The exit status that reports `status`: its code, or 128+N for signal N.
pub fn status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + (signal & 0x7f)).unwrap_or(255),
        (None, None) => 1,
    }
}

/// Runs `argv` while the hold lasts (until `lost` completes). The command
/// gets `COORD_FENCE` (the fencing token) and `COORD_KEY` (the holder's
/// key, or the lock's name).
/// - It exits: `Ended::Exited` with its status (the caller releases).
/// - The hold is lost: SIGTERM, then SIGKILL after `grace`;
///   `Ended::Lost`.
/// - coordctl gets SIGINT, SIGTERM or SIGHUP: the same signal is passed
///   on (SIGTERM for a closed stdout), the command has `grace` to exit
///   before SIGKILL; `Ended::Exited`.
/// - coordctl dies: `guarded`'s guard stops the command (see `guard`).
///
/// The command is not run without its guard: a guard that cannot be told
/// about it fails the run (the command is killed at once).
pub async fn run_while_held<L, F>(
    argv: &[String],
    held: &HoldInfo,
    lost: F,
    grace: Duration,
    guarded: Guarded<'_>,
    signals: &mut Signals,
    printer: Printer,
) -> Result<Ended<L>, Failure>
where
    L: std::fmt::Display,
    F: std::future::Future<Output = L>,
{
    let Some((program, args)) = argv.split_first() else {
        return Err(Failure::Usage("no command given after --".into()));
    };
    let mut child = Command::new(program)
        .args(args)
        .env("COORD_FENCE", held.fence.to_string())
        .env("COORD_KEY", &held.key)
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| Failure::Spawn {
            command: program.clone(),
            error,
        })?;
    let pid = child.id();
    let told = pid
        .ok_or_else(|| std::io::Error::other("the command has no pid"))
        .map_err(Failure::Guard)
        .and_then(|pid| {
            guarded
                .guard
                .watch(pid, guarded.kill_after(grace), &guarded.keep)
        });
    if let Err(e) = told {
        let _ = child.start_kill();
        let _ = child.wait().await;
        guarded.guard.dismiss().await;
        return Err(e);
    }
    info!(?pid, command = %program, "command started");
    printer.event(
        &Record::new("started")
            .with("command", program.as_str())
            .with("pid", pid.map_or(serde_json::Value::Null, Into::into)),
    );
    let ended = tokio::select! {
        status = child.wait() => {
            let code = exited(status, program, printer);
            Ok(Ended::Exited(code))
        }
        loss = lost => {
            warn!(%loss, "lost while the command runs: stopping it");
            printer.event(&Record::new("lost").with("reason", loss.to_string()));
            let status = stop(&mut child, Signal::SIGTERM, grace, printer).await;
            exited(status, program, printer);
            Ok(Ended::Lost(loss))
        }
        number = signals.next() => {
            let signal = match Signal::try_from(number) {
                Ok(Signal::SIGPIPE) | Err(_) => Signal::SIGTERM,
                Ok(signal) => signal,
            };
            info!(%signal, "passing the signal on to the command");
            let status = stop(&mut child, signal, grace, printer).await;
            Ok(Ended::Exited(exited(status, program, printer)))
        }
    };
    guarded.guard.dismiss().await;
    ended
}

/// Sends `signal`, waits `grace`, then SIGKILL; the command's status.
async fn stop(
    child: &mut Child,
    signal: Signal,
    grace: Duration,
    printer: Printer,
) -> std::io::Result<ExitStatus> {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        let _ = kill(Pid::from_raw(pid), signal);
        printer.event(&Record::new("signalled").with("signal", signal.as_str()));
    }
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            warn!(?grace, "the command outlived its grace: SIGKILL");
            printer.event(&Record::new("signalled").with("signal", "SIGKILL"));
            let _ = child.start_kill();
            child.wait().await
        }
    }
}

fn exited(status: std::io::Result<ExitStatus>, program: &str, printer: Printer) -> u8 {
    match status {
        Ok(status) => {
            let code = status_code(status);
            printer.event(
                &Record::new("exited")
                    .with("command", program)
                    .with("status", code),
            );
            code
        }
        Err(e) => {
            warn!(error = %e, "cannot wait for the command");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_the_code_or_128_plus_the_signal() {
        assert_eq!(status_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(status_code(ExitStatus::from_raw(3 << 8)), 3);
        // Killed by SIGKILL (9) / SIGTERM (15).
        assert_eq!(status_code(ExitStatus::from_raw(9)), 137);
        assert_eq!(status_code(ExitStatus::from_raw(15)), 143);
    }
}
