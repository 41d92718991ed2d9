//! coordctl under other setups: TLS, authentication, its metrics, and the
//! flock, file, Redis and Postgres lock backends.

use super::*;

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_works_with_good_certificates_and_fails_clearly_otherwise() {
    let certs = Certs::generate();
    let etcd = EtcdCluster::single_tls(certs.server_tls()).await;
    let eps = etcd.endpoints();
    assert!(eps[0].starts_with("https://"));
    let with = |ca: &Path, client: Option<&coord_tests::certs::Pair>, args: &[&str]| {
        let mut c = coordctl(&eps);
        c.args(["--dial-timeout", "3s", "--cacert", path(ca)]);
        if let Some(pair) = client {
            c.args(["--cert", path(&pair.cert), "--key", path(&pair.key)]);
        }
        c.args(args);
        c
    };
    let (code, out, err) = run(with(
        &certs.ca,
        Some(&certs.client),
        &["-w", "json", "lock", "tls-lock", "--", "true"],
    ))
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(json_lines(&out).iter().any(|l| l["event"] == "locked"));

    // Without verification any CA (or none) goes; the client certificate
    // is still presented.
    for ca in [None, Some(&certs.foreign_ca)] {
        let mut c = coordctl(&eps);
        c.args(["--dial-timeout", "3s", "--insecure-skip-tls-verify"])
            .args(["--cert", path(&certs.client.cert)])
            .args(["--key", path(&certs.client.key)]);
        if let Some(ca) = ca {
            c.args(["--cacert", path(ca)]);
        }
        c.args(["-w", "json", "lock", "unverified", "--", "true"]);
        let (code, out, err) = run(c).await;
        assert_eq!(code, 0, "{ca:?}: {out}\n{err}");
    }
    let (code, _, err) = run({
        let mut c = coordctl(&eps);
        c.args([
            "--dial-timeout",
            "3s",
            "--insecure-skip-tls-verify",
            "hosts",
        ]);
        c
    })
    .await;
    assert_eq!(
        code, 2,
        "unverified, but still no client certificate: {err}"
    );
    assert!(err.contains("TLS"), "{err}");

    for (what, ca, client) in certs.refused() {
        let start = Instant::now();
        let (code, _, err) = run(with(ca, client, &["hosts"])).await;
        eprintln!("{what}: {err}");
        assert_eq!(code, 2, "{what}: {err}");
        assert!(err.contains("TLS"), "{what} is named a TLS failure: {err}");
        assert!(start.elapsed() < DEADLINE / 2, "{what}: no hang");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn auth_takes_the_right_password_from_flags_or_environment() {
    let etcd = EtcdCluster::single().await;
    let eps = etcd.endpoints();
    etcd.enable_auth("s3cret").await;
    let (code, _, err) = run(ctl(&eps, &["--user", "root:wrong", "hosts"])).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("credentials"), "{err}");
    assert!(
        !err.contains("wrong"),
        "the password is never printed: {err}"
    );

    let (code, out, err) = run({
        let mut c = coordctl(&eps);
        c.args(["--user", "root", "--password", "s3cret"])
            .args(["-w", "json", "lock", "authed", "--", "true"]);
        c
    })
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, out, err) = run({
        let mut c = coordctl(&eps);
        c.env("ETCDCTL_USER", "root:s3cret").args(["hosts"]);
        c
    })
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
}

/// `GET /metrics` over plain HTTP/1.0; the body, once it holds every
/// `wanted` line prefix (or a panic after the deadline).
async fn scrape(port: u16, wanted: &[&str]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let start = Instant::now();
    loop {
        let body = async {
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()?;
            s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
                .await
                .ok()?;
            let mut text = String::new();
            s.read_to_string(&mut text).await.ok()?;
            let (head, body) = text.split_once("\r\n\r\n")?;
            head.starts_with("HTTP/1.").then(|| body.to_string())
        }
        .await;
        if let Some(body) = body {
            if wanted
                .iter()
                .all(|w| body.lines().any(|l| l.starts_with(w)))
            {
                return body;
            }
        }
        assert!(
            start.elapsed() < DEADLINE,
            "no metrics {wanted:?} within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every sample line of Prometheus' text format: `name{labels} value`.
fn samples(body: &str) -> Vec<(String, f64)> {
    body.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("a sample line");
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("a number: {l}"));
            (series.to_string(), value)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_are_served_in_prometheus_text_format() {
    let etcd = EtcdCluster::single().await;
    let eps = etcd.endpoints();
    let ports = coord_tests::etcd::free_ports(2);
    let mut host = Peer::spawn({
        let mut c = coordctl(&eps);
        c.args(["--metrics-addr", &format!("127.0.0.1:{}", ports[0])])
            .args([
                "-w",
                "json",
                "register",
                "--id",
                "metered-host",
                "--ttl",
                "2",
            ]);
        c
    });
    next_event(&mut host, "registered").await;
    let body = scrape(
        ports[0],
        &[
            "coord_lease_registrations_total{handle=\"liveness\"} 1",
            "coord_keepalive_rtt_seconds_count",
            "coord_lease_remaining_seconds{handle=\"liveness\"}",
        ],
    )
    .await;
    let remaining = samples(&body)
        .into_iter()
        .find(|(s, _)| s.starts_with("coord_lease_remaining_seconds"))
        .unwrap()
        .1;
    assert!(remaining > 0.0 && remaining <= 2.0, "{remaining}");
    assert!(
        !body.contains("metered-host"),
        "no host id in any label: {body}"
    );
    host.signal(Signal::SIGTERM);
    assert_eq!(host.wait(DEADLINE).await.code(), Some(0));

    let mut leader = Peer::spawn({
        let mut c = coordctl(&eps);
        c.args(["--metrics-addr", &format!("127.0.0.1:{}", ports[1])])
            .args(["-w", "json", "campaign", "metered", "v"]);
        c
    });
    next_event(&mut leader, "elected").await;
    let body = scrape(
        ports[1],
        &[
            "coord_elections_won_total 1",
            "coord_campaign_wait_seconds_count 1",
            "coord_lease_registrations_total{handle=\"session\"} 1",
        ],
    )
    .await;
    assert!(samples(&body).iter().all(|(_, v)| v.is_finite()));
    leader.signal(Signal::SIGINT);
    assert_eq!(leader.wait(DEADLINE).await.code(), Some(0));

    // A taken address is bad input: exit 1 before anything is written.
    let _taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = _taken.local_addr().unwrap().port();
    let (code, _, err) = run(ctl(
        &eps,
        &["--metrics-addr", &format!("127.0.0.1:{port}"), "hosts"],
    ))
    .await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("metrics"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn lock_on_flock_and_file_backends_keeps_the_same_contract() {
    // No etcd: the endpoints are never dialled.
    let eps = vec!["http://127.0.0.1:9".to_string()];
    for backend in ["flock", "file"] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let local = |extra: &[&str]| {
            let mut args = vec!["lock", "--backend", backend, "--dir", d];
            args.extend_from_slice(extra);
            ctl(&eps, &args)
        };
        // The command runs under the lock with its token.
        let (code, out, err) = run(local(&[
            "jobs",
            "--",
            "sh",
            "-c",
            "echo fence=$COORD_FENCE key=$COORD_KEY; exit 7",
        ]))
        .await;
        assert_eq!(code, 7, "{backend}: {err}");
        assert!(out.contains("fence=1 key=jobs"), "{backend}: {out}");
        // Held by another: --try and --timeout exit 124.
        let mut holder = Peer::spawn(local(&["jobs", "--", "sleep", "600"]));
        let mut held = false;
        for _ in 0..100 {
            let (code, _, _) = run(local(&["jobs", "--try", "--", "true"])).await;
            if code == 124 {
                held = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(held, "{backend}: the holder never held");
        let (code, _, err) = run(local(&["jobs", "--timeout", "300ms", "--", "true"])).await;
        assert_eq!(code, 124, "{backend}: {err}");
        holder.interrupt().await;
        // Released: the next holder gets a greater token.
        let (code, out, err) = run(local(&["jobs", "--", "sh", "-c", "echo $COORD_FENCE"])).await;
        assert_eq!(code, 0, "{backend}: {err}");
        // coordctl's own events are on stdout too: the command's line is
        // the one number.
        let fence: i64 = out
            .lines()
            .find_map(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("{backend}: no token in {out}"));
        assert!(fence >= 3, "{backend}: token {fence}");
        // Bad names and options: exit 125 (with a command), nothing
        // written.
        let before = std::fs::read_dir(dir.path()).unwrap().count();
        for bad in [
            &["a/b", "--", "true"][..],
            &[".x", "--", "true"],
            &["j", "--slots", "0", "--", "true"],
        ] {
            let (code, _, err) = run(local(bad)).await;
            assert_eq!(code, 125, "{backend} {bad:?}: {err}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), before);
    }
    let (code, _, err) = run(ctl(&eps, &["lock", "jobs", "--slots", "2", "--", "true"])).await;
    assert_eq!(code, 125, "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn lock_on_redis_runs_the_command_and_refuses_a_held_lock() {
    let server = coord_tests::redis::RedisServer::start().await;
    let eps = vec!["http://127.0.0.1:9".to_string()];
    let url = server.url();
    let redis = |extra: &[&str]| {
        let mut args = vec![
            "lock",
            "--backend",
            "redis",
            "--url",
            url.as_str(),
            "--ttl",
            "5",
        ];
        args.extend_from_slice(extra);
        ctl(&eps, &args)
    };
    let (code, out, err) = run(redis(&[
        "jobs",
        "--",
        "sh",
        "-c",
        "echo fence=$COORD_FENCE",
    ]))
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("fence="), "{out}");
    let mut holder = Peer::spawn(redis(&["jobs", "--", "sleep", "600"]));
    let mut held = false;
    for _ in 0..100 {
        let (code, _, _) = run(redis(&["jobs", "--try", "--", "true"])).await;
        if code == 124 {
            held = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(held, "the holder never held");
    holder.interrupt().await;
    let (code, _, err) = run(redis(&["jobs", "--try", "--", "true"])).await;
    assert_eq!(code, 0, "released on SIGINT: {err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn lock_on_postgres_runs_the_command_with_a_token() {
    let server = coord_tests::postgres::PostgresServer::start().await;
    let eps = vec!["http://127.0.0.1:9".to_string()];
    let url = server.url();
    let args = [
        "lock",
        "--backend",
        "postgres",
        "--url",
        url.as_str(),
        "jobs",
    ];
    let mut first = args.to_vec();
    first.extend(["--", "sh", "-c", "echo fence=$COORD_FENCE"]);
    let (code, out, err) = run(ctl(&eps, &first)).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("fence=1"), "{out}");
    let (code, out, err) = run(ctl(&eps, &first)).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("fence=2"), "{out}");
}
