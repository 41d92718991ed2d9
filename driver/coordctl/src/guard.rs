//! The command's guard: a second coordctl process (`coordctl guard`,
//! hidden) that makes sure a command run under a hold never outlives the
//! hold when coordctl itself dies (SIGKILL, a crash, the OOM killer).
//!
//! coordctl starts its guard before it takes the hold, and tells it over
//! a Unix socket (the guard's stdin) which command to guard, how long the
//! command may take to stop, and the descriptors that keep the hold
//! (`Holder::hold_fds`: a flock lock's file, a Postgres lock's
//! connection), which the guard keeps open. When coordctl is done with
//! the command, it dismisses the guard. When the socket closes without
//! that, coordctl died: the guard sends the command SIGTERM at once and
//! SIGKILL once its time is up, waits until it is gone, and only then
//! exits, closing what it kept, which frees a flock or Postgres lock.
//! For a file lock, the marker names the guard's pid, so it is freed when
//! the guard exits. etcd and Redis holds expire one TTL after their last
//! refresh: the command's time is cut to end before then.
//!
//! The guard runs in a process group of its own (a terminal's Ctrl-C
//! reaches coordctl, which passes it on) and blocks SIGINT, SIGTERM,
//! SIGHUP and SIGQUIT: only SIGKILL ends it before its command is gone.
//! The command is known by its pid and start time, so a reused pid is
//! never signalled.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use coord::lock::{probe_pid, process_start_time, PidProbe};
use nix::errno::Errno;
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::socket::{
    recvmsg, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags,
    SockFlag, SockType,
};
use nix::unistd::Pid;

use crate::exit::Failure;

/// Writes a line to stderr, ignoring a failure: unlike `eprintln!`, which
/// panics when stderr is closed (a pipe whose reader left), and the guard
/// must live on to stop the command.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// The most descriptors one message carries.
const MAX_FDS: usize = 8;
/// How often the guard looks whether the command is gone.
const POLL: Duration = Duration::from_millis(10);
/// How long the guard waits for a SIGKILLed command to be gone.
const KILLED_WITHIN: Duration = Duration::from_secs(10);

/// coordctl's end of its guard: dropping it without [`Guard::dismiss`]
/// looks to the guard as coordctl's death (harmless once the command has
/// ended: its pid and start time no longer name a process).
#[derive(Debug)]
pub struct Guard {
    link: OwnedFd,
    child: tokio::process::Child,
}

/// What the guard is told to watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Watch {
    pid: u32,
    start_time: Option<u64>,
    kill_after: Duration,
}

/// One message from coordctl to its guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Message {
    /// Guard this command (the descriptors come with it).
    Watch(Watch),
    /// coordctl is done with the command: exit.
    Done,
}

impl Message {
    fn encode(&self) -> String {
        match self {
            Message::Watch(w) => format!(
                "watch {} {} {}",
                w.pid,
                w.start_time
                    .map_or_else(|| "-".to_string(), |t| t.to_string()),
                w.kill_after.as_millis()
            ),
            Message::Done => "done".to_string(),
        }
    }

    fn parse(text: &str) -> Option<Message> {
        let mut words = text.split_whitespace();
        let message = match words.next()? {
            "done" => Message::Done,
            "watch" => {
                let pid = words.next()?.parse().ok()?;
                let start_time = match words.next()? {
                    "-" => None,
                    t => Some(t.parse().ok()?),
                };
                let kill_after = Duration::from_millis(words.next()?.parse().ok()?);
                Message::Watch(Watch {
                    pid,
                    start_time,
                    kill_after,
                })
            }
            _ => return None,
        };
        words.next().is_none().then_some(message)
    }
}

impl Guard {
    /// Starts this binary as the guard (`coordctl guard`). Fails if it
    /// cannot: coordctl then runs no command.
    pub fn start() -> Result<Guard, Failure> {
        let (link, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| Failure::Guard(e.into()))?;
        let exe = std::env::current_exe().map_err(Failure::Guard)?;
        let child = tokio::process::Command::new(exe)
            .arg("guard")
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(Failure::Guard)?;
        Ok(Guard { link, child })
    }

    /// The guard's pid (a file lock's marker names it).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Tells the guard to stop process `pid` (a child of coordctl, not yet
    /// reaped) within `kill_after` of coordctl's death, and to keep `keep`
    /// open until it is gone.
    pub fn watch(
        &self,
        pid: u32,
        kill_after: Duration,
        keep: &[BorrowedFd<'_>],
    ) -> Result<(), Failure> {
        let message = Message::Watch(Watch {
            pid,
            start_time: process_start_time(pid),
            kill_after,
        });
        let fds: Vec<RawFd> = keep.iter().map(AsRawFd::as_raw_fd).collect();
        self.send(&message, &fds)
    }

    /// coordctl is done with the command: the guard exits, closing what it
    /// kept. Waits (a second at most) for it to exit.
    pub async fn dismiss(mut self) {
        if let Err(e) = self.send(&Message::Done, &[]) {
            tracing::warn!(error = %e, "cannot dismiss the command's guard");
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), self.child.wait()).await;
    }

    fn send(&self, message: &Message, fds: &[RawFd]) -> Result<(), Failure> {
        let text = message.encode();
        let rights = [ControlMessage::ScmRights(fds)];
        let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &rights };
        sendmsg::<()>(
            self.link.as_raw_fd(),
            &[IoSlice::new(text.as_bytes())],
            cmsgs,
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .map(|_| ())
        .map_err(|e| Failure::Guard(e.into()))
    }
}

/// `coordctl guard`: serves coordctl on stdin until dismissed, or until
/// coordctl is gone, then stops the command it was told to watch.
pub fn serve() -> ExitCode {
    let mut blocked = SigSet::empty();
    for signal in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGPIPE,
    ] {
        blocked.add(signal);
    }
    if let Err(e) = blocked.thread_block() {
        say!("coordctl guard: cannot block signals: {e}");
    }
    let link = std::io::stdin();
    let mut watching = None;
    // Kept open until this process exits: that is their whole use.
    let mut kept: Vec<RawFd> = Vec::new();
    loop {
        match receive(link.as_raw_fd(), &mut kept) {
            Received::Message(Message::Watch(w)) => watching = Some(w),
            Received::Message(Message::Done) => return ExitCode::SUCCESS,
            Received::Garbled => {
                say!("coordctl guard: a message it cannot read: taken for coordctl gone");
                break;
            }
            Received::Closed => break,
        }
    }
    if let Some(w) = watching {
        stop(w);
    }
    ExitCode::SUCCESS
}

/// What one receive gave.
enum Received {
    Message(Message),
    /// Not a message: coordctl is not itself.
    Garbled,
    /// End of stream or an error: coordctl is gone.
    Closed,
}

/// Receives one message, adding the descriptors it carries to `kept`.
fn receive(link: RawFd, kept: &mut Vec<RawFd>) -> Received {
    let mut buf = [0u8; 256];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    loop {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let received = recvmsg::<()>(link, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC);
        let (bytes, fds) = match received {
            Ok(msg) => {
                let fds: Vec<RawFd> = msg
                    .cmsgs()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| match c {
                        ControlMessageOwned::ScmRights(fds) => Some(fds),
                        _ => None,
                    })
                    .flatten()
                    .collect();
                (msg.bytes, fds)
            }
            Err(Errno::EINTR) => continue,
            Err(_) => return Received::Closed,
        };
        kept.extend(fds);
        if bytes == 0 {
            return Received::Closed;
        }
        let text = String::from_utf8_lossy(&buf[..bytes]);
        return match Message::parse(&text) {
            Some(m) => Received::Message(m),
            None => Received::Garbled,
        };
    }
}

/// True while `w.pid` still names the command (not gone, not a zombie,
/// not reused by another process).
fn alive(w: &Watch) -> bool {
    match probe_pid(w.pid) {
        PidProbe::Alive { start_time } => {
            w.start_time.is_none() || start_time.is_none() || start_time == w.start_time
        }
        // Not ours to judge: leave it alone.
        PidProbe::Denied | PidProbe::Failed | PidProbe::Gone | PidProbe::NotProbed => false,
    }
}

/// Waits until the command is gone or `within` has passed; true if gone.
fn gone_within(w: &Watch, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if !alive(w) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// SIGTERM, then SIGKILL after `kill_after`; returns once the command is
/// gone (or SIGKILL could not end it within `KILLED_WITHIN`).
fn stop(w: Watch) {
    if !alive(&w) {
        return;
    }
    let Ok(raw) = i32::try_from(w.pid) else {
        return;
    };
    let pid = Pid::from_raw(raw);
    say!(
        "coordctl guard: coordctl is gone; its command (pid {}) gets SIGTERM, and SIGKILL after {:?}",
        w.pid, w.kill_after
    );
    let _ = kill(pid, Signal::SIGTERM);
    if gone_within(&w, w.kill_after) {
        return;
    }
    // Checked again right before: the pid must still be the command's.
    if alive(&w) {
        say!("coordctl guard: the command (pid {}) gets SIGKILL", w.pid);
        let _ = kill(pid, Signal::SIGKILL);
    }
    if !gone_within(&w, KILLED_WITHIN) {
        say!(
            "coordctl guard: the command (pid {}) survived SIGKILL for {KILLED_WITHIN:?}",
            w.pid
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_back_and_garbage_is_refused() {
        for m in [
            Message::Done,
            Message::Watch(Watch {
                pid: 42,
                start_time: Some(987),
                kill_after: Duration::from_millis(1500),
            }),
            Message::Watch(Watch {
                pid: 7,
                start_time: None,
                kill_after: Duration::ZERO,
            }),
        ] {
            assert_eq!(Message::parse(&m.encode()), Some(m));
        }
        for bad in [
            "",
            "watch",
            "watch 1 2",
            "watch x 2 3",
            "watch 1 2 3 4",
            "done now",
            "stop",
        ] {
            assert_eq!(Message::parse(bad), None, "{bad:?}");
        }
    }
}
