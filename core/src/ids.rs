//! Newtypes for the identifiers coord passes between the core and the driver.

/// Identifies one command the core issued. Completions carry it back; a
/// completion whose `OpId` the machine no longer waits for is stale and is
/// ignored. Ids are unique per machine and increase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct OpId(pub u64);

impl std::fmt::Display for OpId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "op#{}", self.0)
    }
}

/// An etcd lease id. Displayed in lowercase hex, as etcd and the Go
/// `concurrency` package print it (and as election keys spell it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct LeaseId(pub i64);

impl std::fmt::Display for LeaseId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// An etcd revision (the cluster-wide MVCC counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Revision(pub i64);

/// The id of an etcd cluster, from response headers (0: not known). A
/// cluster replaced by another (or restored elsewhere) answers with a
/// different id; a wiped member restarted with the same flags keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct ClusterId(pub u64);

impl ClusterId {
    /// True when a header named the cluster.
    pub fn is_known(self) -> bool {
        self.0 != 0
    }
}

impl std::fmt::Display for ClusterId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// A fencing token: the create revision of a lock holder's or leader's key.
/// Strictly increasing across successive holders of one lock or election.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct FencingToken(pub i64);

/// An etcd key, as raw bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Key(pub Vec<u8>);

impl Key {
    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl From<&str> for Key {
    fn from(key: &str) -> Key {
        Key(key.as_bytes().to_vec())
    }
}

impl From<String> for Key {
    fn from(key: String) -> Key {
        Key(key.into_bytes())
    }
}

impl From<&String> for Key {
    fn from(key: &String) -> Key {
        Key(key.as_bytes().to_vec())
    }
}

impl From<&[u8]> for Key {
    fn from(key: &[u8]) -> Key {
        Key(key.to_vec())
    }
}

impl From<Vec<u8>> for Key {
    fn from(key: Vec<u8>) -> Key {
        Key(key)
    }
}

impl From<&Key> for Key {
    fn from(key: &Key) -> Key {
        key.clone()
    }
}

impl AsRef<[u8]> for Key {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", String::from_utf8_lossy(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_display_as_etcd_and_the_logs_spell_them() {
        assert_eq!(OpId(42).to_string(), "op#42");
        assert_eq!(LeaseId(0x694d_7a1b_2c3d).to_string(), "694d7a1b2c3d");
        assert_eq!(ClusterId(0xcdf8_18194e3a).to_string(), "cdf818194e3a");
        assert_eq!(
            Key(b"/coord/hosts/h1".to_vec()).to_string(),
            "/coord/hosts/h1"
        );
        assert_eq!(Key(vec![b'a', 0xff]).to_string(), "a\u{fffd}");
    }

    #[test]
    fn keys_convert_from_strings_and_bytes_unchanged() {
        let want = Key(b"/jobs/owner".to_vec());
        assert_eq!(Key::from("/jobs/owner"), want);
        assert_eq!(Key::from(String::from("/jobs/owner")), want);
        assert_eq!(Key::from(&String::from("/jobs/owner")), want);
        assert_eq!(Key::from(&b"/jobs/owner"[..]), want);
        assert_eq!(Key::from(b"/jobs/owner".to_vec()), want);
        assert_eq!(Key::from(&want), want);
        assert_eq!(want.as_ref(), b"/jobs/owner");
        // Bytes that are not UTF-8 stay as they are.
        assert_eq!(Key::from(&[0xff, 0x00][..]).as_bytes(), &[0xff, 0x00]);
    }
}
