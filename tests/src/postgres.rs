//! A throwaway Postgres (Debian's `postgresql`): `initdb` in a temp dir,
//! the server on a free loopback port, trust authentication for user
//! `coord`. As root, it runs as the `postgres` user (Postgres refuses
//! root), through `setpriv`, which execs, so the child is the server
//! itself. Stopped on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::{Pid, User};

use crate::etcd::free_ports;

/// One Postgres server.
pub struct PostgresServer {
    port: u16,
    dir: tempfile::TempDir,
    bin: PathBuf,
    user: Option<User>,
    child: Option<Child>,
}

/// The newest `/usr/lib/postgresql/<version>/bin`.
fn bin_dir() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("postgresql (Debian: apt-get install postgresql)")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("postgres").exists())
        .collect();
    versions.sort();
    versions.pop().expect("a postgresql server binary")
}

impl PostgresServer {
    /// Creates a cluster and starts it; waits until it answers.
    pub async fn start() -> PostgresServer {
        let bin = bin_dir();
        let dir = tempfile::tempdir().expect("temp dir");
        let user = if nix::unistd::geteuid().is_root() {
            let user = User::from_name("postgres")
                .ok()
                .flatten()
                .expect("the postgres user (made by Debian's postgresql package)");
            nix::unistd::chown(dir.path(), Some(user.uid), Some(user.gid)).expect("chown");
            Some(user)
        } else {
            None
        };
        let mut s = PostgresServer {
            port: free_ports(1)[0],
            dir,
            bin,
            user,
            child: None,
        };
        let data = s.dir.path().join("data");
        let out = s
            .command("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "coord", "--no-sync", "-E", "UTF8"])
            .output()
            .expect("initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        s.run().await;
        s
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        match &self.user {
            Some(user) => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={}", user.uid))
                    .arg(format!("--regid={}", user.gid))
                    .arg("--clear-groups")
                    .arg(path);
                c
            }
            None => Command::new(path),
        }
    }

    /// A connection string for user `coord`, database `postgres`.
    pub fn url(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=coord dbname=postgres",
            self.port
        )
    }

    async fn run(&mut self) {
        let child = self
            .command("postgres")
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("postgres");
        self.child = Some(child);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let ready = Command::new(self.bin.join("pg_isready"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
                .stdout(Stdio::null())
                .status();
            if ready.is_ok_and(|s| s.success()) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "postgres did not answer within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops it as a crash would (SIGQUIT: every session ends at once, no
    /// checkpoint) and starts it again on the same port.
    pub async fn restart(&mut self) {
        self.stop(Signal::SIGQUIT);
        self.run().await;
    }

    /// SIGSTOP the postmaster (a stall: its port still accepts, no new
    /// session starts).
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// SIGCONT after [`PostgresServer::pause`].
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    /// SIGSTOP the postmaster and every process it started (its sessions'
    /// backends too): a server that stalled, whose open connections stay
    /// open and silent.
    pub fn stall(&self) {
        self.signal_all(Signal::SIGSTOP);
    }

    /// SIGCONT after [`PostgresServer::stall`].
    pub fn unstall(&self) {
        self.signal_all(Signal::SIGCONT);
    }

    /// Signals the postmaster and its children (found in `/proc`).
    fn signal_all(&self, signal: Signal) {
        let Some(pid) = self.child.as_ref().map(Child::id) else {
            return;
        };
        let children = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|p| parent_of(*p) == Some(pid));
        for p in std::iter::once(pid).chain(children) {
            if let Ok(p) = i32::try_from(p) {
                let _ = kill(Pid::from_raw(p), signal);
            }
        }
    }

    fn signal(&self, signal: Signal) {
        if let Some(pid) = self.child.as_ref().and_then(|c| i32::try_from(c.id()).ok()) {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }

    fn stop(&mut self, signal: Signal) {
        self.unstall();
        if let Some(mut child) = self.child.take() {
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = kill(Pid::from_raw(pid), signal);
            }
            let _ = child.wait();
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop(Signal::SIGQUIT);
    }
}

/// The parent of process `pid`, from `/proc/<pid>/stat` (the field after
/// the command's closing parenthesis and the state).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}
