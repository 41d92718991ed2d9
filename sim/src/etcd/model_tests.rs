use super::*;

#[test]
fn revisions_versions_and_prev_kv() {
    let mut m = EtcdModel::new();
    assert_eq!(m.put(b"/a", b"1", 0), Ok(2));
    assert_eq!(m.put(b"/a", b"2", 0), Ok(3));
    let kv = m.get(b"/a").unwrap();
    assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (2, 3, 2));
    assert_eq!(m.delete(b"/a").map(|p| p.value), Some(b"2".to_vec()));
    assert_eq!(m.revision(), 4);
    assert_eq!(m.delete(b"/a"), None, "deleting nothing is no revision");
    assert_eq!(m.revision(), 4);
    let evs = m.events_since(b"/", 3).unwrap();
    assert_eq!(evs.len(), 2);
    assert!(matches!(&evs[1], Event::Delete { revision: 4, prev, .. } if prev.value == b"2"));
}

#[test]
fn leases_expire_their_keys_and_ttl_resets_on_leader_change() {
    let mut m = EtcdModel::new();
    let (id, ttl) = m.grant(0, 1);
    assert_eq!(ttl, 2, "minimum TTL");
    m.put(b"/h/1", b"x", id).unwrap();
    assert_eq!(m.put(b"/h/2", b"x", 999), Err(ModelError::LeaseNotFound));
    assert!(m.expire(1999).is_empty());
    assert_eq!(m.keep_alive(1500, id), 2);
    assert!(m.expire(3000).is_empty());
    m.reset_lease_ttls(3400);
    assert!(m.expire(5000).is_empty());
    assert_eq!(m.expire(5400), vec![id]);
    assert_eq!(m.get(b"/h/1"), None);
    assert_eq!(m.keep_alive(5500, id), 0);
    assert_eq!(m.revoke(id), Err(ModelError::LeaseNotFound));
}

#[test]
fn revoke_deletes_all_keys_in_one_revision() {
    let mut m = EtcdModel::new();
    let (id, _) = m.grant(0, 10);
    m.put(b"/a", b"1", id).unwrap();
    m.put(b"/b", b"1", id).unwrap();
    let before = m.revision();
    m.revoke(id).unwrap();
    assert_eq!(m.revision(), before + 1);
    assert!(m.range(b"/", None).unwrap().0.is_empty());
}

#[test]
fn moving_a_key_to_another_lease_detaches_it_from_the_old_one() {
    let mut m = EtcdModel::new();
    let (a, _) = m.grant(0, 10);
    let (b, _) = m.grant(0, 10);
    m.put(b"/k", b"v", a).unwrap();
    m.put(b"/k", b"v", b).unwrap();
    m.revoke(a).unwrap();
    assert_eq!(m.get(b"/k").map(|kv| kv.lease), Some(b));
}

fn cmp(key: &[u8], prefix: bool, op: CompareOp, target: Target) -> Compare {
    Compare {
        key: key.to_vec(),
        prefix,
        op,
        target,
    }
}

fn succeeded(r: Result<TxnResult, ModelError>) -> bool {
    r.unwrap().succeeded
}

#[test]
fn txn_compares_and_branches() {
    let mut m = EtcdModel::new();
    let (l, _) = m.grant(0, 10);
    let put_if_changed = TxnRequest {
        compares: vec![
            cmp(b"/k", false, CompareOp::Equal, Target::Lease(l)),
            cmp(b"/k", false, CompareOp::Equal, Target::Value(b"v".to_vec())),
        ],
        success: vec![],
        failure: vec![TxnOp::Put {
            key: b"/k".to_vec(),
            value: b"v".to_vec(),
            lease: l,
        }],
    };
    assert!(!succeeded(m.txn(&put_if_changed)));
    let rev = m.revision();
    assert!(succeeded(m.txn(&put_if_changed)));
    assert_eq!(m.revision(), rev, "an intact key is not rewritten");
    let c = cmp(b"/k", false, CompareOp::Greater, Target::CreateRevision(0));
    let req = TxnRequest {
        compares: vec![c],
        ..TxnRequest::default()
    };
    assert!(succeeded(m.txn(&req)));
    // etcd: a value compare on a missing key fails, even against "".
    let req = TxnRequest {
        compares: vec![cmp(
            b"/none",
            false,
            CompareOp::Equal,
            Target::Value(vec![]),
        )],
        ..TxnRequest::default()
    };
    assert!(!succeeded(m.txn(&req)));
}

#[test]
fn range_compares_nested_txns_and_reads_inside_a_txn() {
    let mut m = EtcdModel::new();
    let (l, _) = m.grant(0, 10);
    // "Nobody under /e/" holds on an empty prefix; a put and a read of
    // the prefix in the same branch see each other, in one revision.
    let campaign = |m: &mut EtcdModel, key: &[u8]| {
        m.txn(&TxnRequest {
            compares: vec![cmp(
                b"/e/",
                true,
                CompareOp::Equal,
                Target::CreateRevision(0),
            )],
            success: vec![
                TxnOp::Put {
                    key: key.to_vec(),
                    value: b"x".to_vec(),
                    lease: l,
                },
                TxnOp::Get(Select {
                    key: b"/e/".to_vec(),
                    prefix: true,
                    sort: Sort::CreateAscending,
                    limit: 0,
                }),
            ],
            failure: vec![TxnOp::Get(Select {
                key: b"/e/".to_vec(),
                prefix: true,
                sort: Sort::CreateAscending,
                limit: 1,
            })],
        })
        .unwrap()
    };
    let first = campaign(&mut m, b"/e/1");
    assert!(first.succeeded);
    let OpResult::Get(kvs) = &first.results[1] else {
        panic!("{first:?}")
    };
    assert_eq!(kvs.len(), 1);
    assert_eq!(kvs[0].mod_revision, m.revision());
    let second = campaign(&mut m, b"/e/0");
    assert!(!second.succeeded, "someone is there");
    assert_eq!(second.results, vec![OpResult::Get(vec![kvs[0].clone()])]);
    assert!(m.get(b"/e/0").is_none());
    // A nested transaction guarded by the outer compare; a put with a
    // dead lease anywhere on the path fails the whole transaction.
    let guarded = |lease: i64| TxnRequest {
        compares: vec![cmp(
            b"/e/1",
            false,
            CompareOp::Equal,
            Target::CreateRevision(kvs[0].create_revision),
        )],
        success: vec![TxnOp::Txn(Box::new(TxnRequest {
            compares: vec![],
            success: vec![
                TxnOp::Put {
                    key: b"/r".to_vec(),
                    value: b"w".to_vec(),
                    lease,
                },
                TxnOp::Delete {
                    key: b"/none".to_vec(),
                },
            ],
            failure: vec![],
        }))],
        failure: vec![],
    };
    let before = m.revision();
    assert_eq!(m.txn(&guarded(999)), Err(ModelError::LeaseNotFound));
    assert_eq!(m.revision(), before);
    let r = m.txn(&guarded(0)).unwrap();
    assert!(r.succeeded);
    assert_eq!(
        r.results,
        vec![OpResult::Txn(TxnResult {
            succeeded: true,
            results: vec![OpResult::Put, OpResult::Delete(0)],
        })]
    );
    assert_eq!(m.revision(), before + 1);
    m.delete(b"/e/1");
    assert!(!m.txn(&guarded(0)).unwrap().succeeded, "the guard failed");
}

#[test]
fn compaction_fails_old_reads_and_watches() {
    let mut m = EtcdModel::new();
    m.put(b"/a", b"1", 0).unwrap();
    m.put(b"/a", b"2", 0).unwrap();
    m.put(b"/b", b"1", 0).unwrap();
    let (old, _) = m.range(b"/", Some(2)).unwrap();
    assert_eq!(old.len(), 1);
    assert_eq!(old[0].value, b"1");
    m.compact(3).unwrap();
    assert_eq!(m.range(b"/", Some(2)), Err(ModelError::Compacted(3)));
    assert_eq!(m.events_since(b"/", 3), Err(ModelError::Compacted(3)));
    assert_eq!(m.events_since(b"/", 4).unwrap().len(), 1);
    assert_eq!(m.range(b"/", Some(3)).unwrap().0.len(), 1);
    assert_eq!(m.compact(3), Err(ModelError::Compacted(3)));
}
