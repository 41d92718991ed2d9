//! The benchmarks' smoke: `coord-bench all --quick` against a real etcd
//! produces every table, CSV and plot. It asserts only that each benchmark
//! measured both subjects: benchmarks are never timed tests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn every_benchmark_produces_its_table_csv_and_plot() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_coord-bench"))
        .args(["all", "--quick", "--seed", "42", "--out"])
        .arg(out.path())
        .output()
        .expect("run coord-bench");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "coord-bench failed ({:?}):\n{stdout}\n{stderr}",
        run.status
    );
    for (id, title) in [
        ("detection-ttl3", "Crash detection, TTL 3 s"),
        ("stop", "Graceful stop"),
        ("failover", "Election failover"),
        ("handover", "Election handover"),
        ("watcher-cpu", "Watcher CPU per event"),
        ("watcher-rate", "Watcher throughput"),
        ("pool-keepalives", "lease renewals per minute"),
        ("pool-leases", "leases held at etcd"),
        ("heal-restart-3s", "Heal: etcd killed and restarted for 3 s"),
        ("heal-sigstop-3s", "Heal: etcd SIGSTOPped for 3 s"),
        ("heal-blackhole-3s", "Heal: etcd blackholed for 3 s"),
        (
            "heal-grpc-proxy-3s",
            "Heal: etcd behind a grpc-proxy killed and restarted for 3 s",
        ),
        (
            "herd-lease",
            "Herd: lease grants and keep-alive stream opens together per 100 ms",
        ),
        ("herd-grants", "Herd: lease grants per 100 ms"),
        (
            "herd-keepalive-opens",
            "Herd: keep-alive stream opens per 100 ms",
        ),
        ("herd-calls", "Herd: gRPC calls of every kind per 100 ms"),
    ] {
        let table = stdout
            .split("\n\n")
            .find(|t| t.contains(title))
            .unwrap_or_else(|| panic!("no table for {title}:\n{stdout}"));
        // A heal's baseline may measure 0 (healed before etcd's return was
        // seen, on a loaded machine): then no ratio, said so.
        assert!(
            table.contains("ratio of medians (coord / ")
                || (id.starts_with("herd-") && table.contains("ratio of maxima (coord / "))
                || (id.starts_with("heal-") && table.contains("n/a (the baseline's is 0)")),
            "{title}: no ratio:\n{table}"
        );
        let csv = std::fs::read_to_string(out.path().join(format!("{id}.csv"))).unwrap();
        let rows: Vec<&str> = csv.lines().skip(1).collect();
        // The subject is quoted when it holds a comma.
        let coord = |r: &&str| r.trim_start_matches('"').starts_with("coord");
        assert!(
            rows.iter().any(coord) && !rows.iter().all(coord),
            "{id}.csv lacks a subject:\n{csv}"
        );
        for row in &rows {
            let value = row.rsplit(',').next().unwrap();
            assert!(
                value.parse::<f64>().is_ok_and(f64::is_finite),
                "{id}.csv: {row}"
            );
        }
        let svg = std::fs::read_to_string(out.path().join(format!("{id}.svg"))).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("<polyline"),
            "{id}.svg"
        );
    }
}

#[test]
fn bad_arguments_are_refused_with_usage() {
    for args in [
        &["nonsense"][..],
        &["all", "--trials", "0"],
        &["stop", "--seed"],
        &["heal", "--heal-only", "restart"],
        &["heal", "--heal-only", "unplugged:5"],
        &["heal", "--heal-settle", "soon"],
        &[],
    ] {
        let run = Command::new(env!("CARGO_BIN_EXE_coord-bench"))
            .args(args)
            .output()
            .expect("run coord-bench");
        assert_eq!(run.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&run.stderr).contains("usage: coord-bench"),
            "{args:?}"
        );
    }
}
