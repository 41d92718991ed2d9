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
        // Passed through: a revoke ends the lease, so a second finds none.
        let doomed = api.lease_grant(5).await.map_err(fail)?;
        let revoked = api.lease_revoke(doomed.lease).await.map_err(fail);
        let again = api.lease_revoke(doomed.lease).await.map_err(fail);
        let seen = lock(&seen).clone();
        Ok((granted, written, ttl, created, (revoked, again), seen))
    });
    let (granted, written, ttl, created, (revoked, again), seen) = match outcome {
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
    assert_eq!(revoked, Ok(()), "the revoke passed through");
    assert!(again.is_err(), "the lease outlived its revoke: {again:?}");
    assert_eq!(
        seen,
        [
            format!("keep-alive 0 of {}", granted.lease.0),
            "watch 1 of /coord/hosts/ from 1".to_string(),
        ]
    );
}

/// An `etcd grpc-proxy`'s pace: a stream's opening keep-alive is answered
/// at once, and each later one only with the proxy's next renewal of the
/// lease, here 0.2 s to 2.5 s after its send (a third of a 6 s TTL, plus
/// the proxy's 500 ms loop), in turn.
#[derive(Clone, Default)]
struct ProxyPaced {
    /// Per stream, the send times of keep-alives not yet answered.
    sent: Arc<
        Mutex<std::collections::BTreeMap<u64, std::collections::VecDeque<madsim::time::Instant>>>,
    >,
    /// Every later reply's lag behind its send.
    lags: Arc<Mutex<Vec<std::time::Duration>>>,
}

impl Intercept for ProxyPaced {
    async fn keep_alive_send<K: coord::KeepAliveSender>(
        &self,
        stream: &KeepAliveStream,
        keeper: &mut K,
    ) -> Result<(), EtcdError> {
        lock(&self.sent)
            .entry(stream.id)
            .or_default()
            .push_back(madsim::time::Instant::now());
        keeper.send().await
    }

    async fn keep_alive_next<R: KeepAliveReplies>(
        &self,
        stream: &KeepAliveStream,
        replies: &mut R,
    ) -> Option<Result<i64, EtcdError>> {
        const LAGS_MS: [u64; 4] = [200, 1_800, 2_500, 1_200];
        let reply = replies.next().await?;
        let sent = lock(&self.sent)
            .get_mut(&stream.id)
            .and_then(|q| q.pop_front());
        if let Some(sent) = sent {
            let turn = lock(&self.lags).len() % LAGS_MS.len();
            madsim::time::sleep_until(sent + std::time::Duration::from_millis(LAGS_MS[turn])).await;
            lock(&self.lags).push(madsim::time::Instant::now() - sent);
        }
        Some(reply)
    }
}

/// Behind a proxy's pace, with a 1 s request timeout, a host keeps its
/// stream and its lease: replies up to 2.5 s late are replies (the wait is
/// a third of the TTL plus 1 s), not silence.
#[test]
fn keep_alives_answered_at_a_proxys_pace_keep_the_stream() {
    use coord::{HostLiveness, HostMetadata, LivenessEvent, LivenessOptions};
    let outcome = run_beside_etcd(5, |etcd_addr, start| async move {
        let paced = ProxyPaced::default();
        let lags = Arc::clone(&paced.lags);
        let api = Intercepted::new(sim_client(etcd_addr, 1, start).await?, paced);
        let opts = LivenessOptions::default()
            .with_ttl(std::time::Duration::from_secs(6))
            .with_request_timeout(std::time::Duration::from_secs(1))
            .with_seed(5);
        let host = HostLiveness::register(api, HostMetadata::new("h1", "node-1"), opts)
            .await
            .map_err(|e| e.to_string())?;
        let lease = host.lease_id();
        let mut events = host.subscribe();
        madsim::time::sleep(std::time::Duration::from_secs(30)).await;
        let mut seen = Vec::new();
        while let Ok(e) = events.try_recv() {
            seen.push(e);
        }
        let still = host.lease_id();
        host.stop().await.map_err(|e| e.to_string())?;
        let lags = lock(&lags).clone();
        Ok((lease, still, seen, lags))
    });
    let (lease, still, seen, lags) = match outcome {
        Ok(o) => o,
        Err(e) => panic!("the run failed: {e}"),
    };
    let late = lags
        .iter()
        .filter(|l| **l > std::time::Duration::from_secs(1))
        .count();
    assert!(
        late >= 8,
        "replies later than the request timeout: {lags:?}"
    );
    assert!(
        !seen.iter().any(|e| matches!(
            e,
            LivenessEvent::KeepAliveInterrupted { .. } | LivenessEvent::Lost { .. }
        )),
        "{seen:?}"
    );
    assert!(lease.is_some());
    assert_eq!(still, lease, "the first lease throughout");
}
