//! `Cause`: the error underneath a coord error, kept as its `source()`.

use std::error::Error as StdError;
use std::sync::Arc;

/// The failure underneath an [`Error`](crate::Error) or a
/// [`LockError`](crate::lock::LockError): what etcd-client, the TLS stack,
/// the file system, Redis or Postgres reported, or coord's own account
/// where coord found the fault itself.
///
/// It is the variant's [`source()`](std::error::Error::source), and its own
/// `source()` is the error it wraps, if any, so a reporter that walks the
/// chain (anyhow, eyre, tracing) shows every layer. [`downcast_ref`] reaches
/// the wrapped error's type. Two causes compare equal when their texts do,
/// so errors stay comparable in tests; a cause is cheap to clone.
///
/// [`downcast_ref`]: Cause::downcast_ref
#[derive(Clone)]
pub struct Cause {
    text: String,
    error: Option<Arc<dyn StdError + Send + Sync + 'static>>,
}

impl Cause {
    /// `error`, described by its own `Display`.
    pub fn new(error: impl StdError + Send + Sync + 'static) -> Cause {
        Cause {
            text: error.to_string(),
            error: Some(Arc::new(error)),
        }
    }

    /// `error`, described by `text` (which may say more: the layers under
    /// it, what coord was doing).
    pub fn described(
        text: impl Into<String>,
        error: impl StdError + Send + Sync + 'static,
    ) -> Cause {
        Cause {
            text: text.into(),
            error: Some(Arc::new(error)),
        }
    }

    /// A fault coord found itself, with no error underneath.
    pub fn msg(text: impl Into<String>) -> Cause {
        Cause {
            text: text.into(),
            error: None,
        }
    }

    /// The same cause, its text prefixed by `what` (`what: text`).
    #[cfg_attr(madsim, allow(dead_code))] // Used by TLS and the client, not simulated.
    pub(crate) fn context(self, what: impl std::fmt::Display) -> Cause {
        Cause {
            text: format!("{what}: {}", self.text),
            error: self.error,
        }
    }

    /// The full text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The wrapped error, if it is an `E`.
    pub fn downcast_ref<E: StdError + 'static>(&self) -> Option<&E> {
        self.error.as_deref()?.downcast_ref::<E>()
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::fmt::Debug for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cause(")?;
        std::fmt::Debug::fmt(&self.text, f)?;
        f.write_str(")")
    }
}

impl StdError for Cause {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.error
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Cause) -> bool {
        self.text == other.text
    }
}

impl Eq for Cause {}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("inner")]
    struct Inner;

    #[test]
    fn a_cause_keeps_the_error_it_wraps_as_its_source() {
        let cause = Cause::described("connecting: inner", Inner);
        assert_eq!(cause.to_string(), "connecting: inner");
        assert!(cause.downcast_ref::<Inner>().is_some());
        let source = cause.source().map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("inner"));
        assert_eq!(Cause::new(Inner).text(), "inner");
        // A fault coord found itself has nothing underneath.
        let own = Cause::msg("no endpoints given");
        assert!(own.source().is_none());
        assert!(own.downcast_ref::<Inner>().is_none());
        // Equal by text, whatever is underneath.
        assert_eq!(Cause::msg("inner"), Cause::new(Inner));
        assert_ne!(Cause::msg("other"), Cause::new(Inner));
    }

    #[test]
    fn a_cause_debugs_as_its_quoted_text() {
        assert_eq!(
            format!("{:?}", Cause::described("said \"no\"", Inner)),
            r#"Cause("said \"no\"")"#
        );
    }
}
