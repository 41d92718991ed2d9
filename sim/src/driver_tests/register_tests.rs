//! What `HostLiveness::register` writes: the metadata it was given, with
//! `started_at_unix_ns` filled in from the wall clock only when it was 0;
//! metadata up to `MAX_METADATA_LEN` (1 MiB) of JSON and not a byte more;
//! the key its handle names; what `stop` reports when etcd does not
//! confirm the revoke; what a handle dropped without `stop` leaves; and
//! the lease and TTL a session names, and what its close reports; what a
//! first registration that fails says (a session and a host alike); and
//! what a dropped session leaves.

use std::sync::{Arc, Mutex};

use crate::driver_tests::test_fakes::{block_on_within, lock, ChannelKeeper, NoWatch};
use coord::{
    Error, EtcdApi, EtcdError, Granted, HostLiveness, HostMetadata, KeepAliveReplies, LeaseId,
    LivenessOptions, LivenessStatus, Revision,
};
use coord_core::io::{Listing, RangeRequest, Txn, TxnOp, TxnOpResponse, TxnResponse};
use coord_core::ClusterId;
use tokio::sync::mpsc;

/// Grants leases, answers every keep-alive, and holds no key: every
/// transaction's compares fail (the registration's compare-and-put finds
/// no key), its failure branch runs, and the values it puts are recorded.
#[derive(Clone, Default)]
struct Recording {
    puts: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Revokes asked for.
    revokes: Arc<Mutex<u32>>,
    /// When set, every revoke fails (etcd unreachable).
    revokes_fail: bool,
    /// When set, every grant fails (etcd unreachable).
    grants_fail: bool,
}

struct Replies(mpsc::UnboundedReceiver<()>);

impl KeepAliveReplies for Replies {
    async fn next(&mut self) -> Option<Result<i64, EtcdError>> {
        self.0.recv().await.map(|()| Ok(10))
    }
}

impl EtcdApi for Recording {
    type Keeper = ChannelKeeper;
    type Replies = Replies;
    type WatchControl = NoWatch;
    type WatchEvents = NoWatch;

    async fn range(&self, _request: RangeRequest) -> Result<Listing, EtcdError> {
        Err(EtcdError::Unavailable("not in this test".into()))
    }
    async fn txn(&self, txn: Txn) -> Result<TxnResponse, EtcdError> {
        let mut responses = Vec::new();
        for op in txn.failure {
            if let TxnOp::Put { value, .. } = op {
                lock(&self.puts).push(value);
                responses.push(TxnOpResponse::Put);
            }
        }
        Ok(TxnResponse {
            succeeded: false,
            revision: Revision(2),
            responses,
            cluster: ClusterId(1),
        })
    }
    async fn watch(
        &self,
        _key: Vec<u8>,
        _prefix: bool,
        _start: Revision,
    ) -> Result<(NoWatch, NoWatch), EtcdError> {
        Err(EtcdError::Unavailable("not in this test".into()))
    }
    async fn lease_grant(&self, ttl_secs: i64) -> Result<Granted, EtcdError> {
        if self.grants_fail {
            return Err(EtcdError::Unavailable("etcd is away".into()));
        }
        Ok(Granted {
            lease: LeaseId(9),
            ttl_secs,
        })
    }
    async fn lease_revoke(&self, _lease: LeaseId) -> Result<(), EtcdError> {
        *lock(&self.revokes) += 1;
        if self.revokes_fail {
            return Err(EtcdError::Unavailable("unreachable".into()));
        }
        Ok(())
    }
    async fn lease_keep_alive(
        &self,
        _lease: LeaseId,
    ) -> Result<(ChannelKeeper, Replies), EtcdError> {
        let (tx, rx) = mpsc::unbounded_channel();
        // The open sends the first keep-alive.
        let _ = tx.send(());
        Ok((ChannelKeeper(tx), Replies(rx)))
    }
}

/// What registering host `h1` with `started_at_unix_ns` = `given` did.
struct Written {
    /// The `started_at_unix_ns` written.
    started_at: i64,
    /// The wall clock (ns since the epoch) just before and just after.
    clock: (i64, i64),
    /// What the handle's `key()` said.
    key: String,
}

fn wall_clock_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Registers host `h1` with the start time `given`, then stops it.
fn register_h1(given: i64) -> Written {
    let api = Recording::default();
    let puts = Arc::clone(&api.puts);
    let registered = block_on_within(2, async move {
        let meta = HostMetadata {
            started_at_unix_ns: given,
            ..HostMetadata::new("h1", "h1.example")
        };
        let before = wall_clock_ns();
        let Ok(host) = HostLiveness::register(api, meta, LivenessOptions::default()).await else {
            return None;
        };
        let after = wall_clock_ns();
        let key = host.key().to_string();
        let _ = host.stop().await;
        Some(((before, after), key))
    });
    let Some((clock, key)) = registered else {
        panic!("the registration failed");
    };
    let puts = lock(&puts).clone();
    let Some(first) = puts.first() else {
        panic!("nothing was written");
    };
    let written: HostMetadata = match serde_json::from_slice(first) {
        Ok(m) => m,
        Err(e) => panic!("the written metadata does not parse: {e}"),
    };
    assert_eq!(written.host_uuid, "h1");
    assert_eq!(written.hostname, "h1.example");
    Written {
        started_at: written.started_at_unix_ns,
        clock,
        key,
    }
}

#[test]
fn a_given_start_time_is_written_as_given_and_zero_is_filled_in_from_the_clock() {
    assert_eq!(register_h1(12_345).started_at, 12_345);
    let filled = register_h1(0);
    let (before, after) = filled.clock;
    assert!(before > 0, "the wall clock reads {before}");
    assert!(
        (before..=after).contains(&filled.started_at),
        "a start time of 0 was filled with {}, not the time of registering ({before}..={after})",
        filled.started_at
    );
}

#[test]
fn the_handle_names_its_key() {
    assert_eq!(register_h1(1).key, "/coord/hosts/h1");
}

/// Metadata whose JSON is exactly `len` bytes.
fn metadata_of_len(len: usize) -> HostMetadata {
    let mut meta = HostMetadata::new("h1", "h1.example");
    meta.started_at_unix_ns = 1;
    meta.extra
        .insert("pad".into(), serde_json::Value::String(String::new()));
    let base = serde_json::to_vec(&meta).map_or(0, |v| v.len());
    let pad = "x".repeat(len.saturating_sub(base));
    meta.extra
        .insert("pad".into(), serde_json::Value::String(pad));
    meta
}

/// What registering `meta` (then stopping) returns.
fn register(meta: HostMetadata, api: Recording) -> (Result<(), Error>, Result<(), Error>) {
    block_on_within(2, async move {
        let opts =
            LivenessOptions::default().with_request_timeout(std::time::Duration::from_millis(500));
        match HostLiveness::register(api, meta, opts).await {
            Ok(host) => (Ok(()), host.stop().await),
            Err(e) => (Err(e), Ok(())),
        }
    })
}

#[test]
fn metadata_up_to_the_limit_is_registered_and_a_byte_more_refused() {
    // The documented limit, 1 MiB (etcd refuses requests over 1.5 MiB),
    // not whatever the constant says.
    let max = 1024 * 1024;
    assert_eq!(coord::MAX_METADATA_LEN, max);
    let at_limit = metadata_of_len(max);
    assert_eq!(serde_json::to_vec(&at_limit).map_or(0, |v| v.len()), max);
    let (registered, _) = register(at_limit, Recording::default());
    assert!(registered.is_ok(), "{registered:?}");
    let over = metadata_of_len(max + 1);
    let api = Recording::default();
    let puts = Arc::clone(&api.puts);
    let (registered, _) = register(over, api);
    assert!(
        matches!(registered, Err(Error::MetadataTooLarge { size, max: m }) if size == max + 1 && m == max),
        "{registered:?}"
    );
    assert!(lock(&puts).is_empty(), "oversized metadata was written");
}

#[test]
fn stop_reports_a_revoke_etcd_did_not_confirm() {
    let api = Recording {
        revokes_fail: true,
        ..Recording::default()
    };
    let (registered, stopped) = register(metadata_of_len(200), api);
    assert!(registered.is_ok(), "{registered:?}");
    assert!(
        matches!(stopped, Err(Error::RevokeNotConfirmed { .. })),
        "{stopped:?}"
    );
}

#[test]
fn a_dropped_handle_says_abandoned_and_leaves_its_lease_to_expire() {
    let api = Recording::default();
    let revokes = Arc::clone(&api.revokes);
    let last = block_on_within(3, async move {
        let meta = HostMetadata::new("h1", "h1.example");
        let host = HostLiveness::register(api, meta, LivenessOptions::default())
            .await
            .ok()?;
        let mut state = host.state();
        drop(host);
        // The background task ends, and its side of the state with it.
        while state.changed().await.is_ok() {}
        let last = state.borrow().clone();
        Some(last)
    });
    assert_eq!(last, Some(LivenessStatus::Abandoned));
    assert_eq!(*lock(&revokes), 0, "a dropped handle revoked its lease");
}

/// What a session on `api` (TTL 7 s) saw while registered: its lease,
/// TTL, state and whether it said closed; then what `close` returned,
/// whether it then said closed, and its lease.
#[allow(clippy::type_complexity)]
fn session_life(
    api: Recording,
) -> (
    (Option<LeaseId>, std::time::Duration, LivenessStatus, bool),
    (Result<(), Error>, bool, Option<LeaseId>),
) {
    let seen = block_on_within(30, async move {
        let opts = coord::SessionOptions::default()
            .with_ttl(std::time::Duration::from_secs(7))
            .with_seed(4);
        let session = coord::Session::new(api, opts).await.ok()?;
        let state = session.state().borrow().clone();
        let live = (
            session.lease_id(),
            session.ttl(),
            state,
            session.is_closed(),
        );
        let closed = session.close().await;
        Some((live, (closed, session.is_closed(), session.lease_id())))
    });
    let Some(seen) = seen else {
        panic!("the session did not start")
    };
    seen
}

#[test]
fn a_session_names_its_lease_and_its_ttl() {
    let ((lease, ttl, state, was_closed), (closed, is_closed, lease_after)) =
        session_life(Recording::default());
    assert_eq!(state, LivenessStatus::Registered { lease: LeaseId(9) });
    assert_eq!(lease, Some(LeaseId(9)), "lease_id() while registered");
    assert_eq!(ttl, std::time::Duration::from_secs(7));
    assert!(!was_closed);
    assert!(closed.is_ok(), "{closed:?}");
    assert!(is_closed);
    assert_eq!(lease_after, None, "lease_id() once closed");
}

#[test]
fn a_session_close_reports_a_revoke_etcd_did_not_confirm() {
    let api = Recording {
        revokes_fail: true,
        ..Recording::default()
    };
    let (_, (closed, is_closed, _)) = session_life(api);
    assert!(
        matches!(closed, Err(Error::RevokeNotConfirmed { lease: LeaseId(9) })),
        "{closed:?}"
    );
    assert!(is_closed);
}

#[test]
fn a_first_registration_that_fails_says_why() {
    let api = Recording {
        grants_fail: true,
        ..Recording::default()
    };
    let (session, host) = block_on_within(5, async move {
        let session = coord::Session::new(api.clone(), coord::SessionOptions::default())
            .await
            .err();
        let meta = HostMetadata::new("h1", "h1.example");
        let host = HostLiveness::register(api, meta, LivenessOptions::default())
            .await
            .err();
        (session, host)
    });
    for (what, e) in [("session", session), ("host", host)] {
        assert!(
            matches!(&e, Some(Error::Unreachable(m)) if m.text() == "etcd is away"),
            "{what}: {e:?}"
        );
    }
}

#[test]
fn a_dropped_session_says_abandoned_and_leaves_its_lease_to_expire() {
    let api = Recording::default();
    let revokes = Arc::clone(&api.revokes);
    let last = block_on_within(6, async move {
        let session = coord::Session::new(api, coord::SessionOptions::default())
            .await
            .ok()?;
        let mut state = session.state();
        drop(session);
        while state.changed().await.is_ok() {}
        let last = state.borrow().clone();
        Some(last)
    });
    assert_eq!(last, Some(LivenessStatus::Abandoned));
    assert_eq!(*lock(&revokes), 0, "a dropped session revoked its lease");
}
