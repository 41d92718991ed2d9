//! `EtcdApi` on the real `etcd-client` (not built under the simulator).

use coord_core::LeaseId;
use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use tonic::Code;

use crate::api::{EtcdApi, EtcdError, Granted, KeepAliveReplies, KeepAliveSender};

/// Classifies an `etcd-client` error. Connection failures and
/// `Unavailable` (including "no leader") are fast, definite failures;
/// transport breaks mid-request and deadlines leave the outcome unknown.
pub fn classify(e: etcd_client::Error) -> EtcdError {
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            let msg = status.message().to_string();
            match status.code() {
                Code::Unavailable => EtcdError::Unavailable(msg),
                _ if msg.contains("lease not found") => EtcdError::LeaseNotFound,
                Code::OutOfRange if msg.contains("compacted") => EtcdError::Compacted {
                    compact_revision: 0,
                },
                Code::ResourceExhausted => EtcdError::Overloaded(msg),
                Code::DeadlineExceeded
                | Code::Cancelled
                | Code::Unknown
                | Code::Internal
                | Code::Aborted => EtcdError::Indeterminate(format!("{:?}: {msg}", status.code())),
                code => EtcdError::Other(format!("{code:?}: {msg}")),
            }
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

/// The keep-alive sender of a real stream.
pub struct Keeper(etcd_client::LeaseKeeper);

/// The keep-alive replies of a real stream.
pub struct Replies(etcd_client::LeaseKeepAliveStream);

impl KeepAliveSender for Keeper {
    async fn send(&mut self) -> Result<(), EtcdError> {
        self.0.keep_alive().await.map_err(classify)
    }
}

impl KeepAliveReplies for Replies {
    async fn next(&mut self) -> Option<Result<i64, EtcdError>> {
        match self.0.message().await {
            Ok(Some(reply)) => Some(Ok(reply.ttl())),
            Ok(None) => None,
            Err(e) => Some(Err(classify(e))),
        }
    }
}

impl EtcdApi for Client {
    type Keeper = Keeper;
    type Replies = Replies;

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

    async fn put_if_changed(
        &self,
        key: Vec<u8>,
        value: Vec<u8>,
        lease: LeaseId,
    ) -> Result<(), EtcdError> {
        let txn = Txn::new()
            .when(vec![
                Compare::lease(key.clone(), CompareOp::Equal, lease.0),
                Compare::value(key.clone(), CompareOp::Equal, value.clone()),
            ])
            .or_else(vec![TxnOp::put(
                key,
                value,
                Some(PutOptions::new().with_lease(lease.0)),
            )]);
        Client::txn(&mut self.clone(), txn)
            .await
            .map(|_| ())
            .map_err(classify)
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<(Keeper, Replies), EtcdError> {
        // etcd-client sends one keep-alive and consumes its reply itself
        // (failing with "lease not found" on TTL 0) without handing us the
        // TTL. Send a second one so the first reply we yield carries it.
        let (mut keeper, replies) = Client::lease_keep_alive(&mut self.clone(), lease.0)
            .await
            .map_err(classify)?;
        keeper.keep_alive().await.map_err(classify)?;
        Ok((Keeper(keeper), Replies(replies)))
    }
}
