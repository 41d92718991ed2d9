//! Printing: a human table or line per event, or one JSON object per line.

use std::io::Write;
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

/// Prints records to stdout in the chosen format. A write error (a closed
/// pipe) is ignored: the command goes on, as its holder may depend on it.
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
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
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
