//! Host ids: the last segment of a host's key under the prefix.

/// Longest host id accepted, in bytes (a DNS name's limit).
pub const MAX_HOST_ID_LEN: usize = 253;

/// Why a host id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostIdError {
    /// The id is empty.
    #[error("host id is empty")]
    Empty,
    /// Longer than [`MAX_HOST_ID_LEN`] bytes.
    #[error("host id is {len} bytes long, more than {MAX_HOST_ID_LEN}")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// Contains `/`, which would nest the key under the prefix.
    #[error("host id contains '/'")]
    Slash,
    /// Is `.` or contains `..`, which path-joining code would resolve out
    /// of the prefix.
    #[error("host id is '.' or contains '..'")]
    DotSegment,
    /// Contains whitespace or a control character.
    #[error("host id contains whitespace or a control character at byte {at}")]
    BadCharacter {
        /// Byte offset of the first offending character.
        at: usize,
    },
}

/// Checks that `id` is safe as the last segment of a key under a prefix.
pub fn validate_host_id(id: &str) -> Result<(), HostIdError> {
    if id.is_empty() {
        return Err(HostIdError::Empty);
    }
    if id.len() > MAX_HOST_ID_LEN {
        return Err(HostIdError::TooLong { len: id.len() });
    }
    if id.contains('/') {
        return Err(HostIdError::Slash);
    }
    if id == "." || id.contains("..") {
        return Err(HostIdError::DotSegment);
    }
    if let Some(at) = first_bad_character(id) {
        return Err(HostIdError::BadCharacter { at });
    }
    Ok(())
}

/// The byte offset of the first whitespace or control character in `s`.
pub(crate) fn first_bad_character(s: &str) -> Option<usize> {
    s.char_indices()
        .find(|(_, c)| c.is_whitespace() || c.is_control())
        .map(|(at, _)| at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_up_to_the_length_limit_are_allowed_and_unsafe_ones_refused() {
        let longest = "h".repeat(MAX_HOST_ID_LEN);
        assert_eq!(validate_host_id(&longest), Ok(()));
        let over = "h".repeat(MAX_HOST_ID_LEN + 1);
        assert_eq!(
            validate_host_id(&over),
            Err(HostIdError::TooLong {
                len: MAX_HOST_ID_LEN + 1
            })
        );
        assert_eq!(validate_host_id(""), Err(HostIdError::Empty));
        assert_eq!(validate_host_id("a/b"), Err(HostIdError::Slash));
        for dots in [".", "..", "a..b", "..a"] {
            assert_eq!(
                validate_host_id(dots),
                Err(HostIdError::DotSegment),
                "{dots}"
            );
        }
        assert_eq!(
            validate_host_id("ab\tc"),
            Err(HostIdError::BadCharacter { at: 2 })
        );
        for fine in ["h1", "a.b", ".a", "a.", "host-7.example.com"] {
            assert_eq!(validate_host_id(fine), Ok(()), "{fine}");
        }
    }
}
