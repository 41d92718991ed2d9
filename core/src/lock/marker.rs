//! The marker file a file lock's holder creates (atomically, `O_EXCL`):
//! who holds the lock (pid, the pid's start time, host), since when, and
//! its fencing token. Text, one `key=value` per line after a header, so an
//! operator can read it; parsed strictly, so a corrupt or foreign file is
//! reported, never half-trusted.
//!
//! ```text
//! coord-lock-marker 1
//! pid=4242
//! start=1234567
//! host=build-7
//! acquired_ms=1764547200000
//! token=17
//! ```
//! `start` is `-` where the start time is unknown (not Linux, or
//! `/proc` unreadable).

use std::fmt::Write as _;

/// The first line of every marker (format version 1).
pub const HEADER: &str = "coord-lock-marker 1";

/// Largest marker accepted, in bytes: anything longer is not ours.
pub const MAX_MARKER_LEN: usize = 4096;

/// What a marker file says about its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Marker {
    /// The holder's process id.
    pub pid: u32,
    /// When that process started (Linux: `/proc/<pid>/stat` field 22, in
    /// clock ticks since boot); `None` if unknown. Tells a live holder from
    /// a new process that reused its pid.
    pub start_time: Option<u64>,
    /// The holder's host name: a pid means something only there.
    pub host: String,
    /// When the lock was taken, milliseconds since the Unix epoch (for
    /// operators; the stale window is judged from the file's age).
    pub acquired_ms: u64,
    /// The fencing token of this hold (never negative).
    pub token: i64,
}

/// Why a marker file could not be read as one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MarkerError {
    /// Longer than [`MAX_MARKER_LEN`].
    #[error("marker is {0} bytes long, more than {MAX_MARKER_LEN}")]
    TooLarge(usize),
    /// Not UTF-8 text.
    #[error("marker is not UTF-8 text")]
    NotText,
    /// The first line is not [`HEADER`] (an empty file, a half-written
    /// one, another program's, another version's).
    #[error("marker does not start with {HEADER:?}")]
    BadHeader,
    /// A line that is not `key=value` with a known key, or a key twice.
    #[error("marker line {line} is not a known key=value: {text:?}")]
    BadLine {
        /// 1-based line number.
        line: usize,
        /// The line (cut to 80 bytes).
        text: String,
    },
    /// A field's value does not parse.
    #[error("marker field {field} has a bad value {value:?}")]
    BadValue {
        /// The field.
        field: &'static str,
        /// The value (cut to 80 bytes).
        value: String,
    },
    /// A field is missing.
    #[error("marker has no {0} field")]
    Missing(&'static str),
    /// The host name is empty or holds whitespace or a control character
    /// (it could not be written back as one line).
    #[error("marker host name is empty or holds whitespace or a control character")]
    BadHost,
}

fn cut(s: &str) -> String {
    let mut end = s.len().min(80);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

fn host_ok(host: &str) -> bool {
    !host.is_empty() && crate::host_id::first_bad_character(host).is_none()
}

impl Marker {
    /// The file's text. Fails on a host name that cannot be one line
    /// ([`MarkerError::BadHost`]) or a negative token.
    pub fn encode(&self) -> Result<String, MarkerError> {
        if !host_ok(&self.host) {
            return Err(MarkerError::BadHost);
        }
        if self.token < 0 {
            return Err(MarkerError::BadValue {
                field: "token",
                value: self.token.to_string(),
            });
        }
        let mut out = String::new();
        let start = self
            .start_time
            .map_or_else(|| "-".to_string(), |s| s.to_string());
        // Writing to a String cannot fail.
        let _ = write!(
            out,
            "{HEADER}\npid={}\nstart={start}\nhost={}\nacquired_ms={}\ntoken={}\n",
            self.pid, self.host, self.acquired_ms, self.token
        );
        Ok(out)
    }

    /// Reads a marker file's bytes. Every field must be there exactly
    /// once; nothing else may be.
    pub fn parse(bytes: &[u8]) -> Result<Marker, MarkerError> {
        if bytes.len() > MAX_MARKER_LEN {
            return Err(MarkerError::TooLarge(bytes.len()));
        }
        let text = std::str::from_utf8(bytes).map_err(|_| MarkerError::NotText)?;
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) {
            return Err(MarkerError::BadHeader);
        }
        let mut pid = None;
        let mut start = None;
        let mut host = None;
        let mut acquired = None;
        let mut token = None;
        for (i, line) in lines.enumerate() {
            let bad_line = || MarkerError::BadLine {
                line: i + 2,
                text: cut(line),
            };
            let (key, value) = line.split_once('=').ok_or_else(bad_line)?;
            let slot: &mut Option<&str> = match key {
                "pid" => &mut pid,
                "start" => &mut start,
                "host" => &mut host,
                "acquired_ms" => &mut acquired,
                "token" => &mut token,
                _ => return Err(bad_line()),
            };
            if slot.replace(value).is_some() {
                return Err(bad_line());
            }
        }
        let number = |field: &'static str, value: Option<&str>| -> Result<u64, MarkerError> {
            let value = value.ok_or(MarkerError::Missing(field))?;
            // Digits only: no sign, no spaces, no leading '+'.
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err(MarkerError::BadValue {
                    field,
                    value: cut(value),
                });
            }
            value.parse().map_err(|_| MarkerError::BadValue {
                field,
                value: cut(value),
            })
        };
        let pid = number("pid", pid)?;
        let pid = u32::try_from(pid).map_err(|_| MarkerError::BadValue {
            field: "pid",
            value: pid.to_string(),
        })?;
        let start_time = match start {
            Some("-") => None,
            other => Some(number("start", other)?),
        };
        let host = host.ok_or(MarkerError::Missing("host"))?;
        if !host_ok(host) {
            return Err(MarkerError::BadHost);
        }
        Ok(Marker {
            pid,
            start_time,
            host: host.to_string(),
            acquired_ms: number("acquired_ms", acquired)?,
            token: i64::try_from(number("token", token)?).map_err(|_| MarkerError::BadValue {
                field: "token",
                value: cut(token.unwrap_or_default()),
            })?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker() -> Marker {
        Marker {
            pid: 4242,
            start_time: Some(1_234_567),
            host: "build-7".into(),
            acquired_ms: 1_764_547_200_000,
            token: 17,
        }
    }

    #[test]
    fn a_marker_reads_back_as_written() {
        let m = marker();
        let text = m.encode().unwrap();
        assert!(text.starts_with("coord-lock-marker 1\npid=4242\nstart=1234567\n"));
        assert_eq!(Marker::parse(text.as_bytes()), Ok(m.clone()));
        let unknown = Marker {
            start_time: None,
            ..m
        };
        let text = unknown.encode().unwrap();
        assert!(text.contains("\nstart=-\n"));
        assert_eq!(Marker::parse(text.as_bytes()), Ok(unknown));
    }

    #[test]
    fn a_host_that_is_not_one_line_is_refused_both_ways() {
        for host in ["", "a b", "a\nb"] {
            let m = Marker {
                host: host.into(),
                ..marker()
            };
            assert_eq!(m.encode(), Err(MarkerError::BadHost), "{host:?}");
        }
        let text = "coord-lock-marker 1\npid=1\nstart=-\nhost=\nacquired_ms=1\ntoken=1\n";
        assert_eq!(Marker::parse(text.as_bytes()), Err(MarkerError::BadHost));
    }

    #[test]
    fn corrupt_markers_are_reported_by_what_is_wrong() {
        let good = marker().encode().unwrap();
        let with = |from: &str, to: &str| good.replace(from, to);
        let cases: Vec<(String, MarkerError)> = vec![
            (String::new(), MarkerError::BadHeader),
            ("coord-lock-marker 2\n".into(), MarkerError::BadHeader),
            (
                with("pid=4242", "pid=-1"),
                MarkerError::BadValue {
                    field: "pid",
                    value: "-1".into(),
                },
            ),
            (
                with("pid=4242", "pid=4294967296"),
                MarkerError::BadValue {
                    field: "pid",
                    value: "4294967296".into(),
                },
            ),
            (
                with("token=17", "token=+17"),
                MarkerError::BadValue {
                    field: "token",
                    value: "+17".into(),
                },
            ),
            (
                with("token=17", "token="),
                MarkerError::BadValue {
                    field: "token",
                    value: String::new(),
                },
            ),
            (with("token=17\n", ""), MarkerError::Missing("token")),
            (
                with("token=17", "token=17\ntoken=18"),
                MarkerError::BadLine {
                    line: 7,
                    text: "token=18".into(),
                },
            ),
            (
                with("token=17", "token=17\nextra=1"),
                MarkerError::BadLine {
                    line: 7,
                    text: "extra=1".into(),
                },
            ),
            (
                with("pid=4242", "pid 4242"),
                MarkerError::BadLine {
                    line: 2,
                    text: "pid 4242".into(),
                },
            ),
        ];
        for (text, want) in cases {
            assert_eq!(Marker::parse(text.as_bytes()), Err(want), "{text:?}");
        }
        assert_eq!(Marker::parse(&[0xff, 0xfe]), Err(MarkerError::NotText));
        let big = vec![b'a'; MAX_MARKER_LEN + 1];
        assert_eq!(
            Marker::parse(&big),
            Err(MarkerError::TooLarge(MAX_MARKER_LEN + 1))
        );
    }

    #[test]
    fn a_marker_of_the_longest_length_and_token_zero_are_fine() {
        let short = marker().encode().unwrap();
        let m = Marker {
            host: "h".repeat(MAX_MARKER_LEN - short.len() + marker().host.len()),
            ..marker()
        };
        let text = m.encode().unwrap();
        assert_eq!(text.len(), MAX_MARKER_LEN);
        assert_eq!(Marker::parse(text.as_bytes()), Ok(m));
        let first = Marker {
            token: 0,
            ..marker()
        };
        let text = first.encode().unwrap();
        assert_eq!(Marker::parse(text.as_bytes()), Ok(first));
        let negative = Marker {
            token: -1,
            ..marker()
        };
        assert_eq!(
            negative.encode(),
            Err(MarkerError::BadValue {
                field: "token",
                value: "-1".into(),
            })
        );
    }

    #[test]
    fn a_bad_value_is_quoted_cut_to_80_bytes_on_a_character_boundary() {
        // 79 bytes, then a two-byte character across the 80th.
        let long = format!("{}\u{e9}tail", "x".repeat(79));
        let text = marker()
            .encode()
            .unwrap()
            .replace("token=17", &format!("token={long}"));
        assert_eq!(
            Marker::parse(text.as_bytes()),
            Err(MarkerError::BadValue {
                field: "token",
                value: "x".repeat(79),
            })
        );
    }
}
