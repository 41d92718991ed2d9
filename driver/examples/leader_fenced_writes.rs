//! Writes that a stale leader can never make. The leader writes through
//! `Leadership::txn`, which etcd applies only while the leadership's key
//! still exists with its fencing token as create revision: once the lead is
//! lost (its lease expired during a long pause, its key deleted), the same
//! write is refused with `Error::NotLeader` and nothing is applied.
//!
//! ```sh
//! cargo run --example leader_fenced_writes
//! etcdctl get /jobs/owner   # who wrote last, and with which token
//! ```

use coord::{Compare, CompareOp, ConnectOptions, Election, Revision, Txn, TxnOp};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = coord::connect(&endpoints(), ConnectOptions::default()).await?;
    let election = Election::new(client.clone(), "jobs-leader", Default::default()).await?;
    let leader = election.campaign("writer-1").await?;
    let token = leader.token().0;
    println!("leading {} with fencing token {token}", election.name());

    // Guarded by the leadership, plus a compare of our own: the first
    // leader to start the jobs records it, later ones see it is done.
    let start = Txn::new()
        .when([Compare::create_revision(
            "/jobs/started",
            CompareOp::Equal,
            Revision(0),
        )])
        .and_then([TxnOp::put("/jobs/started", token.to_string())]);
    let started = leader.txn(start).await?;
    println!("jobs started by this leader: {}", started.succeeded);
    let write = Txn::new().and_then([TxnOp::put(
        "/jobs/owner",
        format!("writer-1, token {token}"),
    )]);
    let applied = leader.txn(write.clone()).await?;
    println!("owner written at revision {}", applied.revision.0);

    // The lead is lost: here its key is deleted from outside (an operator;
    // or etcd expiring the lease while this process was paused). The same
    // write is now refused by etcd, whatever this process believes.
    client.etcd().delete(leader.key(), None).await?;
    match leader.txn(write).await {
        Err(coord::Error::NotLeader) => println!("refused once the lead was lost: nothing applied"),
        other => return Err(format!("a stale write went through: {other:?}").into()),
    }
    println!("lost: {:?}", leader.lost().await);
    election.close().await?;
    Ok(())
}

fn endpoints() -> Vec<String> {
    std::env::var("ETCD_ENDPOINTS")
        .unwrap_or_else(|_| "http://127.0.0.1:2379".into())
        .split(',')
        .map(str::to_owned)
        .collect()
}
