//! `EtcdApi` on the real `etcd-client` (not built under the simulator):
//! error classification and the stream types.

use coord_core::io::{
    Compare, CompareOp, CompareTarget, Consistency, Get, Listing, MessageKind, RangeRequest, Sort,
    Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use coord_core::kv::{KeyValue, WatchEvent};
use coord_core::{ClusterId, Key, LeaseId, Revision};
use etcd_client::{Client, EventType, GetOptions, PutOptions, SortOrder, SortTarget, WatchOptions};
use tonic::Code;

use crate::cause::Cause;
use crate::error::Error;
use crate::etcd::{
    EtcdApi, EtcdError, Granted, KeepAliveReplies, KeepAliveSender, WatchControl, WatchEvents,
    WatchMessage,
};

/// Classifies an `etcd-client` error. Connection failures and
/// `Unavailable` (including "no leader") are fast, definite failures, and a
/// refused connection (nothing listens) is told apart as `Refused`;
/// transport breaks mid-request and deadlines leave the outcome unknown,
/// and a connection reset, broken or canceled unsent is told apart among
/// them as `Reset` (which the prober paces as a refusal).
pub fn classify(e: etcd_client::Error) -> EtcdError {
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            let msg = status.message().to_string();
            match (status.code(), connection_fate(&status)) {
                (Code::Unavailable, Some(Fate::Refused)) => return EtcdError::Refused(msg),
                (Code::Unavailable | Code::Unknown | Code::Cancelled, Some(Fate::Reset)) => {
                    return EtcdError::Reset(format!("{:?}: {msg}", status.code()))
                }
                _ => {}
            }
            match status.code() {
                // tonic's decode limit ("decoded message length too large")
                // or etcd's send limit ("larger than max").
                Code::OutOfRange | Code::ResourceExhausted
                    if msg.contains("too large") || msg.contains("larger than max") =>
                {
                    EtcdError::TooLarge(msg)
                }
                Code::Unavailable => EtcdError::Unavailable(msg),
                _ if msg.contains("lease not found") => EtcdError::LeaseNotFound,
                Code::OutOfRange if msg.contains("compacted") => EtcdError::Compacted {
                    compact_revision: 0,
                },
                Code::OutOfRange if msg.contains("future revision") => EtcdError::FutureRevision,
                Code::ResourceExhausted => EtcdError::Overloaded(msg),
                Code::DeadlineExceeded
                | Code::Cancelled
                | Code::Unknown
                | Code::Internal
                | Code::Aborted => EtcdError::Indeterminate(format!("{:?}: {msg}", status.code())),
                code => EtcdError::Other(format!("{code:?}: {msg}")),
            }
        }
        etcd_client::Error::TransportError(t) if connection_fate(&t) == Some(Fate::Refused) => {
            EtcdError::Refused(t.to_string())
        }
        etcd_client::Error::TransportError(t) => EtcdError::Unavailable(t.to_string()),
        etcd_client::Error::LeaseKeepAliveError(m) if m.contains("lease not found") => {
            EtcdError::LeaseNotFound
        }
        etcd_client::Error::LeaseKeepAliveError(m) | etcd_client::Error::WatchError(m) => {
            EtcdError::Indeterminate(m)
        }
        etcd_client::Error::IoError(io) => EtcdError::Indeterminate(io.to_string()),
        other => EtcdError::Other(other.to_string()),
    }
}

/// What became of a request's connection, where its error says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Nothing listens at the address (connection refused).
    Refused,
    /// Reset, aborted or closed under the request: by the server, or at
    /// once by a proxy in front of it that could not reach it.
    Reset,
}

/// The connection's fate named by an `io::Error` down `error`'s chain of
/// sources (refused; reset, aborted or a broken pipe), by hyper (a request
/// canceled because its connection closed before it was sent), or (where
/// a layer kept only the text) by "connection refused" in a message.
fn connection_fate(error: &(dyn std::error::Error + 'static)) -> Option<Fate> {
    use std::io::ErrorKind;
    let mut next = Some(error);
    while let Some(e) = next {
        if e.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
        {
            return Some(Fate::Reset);
        }
        match e.downcast_ref::<std::io::Error>().map(std::io::Error::kind) {
            Some(ErrorKind::ConnectionRefused) => return Some(Fate::Refused),
            Some(
                ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe,
            ) => return Some(Fate::Reset),
            _ if e
                .to_string()
                .to_ascii_lowercase()
                .contains("connection refused") =>
            {
                return Some(Fate::Refused)
            }
            _ => next = e.source(),
        }
    }
    None
}

/// The keep-alive sender of a real stream.
pub struct Keeper(etcd_client::LeaseKeeper);

/// The keep-alive replies of a real stream: the opening keep-alive's TTL
/// first (see `lease_keep_alive`), then the stream's.
pub struct Replies {
    first: Option<i64>,
    stream: etcd_client::LeaseKeepAliveStream,
}

impl KeepAliveSender for Keeper {
    async fn send(&mut self) -> Result<(), EtcdError> {
        self.0.keep_alive().await.map_err(classify)
    }
}

impl KeepAliveReplies for Replies {
    async fn next(&mut self) -> Option<Result<i64, EtcdError>> {
        if let Some(ttl) = self.first.take() {
            return Some(Ok(ttl));
        }
        match self.stream.message().await {
            Ok(Some(reply)) => Some(Ok(reply.ttl())),
            Ok(None) => None,
            Err(e) => Some(Err(classify(e))),
        }
    }
}

/// The request half of a real watch stream.
pub struct Watching(etcd_client::WatchRequestSender);

/// The response half of a real watch stream.
pub struct WatchResponses(etcd_client::WatchResponseStream);

impl WatchControl for Watching {
    async fn request_progress(&mut self) -> Result<(), EtcdError> {
        self.0.request_progress().await.map_err(classify)
    }

    async fn cancel(&mut self) {
        // Dropping the request half closes the gRPC stream, which ends the
        // watch in etcd; nothing to send.
    }
}

fn key_value(kv: &etcd_client::KeyValue) -> KeyValue {
    KeyValue {
        key: Key(kv.key().to_vec()),
        value: kv.value().to_vec(),
        create_revision: Revision(kv.create_revision()),
        mod_revision: Revision(kv.mod_revision()),
        lease: LeaseId(kv.lease()),
    }
}

fn header_revision(h: Option<&etcd_client::ResponseHeader>) -> Revision {
    Revision(h.map_or(0, etcd_client::ResponseHeader::revision))
}

fn header_cluster(h: Option<&etcd_client::ResponseHeader>) -> ClusterId {
    ClusterId(h.map_or(0, etcd_client::ResponseHeader::cluster_id))
}

/// The largest response accepted: what etcd can send (its gRPC send limit
/// defaults to `math.MaxInt32`). tonic's own default, 4 MiB, is below a
/// prefix of a few large host records.
pub const MAX_RESPONSE_BYTES: usize = 0x7fff_ffff;

/// The first key after every key starting with `prefix` (etcd's range end
/// for a prefix); `[0]` (every key from the start) when there is none.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl WatchEvents for WatchResponses {
    async fn next(&mut self) -> Option<Result<WatchMessage, EtcdError>> {
        let resp = match self.0.message().await {
            Ok(Some(resp)) => resp,
            Ok(None) => return None,
            Err(e) => return Some(Err(classify(e))),
        };
        let revision = header_revision(resp.header());
        let cluster = header_cluster(resp.header());
        if resp.canceled() {
            // etcd 3.4 cancels a watch from a compacted revision with an
            // empty reason and the compaction revision set.
            return Some(Err(if resp.compact_revision() > 0 {
                EtcdError::Compacted {
                    compact_revision: resp.compact_revision(),
                }
            } else {
                EtcdError::Indeterminate(format!("watch canceled: {}", resp.cancel_reason()))
            }));
        }
        if resp.created() {
            return Some(Ok(WatchMessage {
                kind: MessageKind::Created,
                events: Vec::new(),
                revision,
                cluster,
            }));
        }
        let mut events = Vec::with_capacity(resp.events().len());
        for e in resp.events() {
            let Some(kv) = e.kv() else { continue };
            events.push(match e.event_type() {
                // A put's previous kv is not read by any machine (each
                // keeps its own view): not copied.
                EventType::Put => WatchEvent::Put {
                    kv: key_value(kv),
                    prev: None,
                },
                EventType::Delete => WatchEvent::Delete {
                    key: Key(kv.key().to_vec()),
                    revision: Revision(kv.mod_revision()),
                    prev: e.prev_kv().map(key_value),
                },
            });
        }
        let kind = if events.is_empty() {
            MessageKind::Progress
        } else {
            MessageKind::Events
        };
        Some(Ok(WatchMessage {
            kind,
            events,
            revision,
            cluster,
        }))
    }
}

fn get_options(get: &Get) -> GetOptions {
    let mut opts = GetOptions::new();
    if get.prefix {
        opts = opts.with_prefix();
    }
    with_order_and_limit(opts, get)
}

fn with_order_and_limit(mut opts: GetOptions, get: &Get) -> GetOptions {
    opts = match get.sort {
        Sort::Key => opts,
        Sort::CreateAscending => opts.with_sort(SortTarget::Create, SortOrder::Ascend),
        Sort::CreateDescending => opts.with_sort(SortTarget::Create, SortOrder::Descend),
    };
    if get.limit > 0 {
        opts = opts.with_limit(i64::from(get.limit));
    }
    opts
}

fn compare(c: Compare) -> etcd_client::Compare {
    use etcd_client::CompareOp as Op;
    let op = match c.op {
        CompareOp::Equal => Op::Equal,
        CompareOp::NotEqual => Op::NotEqual,
        CompareOp::Less => Op::Less,
        CompareOp::Greater => Op::Greater,
    };
    let key = c.key.0;
    let cmp = match c.target {
        CompareTarget::CreateRevision(r) => etcd_client::Compare::create_revision(key, op, r.0),
        CompareTarget::ModRevision(r) => etcd_client::Compare::mod_revision(key, op, r.0),
        CompareTarget::Version(v) => etcd_client::Compare::version(key, op, v),
        CompareTarget::Value(v) => etcd_client::Compare::value(key, op, v),
        CompareTarget::Lease(l) => etcd_client::Compare::lease(key, op, l.0),
    };
    if c.prefix {
        cmp.with_prefix()
    } else {
        cmp
    }
}

fn txn_op(op: TxnOp) -> etcd_client::TxnOp {
    match op {
        TxnOp::Put { key, value, lease } => {
            let opts = (lease.0 != 0).then(|| PutOptions::new().with_lease(lease.0));
            etcd_client::TxnOp::put(key.0, value, opts)
        }
        TxnOp::Delete { key } => etcd_client::TxnOp::delete(key.0, None),
        TxnOp::Get(get) => {
            let opts = get_options(&get);
            etcd_client::TxnOp::get(get.key.0, Some(opts))
        }
        TxnOp::Txn(txn) => etcd_client::TxnOp::txn(etcd_txn(*txn)),
    }
}

fn etcd_txn(txn: Txn) -> etcd_client::Txn {
    etcd_client::Txn::new()
        .when(txn.compares.into_iter().map(compare).collect::<Vec<_>>())
        .and_then(txn.success.into_iter().map(txn_op).collect::<Vec<_>>())
        .or_else(txn.failure.into_iter().map(txn_op).collect::<Vec<_>>())
}

/// A range request's key and options: a later page starts after the last
/// key read, still within the prefix, at the pinned revision.
fn range_options(request: &RangeRequest) -> (Vec<u8>, GetOptions) {
    let get = &request.get;
    let (key, mut opts) = match (&request.after, get.prefix) {
        (Some(after), true) => {
            let mut start = after.0.clone();
            start.push(0);
            let opts = GetOptions::new().with_range(prefix_end(&get.key.0));
            (start, with_order_and_limit(opts, get))
        }
        _ => (get.key.0.clone(), get_options(get)),
    };
    if request.revision.0 > 0 {
        opts = opts.with_revision(request.revision.0);
    }
    if request.consistency == Consistency::Serializable {
        opts = opts.with_serializable();
    }
    (key, opts)
}

/// A transaction's response; nested responses carry the outer revision.
fn txn_response(
    resp: &etcd_client::TxnResponse,
    revision: Revision,
    cluster: ClusterId,
) -> TxnResponse {
    let responses = resp
        .op_responses()
        .iter()
        .map(|r| match r {
            etcd_client::TxnOpResponse::Put(_) => TxnOpResponse::Put,
            etcd_client::TxnOpResponse::Delete(d) => TxnOpResponse::Delete {
                deleted: d.deleted(),
            },
            etcd_client::TxnOpResponse::Get(g) => {
                TxnOpResponse::Get(g.kvs().iter().map(key_value).collect())
            }
            etcd_client::TxnOpResponse::Txn(t) => {
                TxnOpResponse::Txn(txn_response(t, revision, cluster))
            }
        })
        .collect();
    TxnResponse {
        succeeded: resp.succeeded(),
        revision,
        responses,
        cluster,
    }
}

impl EtcdApi for Client {
    type Keeper = Keeper;
    type Replies = Replies;
    type WatchControl = Watching;
    type WatchEvents = WatchResponses;

    async fn range(&self, request: RangeRequest) -> Result<Listing, EtcdError> {
        let (key, opts) = range_options(&request);
        let resp = self
            .kv_client()
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
            .get(key, Some(opts))
            .await
            .map_err(classify)?;
        Ok(Listing {
            kvs: resp.kvs().iter().map(key_value).collect(),
            revision: header_revision(resp.header()),
            more: resp.more(),
            count: u64::try_from(resp.count()).unwrap_or(0),
            cluster: header_cluster(resp.header()),
        })
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, EtcdError> {
        let resp = self
            .kv_client()
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
            .txn(etcd_txn(txn))
            .await
            .map_err(classify)?;
        Ok(txn_response(
            &resp,
            header_revision(resp.header()),
            header_cluster(resp.header()),
        ))
    }

    async fn watch(
        &self,
        key: Vec<u8>,
        prefix: bool,
        start_revision: Revision,
    ) -> Result<(Watching, WatchResponses), EtcdError> {
        let mut opts = WatchOptions::new()
            .with_start_revision(start_revision.0)
            .with_progress_notify();
        if prefix {
            opts = opts.with_prefix();
        }
        let stream = self
            .watch_client()
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
            .watch(key, Some(opts))
            .await
            .map_err(classify)?;
        let (requests, responses) = stream.split();
        Ok((Watching(requests), WatchResponses(responses)))
    }

    async fn lease_grant(&self, ttl_secs: i64) -> Result<Granted, EtcdError> {
        let reply = Client::lease_grant(&mut self.clone(), ttl_secs, None)
            .await
            .map_err(classify)?;
        Ok(Granted {
            lease: LeaseId(reply.id()),
            ttl_secs: reply.ttl(),
        })
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), EtcdError> {
        Client::lease_revoke(&mut self.clone(), lease.0)
            .await
            .map(|_| ())
            .map_err(classify)
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<(Keeper, Replies), EtcdError> {
        // etcd-client sends one keep-alive and consumes its reply itself
        // (failing with "lease not found" on TTL 0) without handing us the
        // TTL, which a keep-alive resets to the lease's granted TTL: asked
        // for here, it is the first reply yielded. A second keep-alive
        // would do, but not behind `etcd grpc-proxy`, which answers a
        // lease's keep-alives only as often as it renews the lease itself
        // (a third of the TTL): the second reply would come that late.
        let mut client = self.clone();
        let (mut keeper, replies) = Client::lease_keep_alive(&mut client, lease.0)
            .await
            .map_err(classify)?;
        let first = match client.lease_time_to_live(lease.0, None).await {
            Ok(r) if r.ttl() > 0 => r.granted_ttl(),
            // Gone meanwhile: the first reply says so.
            Ok(r) => r.ttl().min(0),
            Err(_) => {
                // Not answered: a second keep-alive's reply carries it.
                keeper.keep_alive().await.map_err(classify)?;
                return Ok((
                    Keeper(keeper),
                    Replies {
                        first: None,
                        stream: replies,
                    },
                ));
            }
        };
        Ok((
            Keeper(keeper),
            Replies {
                first: Some(first),
                stream: replies,
            },
        ))
    }
}

/// An etcd-client error met while connecting or checking, as a typed
/// error whose text carries every cause (a TLS failure is only named deep
/// in the transport error's sources).
pub(crate) fn connect_error(e: etcd_client::Error) -> Error {
    use tonic::Code;
    let text = describe(&e);
    let lower = text.to_lowercase();
    let tls = ["certificate", "tls", "handshake", "x509", "unknownissuer"]
        .iter()
        .any(|w| lower.contains(w));
    match &e {
        etcd_client::Error::GRpcStatus(s)
            if s.code() == Code::Unauthenticated
                || s.code() == Code::PermissionDenied
                || s.message().contains("authentication failed")
                || s.message().contains("user name is empty")
                || s.message().contains("invalid auth token") =>
        {
            Error::Auth(Cause::described(text, e))
        }
        _ if tls => Error::Tls(Cause::described(text, e)),
        etcd_client::Error::GRpcStatus(s)
            if matches!(
                s.code(),
                Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
            ) =>
        {
            Error::Unreachable(Cause::described(text, e))
        }
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => {
            Error::Unreachable(Cause::described(text, e))
        }
        _ => Error::Connect(Cause::described(text, e)),
    }
}

/// `e` and each of its sources, joined by ": " (repeats dropped).
pub(crate) fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        let s = err.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        next = err.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_connection_is_told_apart_from_etcds_own_unavailable() {
        // What tonic says while nothing listens at the address (measured
        // against a killed etcd), by text alone and by its io source.
        let text = tonic::Status::unavailable(
            "error trying to connect: tcp connect error: Connection refused (os error 111)",
        );
        assert!(matches!(
            classify(etcd_client::Error::GRpcStatus(text)),
            EtcdError::Refused(_)
        ));
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let mut sourced = tonic::Status::unavailable("transport error");
        sourced.set_source(std::sync::Arc::new(io));
        assert!(matches!(
            classify(etcd_client::Error::GRpcStatus(sourced)),
            EtcdError::Refused(_)
        ));
        // etcd answering that it cannot serve, or a connection that timed
        // out, is no refusal: it is paced as before.
        for msg in [
            "etcdserver: no leader",
            "tcp connect error: deadline has elapsed",
        ] {
            assert_eq!(
                classify(etcd_client::Error::GRpcStatus(tonic::Status::unavailable(
                    msg
                ))),
                EtcdError::Unavailable(msg.into())
            );
        }
        // Reset at once by a proxy whose etcd is down (measured: code
        // Unknown, "transport error", an io reset as its source): the
        // outcome stays unknown.
        for kind in [
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::BrokenPipe,
        ] {
            let mut reset = tonic::Status::unknown("transport error");
            reset.set_source(std::sync::Arc::new(std::io::Error::from(kind)));
            assert!(matches!(
                classify(etcd_client::Error::GRpcStatus(reset)),
                EtcdError::Reset(_)
            ));
        }
        assert_eq!(
            EtcdError::Reset(String::new()).into_outcome::<()>(),
            coord_core::Outcome::Unknown
        );
        // A refusal's text under another code is not taken for one.
        let other = tonic::Status::internal("Connection refused");
        assert!(!matches!(
            classify(etcd_client::Error::GRpcStatus(other)),
            EtcdError::Refused(_)
        ));
    }
}
