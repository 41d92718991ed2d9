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
    let filter = HostFilter::of(args);
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
        .filter(|(id, record)| filter.matches(id, record))
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
                Some(event) if filter.shows(&event) => printer.event(&event_record(&event)),
                Some(_) => {}
                None => return Err(Error::TaskGone.into()),
            },
            _ = signals.next() => break,
        }
    }
    watcher.close().await;
    Ok(())
}

/// `hosts --id/--hostname/--version`: patterns a host must match, each
/// with `*` (any text) and `?` (one character). A host whose metadata does
/// not decode matches no hostname or version pattern.
#[derive(Debug, Default)]
struct HostFilter {
    id: Option<String>,
    hostname: Option<String>,
    version: Option<String>,
}

impl HostFilter {
    fn of(args: &Hosts) -> Self {
        HostFilter {
            id: args.id.clone(),
            hostname: args.hostname.clone(),
            version: args.agent_version.clone(),
        }
    }

    fn matches(&self, id: &str, record: &HostRecord<HostMetadata>) -> bool {
        let field = |pattern: &Option<String>, value: Option<&str>| match pattern {
            None => true,
            Some(p) => value.is_some_and(|v| glob(p, v)),
        };
        let meta = record.meta.as_ref().ok();
        field(&self.id, Some(id))
            && field(&self.hostname, meta.map(|m| m.hostname.as_str()))
            && field(&self.version, meta.map(|m| m.version.as_str()))
    }

    /// Whether a watch event is printed: a host event when the host
    /// matches (an update, when it matches before or after), every other
    /// event always.
    fn shows(&self, event: &HostEvent<HostMetadata>) -> bool {
        match event {
            HostEvent::Up { host, record, .. } => self.matches(host, record),
            HostEvent::Down {
                host, last_seen, ..
            } => self.matches(host, last_seen),
            HostEvent::Updated {
                host,
                record,
                previous,
                ..
            } => self.matches(host, record) || self.matches(host, previous),
            _ => true,
        }
    }
}

/// Whether `text` matches `pattern`: `*` any run of characters (none
/// included), `?` any one character, anything else itself.
fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // The classic two-pointer match with backtracking to the last `*`.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(c) if *c == '?' || *c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == '*')
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
        HostEvent::Reset { reason, revision } => Record::new("reset")
            .with("reason", format!("{reason:?}"))
            .with("revision", revision.0),
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
    fn globs_match_any_text_one_character_or_themselves() {
        for (pattern, text, want) in [
            ("db-*", "db-7", true),
            ("db-*", "web-1", false),
            ("*", "", true),
            ("", "", true),
            ("", "a", false),
            ("1.4.?", "1.4.2", true),
            ("1.4.?", "1.4.10", false),
            ("*-7", "db-7", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("n?de-*", "node-12", true),
            ("ü*", "über", true),
        ] {
            assert_eq!(glob(pattern, text), want, "{pattern:?} {text:?}");
        }
    }

    #[test]
    fn filters_judge_ids_and_metadata_and_updates_either_side() {
        let rec = |hostname: &str, version: &str| HostRecord::<HostMetadata> {
            meta: Ok(HostMetadata {
                hostname: hostname.into(),
                version: version.into(),
                ..HostMetadata::default()
            }),
            raw: Vec::new(),
            lease: LeaseId(1),
            mod_revision: Revision(1),
        };
        let filter = HostFilter {
            id: Some("h*".into()),
            hostname: None,
            version: Some("2.*".into()),
        };
        assert!(filter.matches("h1", &rec("a", "2.0")));
        assert!(!filter.matches("x1", &rec("a", "2.0")));
        assert!(!filter.matches("h1", &rec("a", "1.9")));
        let broken = HostRecord::<HostMetadata> {
            meta: Err(DecodeError("bad".into())),
            ..rec("a", "2.0")
        };
        assert!(!filter.matches("h1", &broken), "no version to match");
        let upgraded = HostEvent::Updated {
            host: "h1".into(),
            record: rec("a", "2.0"),
            previous: rec("a", "1.9"),
            revision: Revision(2),
        };
        assert!(filter.shows(&upgraded), "moved into the filter");
        assert!(filter.shows(&HostEvent::Synced {
            revision: Revision(2)
        }));
        assert!(!filter.shows(&HostEvent::Down {
            host: "h2".into(),
            last_seen: rec("a", "1.0"),
            revision: Revision(3)
        }));
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
