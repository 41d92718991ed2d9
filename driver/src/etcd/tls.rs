//! TLS to etcd: the CA that signs etcd's certificates and, when etcd asks
//! for one (`--client-cert-auth`), the client's certificate and key.

use std::path::Path;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::Error;

/// TLS settings of [`ConnectOptions::tls`](crate::ConnectOptions::tls).
///
/// Everything given is checked when it is set: a file that cannot be read,
/// or PEM that holds no certificate (or no private key), is refused with
/// [`Error::Tls`] before anything is dialled. Whether etcd accepts the
/// certificates is known only on the first request;
/// [`Client::check`](crate::Client::check) asks at once.
///
/// Without a CA, the system's roots are trusted. Endpoints given as
/// `http://` are dialled over TLS too when this is set (as `etcdctl` does
/// with `--cacert`).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct TlsOptions {
    ca: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
    domain: Option<String>,
    skip_verification: bool,
}

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the private key.
        f.debug_struct("TlsOptions")
            .field("ca", &self.ca.as_ref().map(|c| c.len()))
            .field("identity", &self.identity.is_some())
            .field("domain", &self.domain)
            .field("skip_verification", &self.skip_verification)
            .finish()
    }
}

impl TlsOptions {
    /// TLS trusting the system's roots, without a client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts only the CA certificates in `pem` (one or more PEM
    /// `CERTIFICATE` blocks). Fails with [`Error::Tls`] when `pem` holds
    /// none or one does not decode.
    pub fn with_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Result<Self, Error> {
        let pem = pem.into();
        certificates(&pem, "the CA")?;
        self.ca = Some(pem);
        Ok(self)
    }

    /// Presents the client certificate chain `cert_pem` with its private
    /// key `key_pem`. Fails with [`Error::Tls`] when the chain holds no
    /// certificate or the key no private key.
    pub fn with_identity_pem(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Result<Self, Error> {
        let (cert, key) = (cert_pem.into(), key_pem.into());
        certificates(&cert, "the client certificate")?;
        PrivateKeyDer::from_pem_slice(&key).map_err(|e| {
            Error::Tls(crate::Cause::described(
                format!("the client key holds no usable private key: {e}"),
                e,
            ))
        })?;
        self.identity = Some((cert, key));
        Ok(self)
    }

    /// The name to check etcd's certificate against, when it is not the
    /// endpoint's host.
    pub fn with_domain_name(mut self, domain: impl Into<String>) -> Self {
        self.domain = Some(domain.into());
        self
    }

    /// Accepts any certificate etcd presents, as `etcdctl
    /// --insecure-skip-tls-verify` does: the connection is encrypted, but
    /// to whoever answers. For tests and throw-away clusters only. The CA
    /// is then unused; a client certificate is still presented.
    pub fn with_insecure_skip_verify(mut self) -> Self {
        self.skip_verification = true;
        self
    }

    /// Whether etcd's certificate goes unverified.
    pub(crate) fn skips_verification(&self) -> bool {
        self.skip_verification
    }

    /// The client certificate chain and key, decoded.
    pub(crate) fn identity_der(
        &self,
    ) -> Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>, Error> {
        let Some((cert, key)) = &self.identity else {
            return Ok(None);
        };
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                Error::Tls(crate::Cause::described(
                    format!("the client certificate does not decode: {e}"),
                    e,
                ))
            })?;
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| {
            Error::Tls(crate::Cause::described(
                format!("the client key holds no usable private key: {e}"),
                e,
            ))
        })?;
        Ok(Some((chain, key)))
    }

    /// Reads the CA and the client certificate and key from PEM files, as
    /// `etcdctl --cacert --cert --key` does. `cert` and `key` go together.
    /// Fails with [`Error::Tls`] naming the file that cannot be read or
    /// does not hold what it should.
    pub fn from_files(
        ca: Option<&Path>,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<Self, Error> {
        let mut tls = TlsOptions::new();
        if let Some(ca) = ca {
            tls = tls.with_ca_pem(read(ca)?).map_err(|e| in_file(e, ca))?;
        }
        match (cert, key) {
            (Some(cert), Some(key)) => {
                let (c, k) = (read(cert)?, read(key)?);
                tls = tls.with_identity_pem(c, k).map_err(|e| in_file(e, cert))?;
            }
            (None, None) => {}
            (Some(_), None) => {
                return Err(Error::Tls(crate::Cause::msg(
                    "a client certificate needs its key",
                )))
            }
            (None, Some(_)) => {
                return Err(Error::Tls(crate::Cause::msg(
                    "a client key needs its certificate",
                )))
            }
        }
        Ok(tls)
    }

    /// etcd-client's settings.
    pub(crate) fn to_etcd(&self) -> etcd_client::TlsOptions {
        let mut tls = etcd_client::TlsOptions::new();
        match &self.ca {
            Some(ca) => tls = tls.ca_certificate(etcd_client::Certificate::from_pem(ca)),
            None => tls = tls.with_native_roots(),
        }
        if let Some((cert, key)) = &self.identity {
            tls = tls.identity(etcd_client::Identity::from_pem(cert, key));
        }
        if let Some(domain) = &self.domain {
            tls = tls.domain_name(domain.clone());
        }
        tls
    }
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| {
        Error::Tls(crate::Cause::described(
            format!("cannot read {}: {e}", path.display()),
            e,
        ))
    })
}

fn in_file(e: Error, path: &Path) -> Error {
    match e {
        Error::Tls(m) => Error::Tls(m.context(path.display())),
        other => other,
    }
}

/// Checks that `pem` holds at least one certificate, each decodable.
fn certificates(pem: &[u8], what: &str) -> Result<(), Error> {
    let mut n = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        cert.map_err(|e| {
            Error::Tls(crate::Cause::described(
                format!("{what} does not decode: {e}"),
                e,
            ))
        })?;
        n += 1;
    }
    if n == 0 {
        return Err(Error::Tls(crate::Cause::msg(format!(
            "{what} holds no PEM certificate"
        ))));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_without_a_certificate_is_refused() {
        assert!(matches!(
            TlsOptions::new().with_ca_pem(b"not pem".to_vec()),
            Err(Error::Tls(m)) if m.text().contains("no PEM certificate")
        ));
        assert!(matches!(
            TlsOptions::new().with_ca_pem(
                b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n".to_vec()
            ),
            Err(Error::Tls(m)) if m.text().contains("does not decode")
        ));
    }

    #[test]
    fn a_certificate_needs_its_key_and_files_are_named() {
        let missing = Path::new("/nonexistent/ca.pem");
        assert!(matches!(
            TlsOptions::from_files(Some(missing), None, None),
            Err(Error::Tls(m)) if m.text().contains("/nonexistent/ca.pem")
        ));
        assert!(matches!(
            TlsOptions::from_files(None, Some(missing), None),
            Err(Error::Tls(m)) if m.text().contains("needs its key")
        ));
        assert!(matches!(
            TlsOptions::from_files(None, None, Some(missing)),
            Err(Error::Tls(m)) if m.text().contains("needs its certificate")
        ));
    }

    #[test]
    fn debug_never_shows_the_key() {
        let tls = TlsOptions {
            identity: Some((b"cert".to_vec(), b"SECRET".to_vec())),
            ..TlsOptions::default()
        };
        assert!(!format!("{tls:?}").contains("SECRET"));
    }
}
