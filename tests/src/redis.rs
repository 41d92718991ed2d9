//! A throwaway `redis-server` on a free loopback port, in a temp dir,
//! without persistence (a restart loses every key: what the lock
//! family's tokens must survive). Killed on drop.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::etcd::free_ports;

/// One redis-server.
pub struct RedisServer {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts one and waits until it answers.
    pub async fn start() -> RedisServer {
        let mut s = RedisServer {
            port: free_ports(1)[0],
            dir: tempfile::tempdir().expect("temp dir"),
            child: None,
        };
        s.run().await;
        s
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    async fn run(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (Debian: apt-get install redis-server)");
        self.child = Some(child);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let ping = Command::new("redis-cli")
                .args(["-p", &self.port.to_string(), "ping"])
                .output();
            if ping.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "PONG") {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "redis-server did not answer within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Kills it (-9) and starts it again on the same port: every key is
    /// gone.
    pub async fn restart(&mut self) {
        self.kill();
        self.run().await;
    }

    /// SIGSTOP (a stall: its port still accepts, nothing answers).
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// SIGCONT after [`RedisServer::pause`].
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    fn signal(&self, sig: Signal) {
        if let Some(child) = &self.child {
            let pid = i32::try_from(child.id()).expect("a pid");
            kill(Pid::from_raw(pid), sig).expect("signal redis-server");
        }
    }

    /// Kills it (-9).
    pub fn kill(&mut self) {
        self.resume();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
