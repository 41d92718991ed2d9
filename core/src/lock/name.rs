//! Lock names: one rule for every backend, the strictest of them (a name
//! becomes a file name with a suffix, an etcd key, a Redis key).

/// Longest lock name accepted, in bytes: room for the backends' suffixes
/// (`.lock`, `.token`, `.slot-N`) under the 255-byte file name limit.
pub const MAX_LOCK_NAME_LEN: usize = 200;

/// Why a lock name was refused. Nothing is written for a refused name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LockNameError {
    /// The name is empty.
    #[error("lock name is empty")]
    Empty,
    /// Longer than [`MAX_LOCK_NAME_LEN`] bytes.
    #[error("lock name is {len} bytes long, more than {MAX_LOCK_NAME_LEN}")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// Contains `/` (a path separator, a key nesting).
    #[error("lock name contains '/'")]
    Slash,
    /// Starts with `.` (hidden files, `.`, `..`, and the backends' own
    /// temporary files).
    #[error("lock name starts with '.'")]
    LeadingDot,
    /// Contains whitespace or a control character.
    #[error("lock name contains whitespace or a control character at byte {at}")]
    BadCharacter {
        /// Byte offset of the first offending character.
        at: usize,
    },
}

/// Checks that `name` is a safe lock name for every backend.
pub fn validate_lock_name(name: &str) -> Result<(), LockNameError> {
    if name.is_empty() {
        return Err(LockNameError::Empty);
    }
    if name.len() > MAX_LOCK_NAME_LEN {
        return Err(LockNameError::TooLong { len: name.len() });
    }
    if name.contains('/') {
        return Err(LockNameError::Slash);
    }
    if name.starts_with('.') {
        return Err(LockNameError::LeadingDot);
    }
    if let Some(at) = crate::host_id::first_bad_character(name) {
        return Err(LockNameError::BadCharacter { at });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_for_every_backend() {
        for good in [
            "a",
            "jobs-nightly",
            "db:primary",
            "x.y",
            "ünïcode",
            &"n".repeat(200),
        ] {
            assert_eq!(validate_lock_name(good), Ok(()), "{good:?}");
        }
        assert_eq!(validate_lock_name(""), Err(LockNameError::Empty));
        assert_eq!(
            validate_lock_name(&"n".repeat(201)),
            Err(LockNameError::TooLong { len: 201 })
        );
        assert_eq!(validate_lock_name("a/b"), Err(LockNameError::Slash));
        assert_eq!(validate_lock_name("/"), Err(LockNameError::Slash));
        for dot in [".", "..", ".hidden"] {
            assert_eq!(validate_lock_name(dot), Err(LockNameError::LeadingDot));
        }
        assert_eq!(
            validate_lock_name("a b"),
            Err(LockNameError::BadCharacter { at: 1 })
        );
        assert_eq!(
            validate_lock_name("ab\u{7}"),
            Err(LockNameError::BadCharacter { at: 2 })
        );
    }
}
