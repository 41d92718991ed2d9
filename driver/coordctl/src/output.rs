//! Printing: a human table or line per event, or one JSON object per line.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::LazyLock;
use std::time::SystemTime;

use serde_json::{Map, Value};

use crate::cli::Output;

/// One thing to print: what happened and its fields, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// What happened (`registered`, `up`, `elected`, ...).
    pub event: &'static str,
    /// Its fields, in the order they are printed.
    pub fields: Vec<(&'static str, Value)>,
}

impl Record {
    /// A record of `event` with no fields yet.
    pub fn new(event: &'static str) -> Self {
        Record {
            event,
            fields: Vec::new(),
        }
    }

    /// Adds a field.
    pub fn with(mut self, name: &'static str, value: impl Into<Value>) -> Self {
        self.fields.push((name, value.into()));
        self
    }
}

/// Prints records to stdout in the chosen format. A closed stdout (a
/// pipe whose reader left: `coordctl hosts --watch | head -1`) is noticed
/// on a write, or at once by [`watch_stdout`]: [`closed`] completes, and
/// the subcommand ends as on SIGTERM (see `Signals::next`), exiting 141.
#[derive(Debug, Clone, Copy)]
pub struct Printer {
    format: Output,
}

impl Printer {
    /// A printer in `format`.
    pub fn new(format: Output) -> Self {
        Printer { format }
    }

    /// Prints one event: `TIME  EVENT  k=v ...`, or a JSON object with
    /// `ts` (RFC 3339, UTC), `event` and the fields.
    pub fn event(&self, record: &Record) {
        let line = match self.format {
            Output::Json => json_line(record, SystemTime::now()),
            Output::Table => human_line(record, SystemTime::now()),
        };
        emit(&line);
    }

    /// Prints rows: aligned columns under a header, or one JSON object per
    /// row (each a record named `event`).
    pub fn table(&self, columns: &[&'static str], rows: &[Record]) {
        match self.format {
            Output::Json => {
                let now = SystemTime::now();
                for row in rows {
                    emit(&json_line(row, now));
                }
            }
            Output::Table => emit(&aligned(columns, rows)),
        }
    }
}

fn emit(text: &str) {
    if stdout_closed() {
        return;
    }
    let mut out = std::io::stdout().lock();
    let written = writeln!(out, "{text}").and_then(|()| out.flush());
    if let Err(e) = written {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            mark_closed();
        }
    }
}

static CLOSED: AtomicBool = AtomicBool::new(false);
static CLOSING: LazyLock<tokio::sync::Notify> = LazyLock::new(tokio::sync::Notify::new);

fn mark_closed() {
    CLOSED.store(true, Ordering::SeqCst);
    CLOSING.notify_waiters();
}

/// True once stdout was found closed.
pub fn stdout_closed() -> bool {
    CLOSED.load(Ordering::SeqCst)
}

/// Completes once stdout is found closed.
///
/// Cancel safety: cancel-safe (it only waits).
pub async fn closed() {
    loop {
        let notified = CLOSING.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if stdout_closed() {
            return;
        }
        notified.await;
    }
}

/// Watches stdout, when it is a pipe or a socket, for its reader leaving
/// (`POLLERR`/`POLLHUP`), so that a command that prints rarely (`hosts
/// --watch`) ends as soon as its reader does, not at its next line.
pub fn watch_stdout() {
    use nix::sys::stat::{fstat, SFlag};
    use std::os::fd::{AsFd, AsRawFd};
    let Ok(meta) = fstat(std::io::stdout().as_fd().as_raw_fd()) else {
        return;
    };
    let kind = SFlag::from_bits_truncate(meta.st_mode) & SFlag::S_IFMT;
    if kind != SFlag::S_IFIFO && kind != SFlag::S_IFSOCK {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("stdout-watch".into())
        .spawn(|| {
            use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
            let stdout = std::io::stdout();
            loop {
                let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::empty())];
                match poll(&mut fds, PollTimeout::NONE) {
                    Ok(_) => {
                        let revents = fds[0].revents().unwrap_or(PollFlags::empty());
                        if revents.intersects(
                            PollFlags::POLLERR | PollFlags::POLLHUP | PollFlags::POLLNVAL,
                        ) {
                            mark_closed();
                            return;
                        }
                    }
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(_) => return,
                }
            }
        });
}

fn json_line(record: &Record, at: SystemTime) -> String {
    let mut object = Map::new();
    object.insert(
        "ts".into(),
        Value::String(humantime::format_rfc3339_millis(at).to_string()),
    );
    object.insert("event".into(), Value::String(record.event.into()));
    for (name, value) in &record.fields {
        object.insert((*name).into(), value.clone());
    }
    Value::Object(object).to_string()
}

fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn human_line(record: &Record, at: SystemTime) -> String {
    let mut line = format!("{}  {}", humantime::format_rfc3339_millis(at), record.event);
    for (name, value) in &record.fields {
        line.push_str(&format!("  {name}={}", plain(value)));
    }
    line
}

/// `columns` as a header, then each row's fields of those names, padded.
fn aligned(columns: &[&'static str], rows: &[Record]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            columns
                .iter()
                .map(|c| {
                    row.fields
                        .iter()
                        .find(|(name, _)| name == c)
                        .map_or_else(|| "-".into(), |(_, v)| plain(v))
                })
                .collect()
        })
        .collect();
    let header: Vec<String> = columns.iter().map(|c| c.to_uppercase()).collect();
    let widths: Vec<usize> = (0..columns.len())
        .map(|i| {
            cells
                .iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for row in std::iter::once(&header).chain(&cells) {
        let padded: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        text.push_str(padded.join("  ").trim_end());
        text.push('\n');
    }
    text.pop();
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn json_lines_carry_a_timestamp_the_event_and_the_fields_in_order() {
        let at = UNIX_EPOCH + Duration::from_millis(1_764_460_800_123);
        let r = Record::new("elected")
            .with("key", "jobs/1")
            .with("fence", 7);
        assert_eq!(
            json_line(&r, at),
            r#"{"ts":"2025-11-30T00:00:00.123Z","event":"elected","key":"jobs/1","fence":7}"#
        );
        assert_eq!(
            human_line(&r, at),
            "2025-11-30T00:00:00.123Z  elected  key=jobs/1  fence=7"
        );
    }

    #[test]
    fn tables_align_columns_and_mark_missing_cells() {
        let rows = [
            Record::new("host")
                .with("id", "a")
                .with("hostname", "node-1"),
            Record::new("host").with("id", "bbb"),
        ];
        assert_eq!(
            aligned(&["id", "hostname"], &rows),
            "ID   HOSTNAME\na    node-1\nbbb  -"
        );
    }
}
