//! `Intercepted` against the simulated etcd: what an interceptor does not
//! override passes through unchanged, what it overrides is what the caller
//! sees, and its streams are numbered in the order they were opened, across
//! kinds and across the probe copy.

use std::sync::{Arc, Mutex};

use coord::etcd::{EtcdApi, Intercept, Intercepted, KeepAliveStream, WatchStream};
use coord::{EtcdError, KeepAliveReplies, Revision, WatchEvents, WatchMessage};
use coord_core::io::MessageKind;

use crate::driver_tests::test_fakes::{lock, put_hosts, run_beside_etcd, sim_client};

/// What the interceptor saw, in order.
type Seen = Arc<Mutex<Vec<String>>>;

/// Records the streams it is lent and doubles every keep-alive TTL.
#[derive(Clone, Default)]
struct Doubling {
    seen: Seen,
}

impl Intercept for Doubling {
    async fn keep_alive_next<R: KeepAliveReplies>(
        &self,
        stream: &KeepAliveStream,
        replies: &mut R,
    ) -> Option<Result<i64, EtcdError>> {
        lock(&self.seen).push(format!("keep-alive {} of {}", stream.id, stream.lease.0));
        let reply = replies.next().await?;
        Some(reply.map(|ttl| ttl * 2))
    }

    async fn watch_next<E: WatchEvents>(
        &self,
        stream: &WatchStream,
        events: &mut E,
    ) -> Option<Result<WatchMessage, EtcdError>> {
        lock(&self.seen).push(format!(
            "watch {} of {} from {}",
            stream.id,
            String::from_utf8_lossy(&stream.key),
            stream.start_revision.0
        ));
        events.next().await
    }
}

#[test]
fn an_interceptor_changes_what_it_overrides_and_passes_the_rest_through() {
    let outcome = run_beside_etcd(3, |etcd_addr, start| async move {
        let fail = |e: EtcdError| e.to_string();
        let doubling = Doubling::default();
        let seen = Arc::clone(&doubling.seen);
        let api = Intercepted::new(sim_client(etcd_addr, 1, start).await?, doubling);
        // Passed through: the grant's TTL and a transaction's revision.
        let granted = api.lease_grant(7).await.map_err(fail)?;
        let written = put_hosts(&api, ["h1".to_string()]).await?;
        // Overridden: the keep-alive's reply, on stream 0.
        let (_keeper, mut replies) = api.lease_keep_alive(granted.lease).await.map_err(fail)?;
        let ttl = replies.next().await;
        // Stream 1 is opened on the probe copy: numbers are shared.
        let probe = api.for_probe();
        let (_control, mut events) = probe
            .watch(b"/coord/hosts/".to_vec(), true, Revision(1))
            .await
            .map_err(fail)?;
        let created = events.next().await;
        let seen = lock(&seen).clone();
        Ok((granted, written, ttl, created, seen))
    });
    let (granted, written, ttl, created, seen) = match outcome {
        Ok(o) => o,
        Err(e) => panic!("the run failed: {e}"),
    };
    assert_eq!(granted.ttl_secs, 7, "the grant passed through");
    assert!(written.0 > 1, "the transaction passed through: {written:?}");
    assert_eq!(ttl, Some(Ok(14)), "the reply doubled");
    assert!(
        matches!(&created, Some(Ok(m)) if m.kind == MessageKind::Created),
        "the watch's first message passed through: {created:?}"
    );
    assert_eq!(
        seen,
        [
            format!("keep-alive 0 of {}", granted.lease.0),
            "watch 1 of /coord/hosts/ from 1".to_string(),
        ]
    );
}
