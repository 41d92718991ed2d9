//! The model's types to and from core's: what the simulated server
//! converts on the way in (selections, transactions) and out (key-values,
//! watch events, transaction results, errors).

use coord::EtcdError;
use coord_core::io::{self as core_io, Get};
use coord_core::kv::{KeyValue as CoreKv, WatchEvent};
use coord_core::{Key, LeaseId, Revision};

use crate::etcd::model::{
    self, Compare, CompareOp, ModelError, OpResult, Select, Sort, Target, TxnOp, TxnRequest,
    TxnResult,
};
use crate::etcd::wire::Reply;

pub(super) fn core_kv(kv: &model::KeyValue) -> CoreKv {
    CoreKv {
        key: Key(kv.key.clone()),
        value: kv.value.clone(),
        create_revision: Revision(kv.create_revision),
        mod_revision: Revision(kv.mod_revision),
        lease: LeaseId(kv.lease),
    }
}

pub(super) fn core_event(e: &model::Event) -> WatchEvent {
    match e {
        model::Event::Put { kv, prev } => WatchEvent::Put {
            kv: core_kv(kv),
            prev: prev.as_ref().map(core_kv),
        },
        model::Event::Delete {
            key,
            revision,
            prev,
            ..
        } => WatchEvent::Delete {
            key: Key(key.clone()),
            revision: Revision(*revision),
            prev: Some(core_kv(prev)),
        },
    }
}

pub(super) fn select(get: &Get) -> Select {
    Select {
        key: get.key.0.clone(),
        prefix: get.prefix,
        sort: match get.sort {
            core_io::Sort::Key => Sort::Key,
            core_io::Sort::CreateAscending => Sort::CreateAscending,
            core_io::Sort::CreateDescending => Sort::CreateDescending,
        },
        limit: usize::try_from(get.limit).unwrap_or(usize::MAX),
    }
}

pub(super) fn txn_request(txn: &core_io::Txn) -> TxnRequest {
    let op = |op: &core_io::TxnOp| match op {
        core_io::TxnOp::Put { key, value, lease } => TxnOp::Put {
            key: key.0.clone(),
            value: value.clone(),
            lease: lease.0,
        },
        core_io::TxnOp::Delete { key } => TxnOp::Delete { key: key.0.clone() },
        core_io::TxnOp::Get(get) => TxnOp::Get(select(get)),
        core_io::TxnOp::Txn(t) => TxnOp::Txn(Box::new(txn_request(t))),
    };
    TxnRequest {
        compares: txn
            .compares
            .iter()
            .map(|c| Compare {
                key: c.key.0.clone(),
                prefix: c.prefix,
                op: match c.op {
                    core_io::CompareOp::Equal => CompareOp::Equal,
                    core_io::CompareOp::NotEqual => CompareOp::NotEqual,
                    core_io::CompareOp::Less => CompareOp::Less,
                    core_io::CompareOp::Greater => CompareOp::Greater,
                },
                target: match &c.target {
                    core_io::CompareTarget::CreateRevision(r) => Target::CreateRevision(r.0),
                    core_io::CompareTarget::ModRevision(r) => Target::ModRevision(r.0),
                    core_io::CompareTarget::Version(v) => Target::Version(*v),
                    core_io::CompareTarget::Value(v) => Target::Value(v.clone()),
                    core_io::CompareTarget::Lease(l) => Target::Lease(l.0),
                },
            })
            .collect(),
        success: txn.success.iter().map(op).collect(),
        failure: txn.failure.iter().map(op).collect(),
    }
}

pub(super) fn txn_response(r: &TxnResult, revision: i64, cluster: u64) -> core_io::TxnResponse {
    core_io::TxnResponse {
        succeeded: r.succeeded,
        revision: Revision(revision),
        cluster: coord_core::ClusterId(cluster),
        responses: r
            .results
            .iter()
            .map(|o| match o {
                OpResult::Put => core_io::TxnOpResponse::Put,
                OpResult::Delete(n) => core_io::TxnOpResponse::Delete { deleted: *n },
                OpResult::Get(kvs) => {
                    core_io::TxnOpResponse::Get(kvs.iter().map(core_kv).collect())
                }
                OpResult::Txn(t) => core_io::TxnOpResponse::Txn(txn_response(t, revision, cluster)),
            })
            .collect(),
    }
}

pub(super) fn failed(e: ModelError) -> Reply {
    Reply::Failed(match e {
        ModelError::LeaseNotFound => EtcdError::LeaseNotFound,
        ModelError::Compacted(rev) => EtcdError::Compacted {
            compact_revision: rev,
        },
        ModelError::FutureRevision => EtcdError::FutureRevision,
    })
}
