//! Election and lock names: the checks every constructor makes, and the
//! key prefix of a name's queue (`name/`, as etcd's Go `concurrency`
//! package has it).

use coord_core::Key;

use crate::error::Error;
use crate::metadata::MAX_METADATA_LEN;

/// Checks an election or lock name and returns its key prefix (`name/`).
/// Refused: empty, ending with `/` (the queue would nest), or holding a
/// control character.
pub(crate) fn queue_prefix(name: &str) -> Result<Key, Error> {
    let why = if name.is_empty() {
        Some("it is empty")
    } else if name.ends_with('/') {
        Some("it ends with '/'")
    } else if name.chars().any(char::is_control) {
        Some("it contains a control character")
    } else if name.len() > 4096 {
        Some("it is longer than 4096 bytes")
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::InvalidName {
            name: name.to_string(),
            why,
        }),
        None => Ok(Key(format!("{name}/").into_bytes())),
    }
}

/// Checks an election or lock name as every constructor does, without
/// anything else: `Error::InvalidName` when it is empty, ends with `/`,
/// holds a control character or is longer than 4,096 bytes.
pub fn validate_name(name: &str) -> Result<(), Error> {
    queue_prefix(name).map(|_| ())
}

/// Checks an election value (or a proclaimed one) as every campaign does:
/// `Error::ValueTooLarge` above [`MAX_METADATA_LEN`]
/// bytes (etcd refuses requests over 1.5 MiB by default).
pub fn validate_value(value: &[u8]) -> Result<(), Error> {
    if value.len() > MAX_METADATA_LEN {
        return Err(Error::ValueTooLarge {
            size: value.len(),
            max: MAX_METADATA_LEN,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why(name: &str) -> Option<&'static str> {
        match queue_prefix(name) {
            Ok(_) => None,
            Err(Error::InvalidName { why, .. }) => Some(why),
            Err(other) => panic!("{name:?}: {other}"),
        }
    }

    #[test]
    fn names_are_checked_before_anything_is_written() {
        assert!(matches!(queue_prefix("jobs"), Ok(Key(k)) if k == b"jobs/"));
        assert_eq!(why(""), Some("it is empty"));
        assert_eq!(why("a/"), Some("it ends with '/'"));
        assert_eq!(why("a\nb"), Some("it contains a control character"));
        // Nested names are fine; the queue lives under `name/`.
        assert_eq!(why("team/jobs"), None);
        assert_eq!(why(&"n".repeat(4096)), None);
        assert_eq!(why(&"n".repeat(4097)), Some("it is longer than 4096 bytes"));
    }

    #[test]
    fn validate_name_refuses_what_the_constructors_refuse() {
        assert!(validate_name("team/jobs").is_ok());
        for bad in ["", "jobs/", "a\u{0}b"] {
            assert!(
                matches!(validate_name(bad), Err(Error::InvalidName { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn values_up_to_the_metadata_limit_are_taken() {
        assert!(validate_value(&vec![b'x'; MAX_METADATA_LEN]).is_ok());
        assert!(validate_value(b"").is_ok());
        assert!(matches!(
            validate_value(&vec![b'x'; MAX_METADATA_LEN + 1]),
            Err(Error::ValueTooLarge { size, max })
                if size == MAX_METADATA_LEN + 1 && max == MAX_METADATA_LEN
        ));
    }
}
