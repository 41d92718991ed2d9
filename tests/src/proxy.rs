//! A loopback TCP proxy that can cut, blackhole and restore the path
//! between a client and etcd, to make partitions without root.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward both ways.
    Pass,
    /// Close every connection and refuse new ones (accept, then close):
    /// the client sees errors at once, like a crashed server.
    Cut,
    /// Keep connections open but forward nothing, and accept new ones that
    /// never answer: the client sees silence, like a partition.
    Blackhole,
}

/// A running proxy on a free loopback port, forwarding to `target`. Its
/// tasks end with the test's runtime.
#[derive(Debug, Clone)]
pub struct Proxy {
    addr: SocketAddr,
    mode: Arc<watch::Sender<Mode>>,
}

impl Proxy {
    /// Starts forwarding `127.0.0.1:<free port>` to `target` (`host:port`).
    pub async fn start(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let (mode, _) = watch::channel(Mode::Pass);
        let mode = Arc::new(mode);
        let target = target.trim_start_matches("http://").to_string();
        let modes = Arc::clone(&mode);
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(serve(conn, target.clone(), modes.subscribe()));
            }
        });
        Proxy { addr, mode }
    }

    /// `http://127.0.0.1:<port>` of the proxy.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Switches the mode; existing connections follow at once.
    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }
}

async fn serve(mut client: TcpStream, target: String, mut mode: watch::Receiver<Mode>) {
    let current = *mode.borrow_and_update();
    match current {
        Mode::Cut => return,
        Mode::Blackhole => {
            // Hold the connection open, silent, until the mode changes.
            let _ = mode.changed().await;
            return;
        }
        Mode::Pass => {}
    }
    let Ok(mut server) = TcpStream::connect(&target).await else {
        return;
    };
    // As etcd and its gRPC clients do: without it, Nagle's algorithm holds
    // a small write behind an unacknowledged one until the peer's delayed
    // ACK (40 ms on Linux), which no direct connection pays.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    tokio::select! {
        biased;
        _ = mode.wait_for(|m| *m != Mode::Pass) => {}
        _ = copy_bidirectional(&mut client, &mut server) => return,
    }
    if *mode.borrow() == Mode::Blackhole {
        // Stop forwarding but keep both sockets open: silence. Closed when
        // the mode changes again (as a healed partition's stale connection
        // would be, after its keep-alive timed out).
        let _ = mode.changed().await;
    }
}
