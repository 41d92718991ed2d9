//! `coordctl status` and `coordctl queue`: what an operator looks at
//! first. Both only read.

use std::time::Duration;

use coord::etcd_client::{GetOptions, SortOrder, SortTarget};
use coord::Error;

use crate::cli::{Global, Named};
use crate::exit::Failure;
use crate::output::{Printer, Record};
use crate::setup;

/// The columns of `status`'s endpoints.
const ENDPOINT_COLUMNS: [&str; 9] = [
    "endpoint", "health", "member", "version", "leader", "term", "revision", "db_size", "error",
];
/// The columns of `status`'s members.
const MEMBER_COLUMNS: [&str; 5] = ["member", "name", "client_urls", "peer_urls", "learner"];
/// The columns of `queue`.
const QUEUE_COLUMNS: [&str; 7] = [
    "position",
    "role",
    "key",
    "value",
    "create_revision",
    "lease",
    "ttl",
];

/// `coordctl status`: each endpoint asked on its own (its health, member,
/// version, whether it leads, raft term, revision, database size and
/// alarms), then the members as the first endpoint that answered lists
/// them, then the hosts registered under `--prefix`. `Err` (exit 2) when
/// an endpoint did not answer; everything that answered is printed first.
pub async fn status(global: &Global, printer: Printer) -> Result<(), Failure> {
    let options = setup::connect_options(global)?;
    let mut rows = Vec::new();
    let mut reached = None;
    let mut failed = Vec::new();
    for endpoint in setup::endpoints(global) {
        match endpoint_status(endpoint, options.clone(), global.dial_timeout).await {
            Ok((row, client)) => {
                rows.push(row);
                reached.get_or_insert(client);
            }
            Err(e) => {
                rows.push(
                    Record::new("endpoint")
                        .with("endpoint", endpoint)
                        .with("health", "unreachable")
                        .with("error", e.to_string()),
                );
                failed.push(format!("{endpoint}: {e}"));
            }
        }
    }
    printer.table(&ENDPOINT_COLUMNS, &rows);
    if let Some(client) = reached {
        let mut etcd = client.etcd();
        match setup::answer(global.command_timeout, etcd.member_list()).await {
            Ok(list) => {
                let rows: Vec<Record> = list
                    .members()
                    .iter()
                    .map(|m| {
                        Record::new("member")
                            .with("member", format!("{:x}", m.id()))
                            .with("name", m.name())
                            .with("client_urls", m.client_urls().join(","))
                            .with("peer_urls", m.peer_urls().join(","))
                            .with("learner", m.is_learner())
                    })
                    .collect();
                printer.table(&MEMBER_COLUMNS, &rows);
            }
            Err(e) => failed.push(format!("member list: {e}")),
        }
        let hosts = etcd.get(
            global.prefix.as_str(),
            Some(GetOptions::new().with_prefix().with_count_only()),
        );
        match setup::answer(global.command_timeout, hosts).await {
            Ok(r) => printer.table(
                &["prefix", "keys", "revision"],
                &[Record::new("hosts")
                    .with("prefix", global.prefix.as_str())
                    .with("keys", r.count())
                    .with("revision", r.header().map_or(0, |h| h.revision()))],
            ),
            Err(e) => failed.push(format!("hosts: {e}")),
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::Unreachable(coord::Cause::msg(failed.join("; "))).into())
    }
}

/// One endpoint's status row, and a client to it.
async fn endpoint_status(
    endpoint: &str,
    options: coord::ConnectOptions,
    within: Duration,
) -> Result<(Record, coord::Client), Error> {
    let client = tokio::time::timeout(within, coord::connect(&[endpoint], options))
        .await
        .map_err(|_| setup::no_answer(within))??;
    // First coord's own check, which names a TLS or credentials failure;
    // then the status whose fields are printed.
    client.check(within).await?;
    let mut maintenance = client.etcd().maintenance_client();
    let status = setup::answer(within, maintenance.status()).await?;
    let header = status.header();
    let member = header.map_or(0, |h| h.member_id());
    let errors = status.errors().join("; ");
    let row = Record::new("endpoint")
        .with("endpoint", endpoint)
        .with("health", if errors.is_empty() { "ok" } else { "alarm" })
        .with("member", format!("{member:x}"))
        .with("version", status.version())
        .with("leader", status.leader() != 0 && status.leader() == member)
        .with("term", status.raft_term())
        .with("revision", header.map_or(0, |h| h.revision()))
        .with("db_size", status.db_size());
    // No field at all when etcd raised no alarm (a table shows `-`).
    let row = if errors.is_empty() {
        row
    } else {
        row.with("error", errors)
    };
    Ok((row, client))
}

/// `coordctl queue NAME`: the keys of election or lock NAME (as etcd's Go
/// `concurrency` package and coordctl write them, `NAME/<lease hex>`) in
/// the order they hold and wait: the first holds. Each with its value,
/// create revision, lease and the seconds its lease has left (-1 once it
/// is gone).
pub async fn queue(global: &Global, args: &Named, printer: Printer) -> Result<(), Failure> {
    coord::validate_name(&args.name)?;
    let client = setup::connect(global).await?;
    let mut etcd = client.etcd();
    let prefix = format!("{}/", args.name);
    let within = global.command_timeout;
    let listing = etcd.get(
        prefix.as_str(),
        Some(
            GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend),
        ),
    );
    let listed = setup::answer(within, listing).await?;
    let mut rows = Vec::new();
    for (position, kv) in listed.kvs().iter().enumerate() {
        let ttl = if kv.lease() == 0 {
            None
        } else {
            let asked = etcd.lease_time_to_live(kv.lease(), None);
            Some(setup::answer(within, asked).await?.ttl())
        };
        rows.push(
            Record::new("queued")
                .with("position", position)
                .with("role", if position == 0 { "holder" } else { "waiter" })
                .with("key", String::from_utf8_lossy(kv.key()).into_owned())
                .with("value", String::from_utf8_lossy(kv.value()).into_owned())
                .with("create_revision", kv.create_revision())
                .with("lease", format!("{:x}", kv.lease()))
                .with("ttl", ttl),
        );
    }
    printer.table(&QUEUE_COLUMNS, &rows);
    Ok(())
}
