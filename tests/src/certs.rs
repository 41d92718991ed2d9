//! Throw-away certificates for TLS tests: a CA, etcd's server certificate
//! (for 127.0.0.1 and localhost), a client certificate, an expired one,
//! and a foreign CA with its own client certificate. Written as PEM files
//! into a temp dir that lives as long as the value.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Every file a TLS test needs.
#[derive(Debug)]
pub struct Certs {
    /// The CA that signs etcd's certificate and the good client ones.
    pub ca: PathBuf,
    /// etcd's server certificate.
    pub server: Pair,
    /// A client certificate the CA signed.
    pub client: Pair,
    /// A client certificate the CA signed that expired in 2021.
    pub expired: Pair,
    /// Another CA, which signed nothing etcd trusts.
    pub foreign_ca: PathBuf,
    /// A client certificate the foreign CA signed.
    pub foreign_client: Pair,
    dir: tempfile::TempDir,
}

impl Certs {
    /// Generates them all.
    pub fn generate() -> Certs {
        let dir = tempfile::Builder::new()
            .prefix("coord-certs-")
            .tempdir()
            .expect("temp dir");
        let (ca, ca_key) = authority("coord test CA");
        let (foreign, foreign_key) = authority("someone else's CA");
        let write = |name: &str, text: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write a PEM file");
            path
        };
        let ca_path = write("ca.pem", ca.pem());
        let foreign_path = write("foreign-ca.pem", foreign.pem());
        let leaf = |name: &str,
                    sans: Vec<String>,
                    usage: ExtendedKeyUsagePurpose,
                    expired: bool,
                    issuer: (&rcgen::Certificate, &KeyPair)| {
            let mut params = CertificateParams::new(sans).expect("params");
            params.distinguished_name.push(DnType::CommonName, name);
            params.extended_key_usages = vec![usage];
            if expired {
                params.not_before = rcgen::date_time_ymd(2020, 1, 1);
                params.not_after = rcgen::date_time_ymd(2021, 1, 1);
            }
            let key = KeyPair::generate().expect("key");
            let cert = params
                .signed_by(&key, issuer.0, issuer.1)
                .expect("sign a certificate");
            Pair {
                cert: write(&format!("{name}.pem"), cert.pem()),
                key: write(&format!("{name}-key.pem"), key.serialize_pem()),
            }
        };
        let local = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let server = leaf(
            "server",
            local.clone(),
            ExtendedKeyUsagePurpose::ServerAuth,
            false,
            (&ca, &ca_key),
        );
        let client = leaf(
            "client",
            vec!["client".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
            false,
            (&ca, &ca_key),
        );
        let expired = leaf(
            "expired",
            vec!["expired".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
            true,
            (&ca, &ca_key),
        );
        let foreign_client = leaf(
            "foreign-client",
            vec!["foreign".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
            false,
            (&foreign, &foreign_key),
        );
        Certs {
            ca: ca_path,
            server,
            client,
            expired,
            foreign_ca: foreign_path,
            foreign_client,
            dir,
        }
    }

    /// etcd serving TLS with the server certificate, asking clients for a
    /// certificate the CA signed; the harness presents the client one.
    pub fn server_tls(&self) -> crate::etcd::ServerTls {
        crate::etcd::ServerTls {
            cert: self.server.cert.clone(),
            key: self.server.key.clone(),
            ca: self.ca.clone(),
            client_cert_auth: true,
            client: Some((self.client.cert.clone(), self.client.key.clone())),
        }
    }

    /// What such an etcd must refuse: (why, the CA the client trusts, the
    /// client certificate it presents).
    pub fn refused(&self) -> [(&'static str, &Path, Option<&Pair>); 4] {
        [
            ("a wrong CA", &self.foreign_ca, Some(&self.client)),
            ("no client certificate", &self.ca, None),
            (
                "an expired client certificate",
                &self.ca,
                Some(&self.expired),
            ),
            (
                "a foreign client certificate",
                &self.ca,
                Some(&self.foreign_client),
            ),
        ]
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

fn authority(name: &str) -> (rcgen::Certificate, KeyPair) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("self-sign the CA");
    (cert, key)
}
