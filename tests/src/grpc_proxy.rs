//! `etcd grpc-proxy` (Debian's `etcd-server`, 3.4) in front of an etcd:
//! the topology large etcd users run to coalesce watches and lease
//! streams. Dropping it kills the proxy.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::etcd::{etcd_binary, free_ports};

/// A running `etcd grpc-proxy start` on a free loopback port.
#[derive(Debug)]
pub struct GrpcProxy {
    port: u16,
    endpoints: Vec<String>,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl GrpcProxy {
    /// Starts a proxy to `endpoints` (etcd's client URLs) and waits until
    /// it answers a read.
    pub async fn start(endpoints: &[String]) -> GrpcProxy {
        let mut proxy = GrpcProxy {
            port: free_ports(1)[0],
            endpoints: endpoints.to_vec(),
            dir: tempfile::tempdir().expect("a temp dir"),
            child: None,
        };
        proxy.launch().await;
        proxy
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// kill -9 the proxy and reap it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the proxy again on the same port and waits until it answers.
    pub async fn restart(&mut self) {
        self.kill();
        self.launch().await;
    }

    async fn launch(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("proxy.log")).expect("a log file");
        let child = Command::new(etcd_binary())
            .args(["grpc-proxy", "start"])
            .arg(format!("--endpoints={}", self.endpoints.join(",")))
            .arg(format!("--listen-addr=127.0.0.1:{}", self.port))
            .arg(format!("--advertise-client-url=127.0.0.1:{}", self.port))
            .arg(format!(
                "--data-dir={}",
                self.dir.path().join("data").display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start etcd grpc-proxy");
        self.child = Some(child);
        let endpoint = self.endpoint();
        crate::eventually(Duration::from_secs(30), "grpc-proxy answering", || {
            let endpoint = endpoint.clone();
            async move {
                let mut c = etcd_client::Client::connect([endpoint.as_str()], None)
                    .await
                    .ok()?;
                c.get("/", None).await.ok().map(|_| ())
            }
        })
        .await;
    }
}

impl Drop for GrpcProxy {
    fn drop(&mut self) {
        self.kill();
    }
}
