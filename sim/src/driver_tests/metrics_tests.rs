//! What the driver records through the `metrics` facade, seen by a
//! debugging recorder local to the test: how long a session's lease
//! provably lives.

use std::time::Duration;

use coord::{Session, SessionOptions};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

use crate::driver_tests::test_fakes::{run_beside_etcd, sim_client};

#[test]
fn a_sessions_lease_remaining_is_recorded_and_within_its_ttl() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let outcome = metrics::with_local_recorder(&recorder, || {
        run_beside_etcd(8, |etcd_addr, start| async move {
            let api = sim_client(etcd_addr, 1, start).await?;
            let opts = SessionOptions::default()
                .with_ttl(Duration::from_secs(9))
                .with_seed(8);
            let session = Session::new(api, opts).await.map_err(|e| e.to_string())?;
            // A few keep-alives later.
            madsim::time::sleep(Duration::from_secs(10)).await;
            Ok(session.lease_id())
        })
    });
    if let Err(e) = outcome {
        panic!("the run failed: {e}");
    }
    let remaining: Vec<f64> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| {
            let k = key.key();
            k.name() == coord::telemetry::LEASE_REMAINING
                && k.labels()
                    .any(|l| l.key() == "handle" && l.value() == "session")
        })
        .filter_map(|(.., value)| match value {
            DebugValue::Gauge(g) => Some(g.into_inner()),
            _ => None,
        })
        .collect();
    let [seconds] = remaining[..] else {
        panic!("no lease-remaining gauge for the session: {remaining:?}")
    };
    assert!(
        seconds > 0.0 && seconds <= 9.0,
        "the lease provably lives {seconds} s more, TTL 9 s"
    );
}
