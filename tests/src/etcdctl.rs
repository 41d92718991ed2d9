//! `etcdctl elect` and `etcdctl lock` (Debian's etcd-client, the Go
//! `concurrency` package) as peers of coord's elections and locks, run as
//! child processes the tests read and kill.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

const INSTALL_HINT: &str = "the `etcdctl` binary is missing: install it with \
     `apt-get install -y etcd-client` (or run scripts/test, which does)";

fn etcdctl() -> Command {
    let bin = ["/usr/bin/etcdctl", "/usr/local/bin/etcdctl"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
        .unwrap_or_else(|| panic!("{INSTALL_HINT}"));
    let mut c = Command::new(bin);
    // etcdctl maps ETCDCTL_* variables to flags; a variable plus the same
    // flag is fatal. Start it with a clean environment.
    c.env_clear();
    c
}

/// A running `etcdctl` whose output lines the test reads.
#[derive(Debug)]
pub struct Peer {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
}

impl Peer {
    /// Runs `command` (any program: etcdctl, or a coord agent) with its
    /// output lines read as a peer's.
    pub fn spawn(mut command: Command) -> Peer {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("spawn etcdctl");
        let (tx, lines) = mpsc::unbounded_channel();
        if let Some(out) = child.stdout.take() {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(out).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    let _ = tx.send(line);
                }
            });
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(async move {
                let mut reader = BufReader::new(err).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    let _ = tx.send(format!("stderr: {line}"));
                }
            });
        }
        Peer { child, lines }
    }

    /// `etcdctl elect NAME VALUE`: prints the leader key, then the value,
    /// once elected, and leads until killed.
    pub fn elect(endpoints: &[String], name: &str, value: &str) -> Peer {
        let mut c = etcdctl();
        c.arg(format!("--endpoints={}", endpoints.join(",")))
            .args(["elect", name, value]);
        Self::spawn(c)
    }

    /// `etcdctl lock NAME --ttl TTL`: prints the lock key once acquired and
    /// holds it until killed.
    pub fn lock(endpoints: &[String], name: &str, ttl: u64) -> Peer {
        let mut c = etcdctl();
        c.arg(format!("--endpoints={}", endpoints.join(","))).args([
            "lock",
            name,
            &format!("--ttl={ttl}"),
        ]);
        Self::spawn(c)
    }

    /// `etcdctl ARGS...` against `endpoints`, left running (a watch, a
    /// lease keep-alive).
    pub fn run(endpoints: &[String], args: &[&str]) -> Peer {
        let mut c = etcdctl();
        c.arg(format!("--endpoints={}", endpoints.join(",")))
            .args(args);
        Self::spawn(c)
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The next output line, or a panic after `deadline`.
    pub async fn line(&mut self, deadline: Duration) -> String {
        match tokio::time::timeout(deadline, self.lines.recv()).await {
            Ok(Some(line)) => line,
            Ok(None) => panic!("etcdctl ended without output"),
            Err(_) => panic!("no output from etcdctl within {deadline:?}"),
        }
    }

    /// The next output line, or `None` if none came within `deadline`
    /// (or etcdctl ended).
    pub async fn try_line(&mut self, deadline: Duration) -> Option<String> {
        tokio::time::timeout(deadline, self.lines.recv())
            .await
            .ok()
            .flatten()
    }

    /// A line already printed, if any.
    pub fn printed(&mut self) -> Option<String> {
        self.lines.try_recv().ok()
    }

    /// Sends `signal` without waiting for the exit.
    pub fn signal(&self, signal: Signal) {
        if let Some(pid) = self.child.id() {
            let _ = kill(Pid::from_raw(i32::try_from(pid).expect("pid")), signal);
        }
    }

    /// Waits for the exit, or panics after `deadline`.
    pub async fn wait(&mut self, deadline: Duration) -> std::process::ExitStatus {
        match tokio::time::timeout(deadline, self.child.wait()).await {
            Ok(status) => status.expect("wait for the process"),
            Err(_) => panic!("the process did not exit within {deadline:?}"),
        }
    }

    /// Every line printed until the process ended (or `deadline` passed).
    pub async fn rest(&mut self, deadline: Duration) -> Vec<String> {
        let mut lines = Vec::new();
        while let Some(line) = self.try_line(deadline).await {
            lines.push(line);
        }
        lines
    }

    /// kill -9.
    pub async fn kill9(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// Sends SIGINT without waiting for the exit.
    pub fn sigint(&self) {
        if let Some(pid) = self.child.id() {
            let _ = kill(
                Pid::from_raw(i32::try_from(pid).expect("pid")),
                Signal::SIGINT,
            );
        }
    }

    /// SIGINT (etcdctl then resigns or unlocks and exits).
    pub async fn interrupt(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = kill(
                Pid::from_raw(i32::try_from(pid).expect("pid")),
                Signal::SIGINT,
            );
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}

/// Runs `etcdctl ARGS...` against `endpoints` to completion; its standard
/// output, or a panic with its standard error if it failed.
pub async fn output(endpoints: &[String], args: &[&str]) -> String {
    let mut c = etcdctl();
    c.arg(format!("--endpoints={}", endpoints.join(",")))
        .args(args)
        .stdin(Stdio::null());
    let out = c.output().await.expect("run etcdctl");
    assert!(
        out.status.success(),
        "etcdctl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
