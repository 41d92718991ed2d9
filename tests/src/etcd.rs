//! Real etcd servers (Debian's `etcd-server`, 3.4) for tests.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const INSTALL_HINT: &str = "the `etcd` binary is missing: install it with \
     `apt-get install -y etcd-server etcd-client` (or run scripts/test, which does)";

/// Picks `n` distinct free loopback ports (held open while choosing so they
/// differ; a tiny race with other processes remains, as for any such pick).
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a loopback port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local addr").port())
        .collect()
}

pub(crate) fn etcd_binary() -> PathBuf {
    let from_env = std::env::var_os("COORD_TEST_ETCD").map(PathBuf::from);
    let candidates = from_env
        .into_iter()
        .chain(["/usr/bin/etcd", "/usr/local/bin/etcd"].map(PathBuf::from));
    for c in candidates {
        if c.is_file() {
            return c;
        }
    }
    panic!("{INSTALL_HINT}");
}

/// One etcd member.
/// etcd's log level in tests: `COORD_TEST_ETCD_LOG`, else `warn`.
fn log_level() -> String {
    std::env::var("COORD_TEST_ETCD_LOG").unwrap_or_else(|_| "warn".into())
}

/// How a TLS etcd is started: its certificate and key, the CA it trusts
/// for client certificates (with `--client-cert-auth`), and what the
/// harness itself presents.
#[derive(Debug, Clone)]
pub struct ServerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    pub client_cert_auth: bool,
    /// The harness's own client certificate and key.
    pub client: Option<(PathBuf, PathBuf)>,
}

#[derive(Debug)]
pub struct Member {
    pub name: String,
    scheme: &'static str,
    pub client_port: u16,
    pub peer_port: u16,
    data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Member {
    /// `http://127.0.0.1:<client port>` (`https://` with TLS).
    pub fn endpoint(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.client_port)
    }

    /// What the member logged so far (warnings and errors).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn pid(&self) -> Option<Pid> {
        self.child
            .as_ref()
            .map(|c| Pid::from_raw(i32::try_from(c.id()).expect("pid fits i32")))
    }
}

/// A single node or a 3-node cluster of real etcd processes, with a temp
/// dir for data and logs. Dropping it kills every member it started.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<Member>,
    heartbeat_ms: u32,
    election_ms: u32,
    token: String,
    tls: Option<ServerTls>,
    _dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// One member with fast raft timing (heartbeat 10 ms, election 100 ms).
    pub async fn single() -> EtcdCluster {
        Self::start(1, 10, 100, None).await
    }

    /// One member serving clients over TLS only.
    pub async fn single_tls(tls: ServerTls) -> EtcdCluster {
        Self::start(1, 10, 100, Some(tls)).await
    }

    /// Three members, heartbeat 50 ms, election 500 ms.
    pub async fn three() -> EtcdCluster {
        Self::start(3, 50, 500, None).await
    }

    async fn start(
        size: usize,
        heartbeat_ms: u32,
        election_ms: u32,
        tls: Option<ServerTls>,
    ) -> EtcdCluster {
        let bin = etcd_binary();
        let dir = tempfile::Builder::new()
            .prefix("coord-etcd-")
            .tempdir()
            .expect("temp dir");
        let ports = free_ports(size * 2);
        let members = (0..size)
            .map(|i| Member {
                name: format!("n{}", i + 1),
                scheme: if tls.is_some() { "https" } else { "http" },
                client_port: ports[i],
                peer_port: ports[size + i],
                data_dir: dir.path().join(format!("n{}.data", i + 1)),
                log: dir.path().join(format!("n{}.log", i + 1)),
                child: None,
            })
            .collect();
        let token = format!("coord-test-{}", ports[0]);
        let mut cluster = EtcdCluster {
            members,
            heartbeat_ms,
            election_ms,
            token,
            tls,
            _dir: dir,
        };
        for i in 0..size {
            cluster.launch(&bin, i);
        }
        for i in 0..size {
            cluster.wait_healthy(i, Duration::from_secs(30)).await;
        }
        cluster
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn launch(&mut self, bin: &Path, i: usize) {
        let initial = self.initial_cluster();
        let m = &self.members[i];
        let state = if m.data_dir.join("member").exists() {
            "existing"
        } else {
            "new"
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .expect("open etcd log");
        let log2 = log.try_clone().expect("clone log handle");
        let client = m.endpoint();
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        // etcd maps every ETCD_* variable to a flag (and a variable plus the
        // same flag is fatal): start it with a clean environment.
        let mut command = Command::new(bin);
        if let Some(tls) = &self.tls {
            command
                .arg("--cert-file")
                .arg(&tls.cert)
                .arg("--key-file")
                .arg(&tls.key);
            if tls.client_cert_auth {
                command
                    .arg("--trusted-ca-file")
                    .arg(&tls.ca)
                    .arg("--client-cert-auth");
            }
        }
        let child = command
            .env_clear()
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&m.data_dir)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial])
            .args(["--initial-cluster-state", state])
            .args(["--initial-cluster-token", &self.token])
            .args(["--heartbeat-interval", &self.heartbeat_ms.to_string()])
            .args(["--election-timeout", &self.election_ms.to_string()])
            // COORD_TEST_ETCD_LOG=debug shows gRPC's own messages (a
            // GOAWAY for too many pings, say).
            .args(["--logger", "zap", "--log-level", &log_level()])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .expect("spawn etcd");
        self.members[i].child = Some(child);
    }

    /// The members.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Every member's client endpoint.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::endpoint).collect()
    }

    /// Endpoints of every member but `except`.
    pub fn endpoints_except(&self, except: usize) -> Vec<String> {
        self.members
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != except)
            .map(|(_, m)| m.endpoint())
            .collect()
    }

    /// A client to every member (default options).
    pub async fn client(&self) -> etcd_client::Client {
        self.client_to(&self.endpoints()).await
    }

    /// A client to the given endpoints with coord's recommended options.
    pub async fn client_to(&self, endpoints: &[String]) -> etcd_client::Client {
        let c = coord::connect(endpoints, coord::ConnectOptions::default())
            .await
            .expect("connect");
        // The client dialled to every endpoint (not the one member coord's
        // handles use at a time).
        c.etcd()
    }

    /// A coord client to every member (`coord::connect`: shared probe,
    /// re-dialled when etcd goes silent).
    pub async fn coord_client(&self) -> coord::Client {
        coord::connect(&self.endpoints(), coord::ConnectOptions::default())
            .await
            .expect("connect")
    }

    /// Waits until member `i` answers a status request, or panics.
    pub async fn wait_healthy(&self, i: usize, deadline: Duration) {
        let ep = self.members[i].endpoint();
        let log = self.members[i].log.clone();
        let start = tokio::time::Instant::now();
        loop {
            let ok = async {
                let mut c = self.plain_client(&ep).await?;
                tokio::time::timeout(Duration::from_millis(500), c.status())
                    .await
                    .ok()?
                    .ok()
                    .filter(|s| s.leader() != 0)
            }
            .await;
            if ok.is_some() {
                return;
            }
            if start.elapsed() > deadline {
                let tail = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("etcd {ep} not healthy after {deadline:?}; log:\n{tail}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Turns etcd's authentication on, with user `root` (role `root`) and
    /// `password`: from then on every request needs credentials.
    pub async fn enable_auth(&self, password: &str) {
        let eps = self.endpoints();
        for args in [
            vec!["user", "add", &format!("root:{password}")],
            vec!["role", "add", "root"],
            vec!["user", "grant-role", "root", "root"],
            vec!["auth", "enable"],
        ] {
            crate::etcdctl::output(&eps, &args).await;
        }
    }

    /// An etcd-client client to `endpoint`, with the harness's TLS.
    async fn plain_client(&self, endpoint: &str) -> Option<etcd_client::Client> {
        let options = self.tls.as_ref().map(|tls| {
            let client = tls.client.as_ref();
            let tls = coord::TlsOptions::from_files(
                Some(&tls.ca),
                client.map(|c| c.0.as_path()),
                client.map(|c| c.1.as_path()),
            )
            .expect("the harness's certificates load");
            coord::ConnectOptions::default().with_tls(tls)
        });
        match options {
            None => etcd_client::Client::connect([endpoint], None).await.ok(),
            Some(options) => coord::connect(&[endpoint], options)
                .await
                .ok()
                .map(|c| c.etcd()),
        }
    }

    fn signal(&self, i: usize, sig: Signal) {
        if let Some(pid) = self.members[i].pid() {
            kill(pid, sig).expect("signal etcd");
        }
    }

    /// kill -9 member `i` and reap it.
    pub fn kill(&mut self, i: usize) {
        self.signal(i, Signal::SIGCONT);
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP member `i` (a stall: its port still accepts).
    pub fn pause(&self, i: usize) {
        self.signal(i, Signal::SIGSTOP);
    }

    /// SIGCONT member `i`.
    pub fn resume(&self, i: usize) {
        self.signal(i, Signal::SIGCONT);
    }

    /// Starts member `i` again on its data dir and waits until it is
    /// healthy (for a 3-node cluster, at least one other member must run).
    pub async fn restart(&mut self, i: usize) {
        self.kill(i);
        let bin = etcd_binary();
        self.launch(&bin, i);
        self.wait_healthy(i, Duration::from_secs(30)).await;
    }

    /// Kills a single-node cluster's member, deletes its data and starts it
    /// empty on the same ports: what a restore from an old snapshot looks
    /// like (revision back near 1, every lease gone). With `new_cluster`,
    /// under a new cluster token, so it answers with another cluster id.
    pub async fn wipe(&mut self, new_cluster: bool) {
        assert_eq!(self.members.len(), 1, "wipe is for a single node");
        self.kill(0);
        std::fs::remove_dir_all(&self.members[0].data_dir).expect("delete the data dir");
        if new_cluster {
            self.token.push_str("-replaced");
        }
        let bin = etcd_binary();
        self.launch(&bin, 0);
        self.wait_healthy(0, Duration::from_secs(30)).await;
    }

    /// Index of the member that currently leads, asking the live members.
    pub async fn leader(&self) -> Option<usize> {
        for (i, m) in self.members.iter().enumerate() {
            if m.child.is_none() {
                continue;
            }
            let Ok(mut c) = etcd_client::Client::connect([m.endpoint()], None).await else {
                continue;
            };
            let Ok(Ok(status)) = tokio::time::timeout(Duration::from_secs(1), c.status()).await
            else {
                continue;
            };
            let me = status.header().map(|h| h.member_id());
            if me == Some(status.leader()) {
                return Some(i);
            }
        }
        None
    }

    /// Waits until some live member other than `not` leads; returns it.
    pub async fn wait_leader_other_than(&self, not: Option<usize>, deadline: Duration) -> usize {
        crate::eventually(deadline, "a new etcd leader", || async {
            self.leader().await.filter(|l| Some(*l) != not)
        })
        .await
    }

    /// Asks the current leader to hand leadership to member `to`.
    pub async fn move_leader(&self, to: usize) {
        let leader = self.leader().await.expect("a leader");
        let mut target = etcd_client::Client::connect([self.members[to].endpoint()], None)
            .await
            .expect("connect target");
        let target_id = target
            .status()
            .await
            .expect("target status")
            .header()
            .expect("header")
            .member_id();
        let mut c = etcd_client::Client::connect([self.members[leader].endpoint()], None)
            .await
            .expect("connect leader");
        c.move_leader(target_id).await.expect("move leader");
    }

    /// Compacts the key space up to the current revision.
    pub async fn compact(&self) -> i64 {
        let mut c = self.client().await;
        let rev = c
            .get("compact-probe", None)
            .await
            .expect("get")
            .header()
            .expect("header")
            .revision();
        c.compact(rev, None).await.expect("compact");
        rev
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
