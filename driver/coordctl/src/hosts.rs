//! `coordctl hosts`: the registered hosts, and with `--watch` their
//! changes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use coord::{Error, HostEvent, HostMetadata, HostRecord, HostWatcher, WatcherOptions};
use serde_json::Value;

use crate::cli::{Global, Hosts};
use crate::exit::Failure;
use crate::output::{Printer, Record};
use crate::setup::{self, Signals};

/// The columns of the list.
const COLUMNS: [&str; 6] = ["id", "hostname", "version", "lease", "age", "error"];

/// Lists the hosts once the watcher's snapshot is complete; with `watch`,
/// then prints each change until SIGINT or SIGTERM.
pub async fn run(
    global: &Global,
    args: &Hosts,
    signals: &mut Signals,
    printer: Printer,
) -> Result<(), Failure> {
    let client = setup::connect(global).await?;
    let options = WatcherOptions::default()
        .with_prefix(global.prefix.clone())
        .with_request_timeout(global.command_timeout);
    let mut watcher = tokio::select! {
        w = HostWatcher::<HostMetadata>::new(client, options) => w?,
        _ = signals.next() => return Ok(()),
    };
    loop {
        tokio::select! {
            event = watcher.next() => match event {
                Some(HostEvent::Synced { .. }) => break,
                Some(_) => continue,
                None => return Err(Error::TaskGone.into()),
            },
            _ = signals.next() => return Ok(()),
        }
    }
    let now = SystemTime::now();
    let rows: Vec<Record> = watcher
        .view()
        .iter()
        .map(|(id, record)| host_record("host", id, record, now))
        .collect();
    printer.table(&COLUMNS, &rows);
    if !args.watch {
        watcher.close().await;
        return Ok(());
    }
    loop {
        tokio::select! {
            event = watcher.next() => match event {
                Some(event) => printer.event(&event_record(&event)),
                None => return Err(Error::TaskGone.into()),
            },
            _ = signals.next() => break,
        }
    }
    watcher.close().await;
    Ok(())
}

/// A host as a record named `event`: its id, metadata (or why it does not
/// decode), lease and age.
fn host_record(
    event: &'static str,
    id: &str,
    record: &HostRecord<HostMetadata>,
    now: SystemTime,
) -> Record {
    let base = Record::new(event)
        .with("id", id)
        .with("lease", record.lease.to_string())
        .with("mod_revision", record.mod_revision.0);
    match &record.meta {
        Ok(meta) => {
            let age = age(meta.started_at_unix_ns, now);
            base.with("hostname", meta.hostname.as_str())
                .with("version", meta.version.as_str())
                .with("hypervisor", meta.hypervisor.as_str())
                .with(
                    "age",
                    age.map(|a| humantime::format_duration(a).to_string()),
                )
                .with("age_s", age.map(|a| a.as_secs()))
                .with("meta", serde_json::to_value(meta).unwrap_or(Value::Null))
        }
        Err(e) => base
            .with("error", format!("metadata does not decode ({})", e.0))
            .with("raw", String::from_utf8_lossy(&record.raw).into_owned()),
    }
}

/// How long ago `started_at_unix_ns` was, to the second.
fn age(started_at_unix_ns: i64, now: SystemTime) -> Option<Duration> {
    if started_at_unix_ns <= 0 {
        return None;
    }
    let started = UNIX_EPOCH + Duration::from_nanos(u64::try_from(started_at_unix_ns).ok()?);
    let age = now.duration_since(started).ok()?;
    Some(Duration::from_secs(age.as_secs()))
}

/// A watcher event as a record.
fn event_record(event: &HostEvent<HostMetadata>) -> Record {
    let now = SystemTime::now();
    match event {
        HostEvent::Up {
            host,
            record,
            revision,
        } => host_record("up", host, record, now).with("revision", revision.0),
        HostEvent::Updated {
            host,
            record,
            revision,
            ..
        } => host_record("updated", host, record, now).with("revision", revision.0),
        HostEvent::Down {
            host,
            last_seen,
            revision,
        } => host_record("down", host, last_seen, now).with("revision", revision.0),
        HostEvent::Synced { revision } => Record::new("synced").with("revision", revision.0),
        HostEvent::Resynced { reason, revision } => Record::new("resynced")
            .with("reason", format!("{reason:?}"))
            .with("revision", revision.0),
        HostEvent::Retrying {
            attempt,
            failure,
            retry_in,
        } => Record::new("retrying")
            .with("attempt", *attempt)
            .with("failure", failure.as_ref().map(|f| f.to_string()))
            .with(
                "retry_in_ms",
                u64::try_from(retry_in.as_millis()).unwrap_or(u64::MAX),
            ),
        other => Record::new("other").with("event", format!("{other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coord::{DecodeError, LeaseId, Revision};

    #[test]
    fn undecodable_metadata_is_listed_with_its_reason() {
        let record = HostRecord::<HostMetadata> {
            meta: Err(DecodeError("expected value".into())),
            raw: b"{oops".to_vec(),
            lease: LeaseId(0x2a),
            mod_revision: Revision(7),
        };
        let r = host_record("host", "h1", &record, SystemTime::now());
        let field = |n: &str| {
            r.fields
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(field("lease"), Some(Value::from("2a")));
        assert_eq!(field("raw"), Some(Value::from("{oops")));
        assert!(matches!(field("error"), Some(Value::String(s)) if s.contains("expected value")));
    }

    #[test]
    fn age_is_whole_seconds_and_none_for_the_future_or_unset() {
        let now = UNIX_EPOCH + Duration::from_secs(100);
        assert_eq!(age(40_500_000_000, now), Some(Duration::from_secs(59)));
        assert_eq!(age(200_000_000_000, now), None);
        assert_eq!(age(-1, now), None);
        assert_eq!(age(0, now), None);
    }
}
