//! Host metadata (go-coord's JSON record) and host-id validation.

use serde::{Deserialize, Serialize};

pub use coord_core::host_id::{validate_host_id, HostIdError, MAX_HOST_ID_LEN};

/// Largest encoded metadata accepted, in bytes. etcd refuses requests over
/// 1.5 MiB by default; 1 MiB leaves room for the key and the envelope.
pub const MAX_METADATA_LEN: usize = 1024 * 1024;

/// A host's record as go-coord writes it at `<prefix><host_uuid>`.
///
/// Serialises to exactly go-coord's fields, in its order: `host_uuid`,
/// `hostname`, `hypervisor`, `version` (omitted when empty) and
/// `started_at_unix_ns`. Fields this version does not know are kept in
/// `extra` and written back, so newer agents can add fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct HostMetadata {
    /// The host's unique id; the last segment of its key.
    pub host_uuid: String,
    /// The host's name.
    #[serde(default)]
    pub hostname: String,
    /// The hypervisor the host runs on, if any.
    #[serde(default)]
    pub hypervisor: String,
    /// The agent's version; omitted from the JSON when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// When the agent started, in nanoseconds since the Unix epoch.
    /// `register` fills in the current time when this is 0.
    #[serde(default)]
    pub started_at_unix_ns: i64,
    /// Fields written by other agents that this version does not know.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl HostMetadata {
    /// Metadata for `host_uuid` with the given hostname, no hypervisor,
    /// no version, and `started_at_unix_ns` left for `register` to fill.
    pub fn new(host_uuid: impl Into<String>, hostname: impl Into<String>) -> Self {
        HostMetadata {
            host_uuid: host_uuid.into(),
            hostname: hostname.into(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_coord_record_round_trips_byte_for_byte() {
        let go = r#"{"host_uuid":"6b1f0c1e-3a52-4c47-9a37-0a4c5f1c2d3e","hostname":"node-7","hypervisor":"kvm","version":"1.4.2","started_at_unix_ns":1732867200123456789}"#;
        let m: HostMetadata = serde_json::from_str(go).unwrap();
        assert_eq!(m.host_uuid, "6b1f0c1e-3a52-4c47-9a37-0a4c5f1c2d3e");
        assert_eq!(m.started_at_unix_ns, 1_732_867_200_123_456_789);
        assert_eq!(serde_json::to_string(&m).unwrap(), go);
    }

    #[test]
    fn empty_version_is_omitted_and_unknown_fields_are_kept() {
        let go = r#"{"host_uuid":"h","hostname":"n","hypervisor":"","started_at_unix_ns":5,"rack":"r12","gpus":4}"#;
        let m: HostMetadata = serde_json::from_str(go).unwrap();
        assert_eq!(m.version, "");
        assert_eq!(m.extra.get("rack"), Some(&serde_json::json!("r12")));
        assert_eq!(serde_json::to_string(&m).unwrap(), go);
    }

    #[test]
    fn host_ids_are_validated_by_the_core_rules() {
        assert_eq!(validate_host_id("h-1.example_A"), Ok(()));
        assert_eq!(validate_host_id(""), Err(HostIdError::Empty));
        assert_eq!(validate_host_id("a/b"), Err(HostIdError::Slash));
        assert_eq!(validate_host_id("/"), Err(HostIdError::Slash));
        assert_eq!(validate_host_id(".."), Err(HostIdError::DotSegment));
        assert_eq!(validate_host_id("."), Err(HostIdError::DotSegment));
        assert_eq!(validate_host_id("a..b"), Err(HostIdError::DotSegment));
        assert_eq!(
            validate_host_id("a b"),
            Err(HostIdError::BadCharacter { at: 1 })
        );
        assert_eq!(
            validate_host_id("ab\u{7}"),
            Err(HostIdError::BadCharacter { at: 2 })
        );
        assert_eq!(
            validate_host_id("x\n"),
            Err(HostIdError::BadCharacter { at: 1 })
        );
        assert_eq!(
            validate_host_id(&"h".repeat(254)),
            Err(HostIdError::TooLong { len: 254 })
        );
        assert_eq!(validate_host_id(&"h".repeat(253)), Ok(()));
    }
}
