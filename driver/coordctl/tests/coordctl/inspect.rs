//! What an operator looks at first: `status`, `queue`, and filtered
//! `hosts`, against real etcd with `etcdctl` as the peer.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn status_shows_every_member_and_the_leader_and_names_a_dead_endpoint() {
    let mut etcd = EtcdCluster::three().await;
    let eps = etcd.endpoints();
    let (code, out, err) = run(ctl(&eps, &["-w", "json", "status"])).await;
    assert_eq!(code, 0, "{err}");
    let rows = json_lines(&out);
    let endpoints: Vec<&Value> = rows.iter().filter(|r| r["event"] == "endpoint").collect();
    assert_eq!(endpoints.len(), 3, "{out}");
    assert!(endpoints.iter().all(|r| r["health"] == "ok"), "{out}");
    assert_eq!(
        endpoints.iter().filter(|r| r["leader"] == true).count(),
        1,
        "one leader: {out}"
    );
    let members: Vec<&Value> = rows.iter().filter(|r| r["event"] == "member").collect();
    assert_eq!(members.len(), 3, "{out}");
    // Every endpoint's member id is a listed member.
    for e in &endpoints {
        assert!(members.iter().any(|m| m["member"] == e["member"]), "{out}");
    }
    let hosts = rows
        .iter()
        .find(|r| r["event"] == "hosts")
        .expect("hosts row");
    assert_eq!(hosts["keys"], 0, "{out}");
    // One member down: it is named, the others still shown, exit 2.
    etcd.kill(2);
    let (code, out, err) = run(ctl(&eps, &["--dial-timeout", "1s", "-w", "json", "status"])).await;
    assert_eq!(code, 2, "{out}\n{err}");
    let rows = json_lines(&out);
    let health: Vec<(String, String)> = rows
        .iter()
        .filter(|r| r["event"] == "endpoint")
        .map(|r| {
            (
                r["endpoint"].as_str().unwrap().to_string(),
                r["health"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(health.len(), 3, "{out}");
    assert_eq!(health[2].1, "unreachable", "{out}");
    assert!(health[..2].iter().all(|(_, h)| h == "ok"), "{out}");
    assert!(err.contains(&eps[2]), "names the dead endpoint: {err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn queue_lists_the_holder_then_the_waiters_of_an_etcdctl_election() {
    let etcd = EtcdCluster::single().await;
    let eps = etcd.endpoints();
    let mut first = Peer::elect(&eps, "jobs", "etcdctl-first");
    first.line(DEADLINE).await;
    let mut second = Peer::spawn(ctl(
        &eps,
        &[
            "-w",
            "json",
            "campaign",
            "jobs",
            "coordctl-second",
            "--ttl",
            "30",
        ],
    ));
    next_event(&mut second, "campaigning").await;
    // The waiter's key is written once campaigning is printed; read until
    // both are queued.
    let start = Instant::now();
    let rows = loop {
        let (code, out, err) = run(ctl(&eps, &["-w", "json", "queue", "jobs"])).await;
        assert_eq!(code, 0, "{err}");
        let rows = json_lines(&out);
        if rows.len() == 2 {
            break rows;
        }
        assert!(start.elapsed() < DEADLINE, "never two queued: {out}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(rows[0]["role"], "holder");
    assert_eq!(rows[0]["value"], "etcdctl-first");
    assert_eq!(rows[1]["role"], "waiter");
    assert_eq!(rows[1]["value"], "coordctl-second");
    assert!(rows[0]["create_revision"].as_i64() < rows[1]["create_revision"].as_i64());
    let ttl = rows[1]["ttl"].as_i64().unwrap();
    assert!((1..=30).contains(&ttl), "ttl left {ttl}");
    assert!(rows[1]["key"].as_str().unwrap().starts_with("jobs/"));
    // The table: a header, then the holder first.
    let (code, table, err) = run(ctl(&eps, &["queue", "jobs"])).await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("POSITION"), "{table}");
    assert!(
        lines[1].contains("holder") && lines[1].contains("etcdctl-first"),
        "{table}"
    );
    // An empty queue is no error; a bad name is bad usage.
    let (code, out, err) = run(ctl(&eps, &["-w", "json", "queue", "nobody"])).await;
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    let (code, _, err) = run(ctl(&eps, &["queue", "bad/"])).await;
    assert_eq!(code, 1, "{err}");
    second.interrupt().await;
    first.interrupt().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn hosts_filters_by_id_hostname_and_version() {
    let etcd = EtcdCluster::single().await;
    let eps = etcd.endpoints();
    let mut peers = Vec::new();
    for (id, hostname, version) in [
        ("h1", "db-1", "1.4.2"),
        ("h2", "db-2", "2.0.0"),
        ("w1", "web-1", "1.4.3"),
    ] {
        let mut p = Peer::spawn(ctl(
            &eps,
            &[
                "-w",
                "json",
                "register",
                "--id",
                id,
                "--hostname",
                hostname,
                "--version",
                version,
            ],
        ));
        next_event(&mut p, "registered").await;
        peers.push(p);
    }
    let ids = |out: &str| -> Vec<String> {
        let mut ids: Vec<String> = json_lines(out)
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    for (filter, want) in [
        (vec!["--hostname", "db-*"], vec!["h1", "h2"]),
        (vec!["--version", "1.4.?"], vec!["h1", "w1"]),
        (vec!["--id", "h*", "--version", "1.*"], vec!["h1"]),
        (vec!["--id", "nobody"], vec![]),
    ] {
        let mut args = vec!["-w", "json", "hosts"];
        args.extend(filter.iter().copied());
        let (code, out, err) = run(ctl(&eps, &args)).await;
        assert_eq!(code, 0, "{err}");
        assert_eq!(ids(&out), want, "{filter:?}: {out}");
    }
    // Watching with a filter: only matching hosts' changes.
    let mut watch = Peer::spawn(ctl(
        &eps,
        &["-w", "json", "hosts", "--watch", "--hostname", "web-*"],
    ));
    // The list first (web-1 alone), so that its changes follow.
    let listed = next_event(&mut watch, "host").await;
    assert_eq!(listed["id"], "w1", "{listed}");
    for mut p in peers.drain(..) {
        p.interrupt().await;
    }
    let down = next_event(&mut watch, "down").await;
    assert_eq!(
        down["id"], "w1",
        "the first down printed is web-1's: {down}"
    );
    watch.interrupt().await;
}
