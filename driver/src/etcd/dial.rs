//! Dialling etcd-client clients: etcd-client's own TLS, or, when asked to
//! skip verifying etcd's certificate, TLS done here with a verifier that
//! accepts any certificate (etcd-client cannot do that by itself).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::tls::TlsOptions;
use crate::error::Error;

/// How a member (or every endpoint) is dialled.
#[derive(Clone)]
pub(crate) struct Dialer {
    options: etcd_client::ConnectOptions,
    connect_timeout: std::time::Duration,
    /// `Some`: TLS without verifying etcd's certificate.
    insecure: Option<Arc<rustls::ClientConfig>>,
}

impl Dialer {
    /// A dialer for `options`; with `tls` asking to skip verification, its
    /// own TLS (the client certificate, if any, still presented).
    pub(crate) fn new(
        options: etcd_client::ConnectOptions,
        connect_timeout: std::time::Duration,
        tls: Option<&TlsOptions>,
    ) -> Result<Self, Error> {
        let insecure = match tls {
            Some(tls) if tls.skips_verification() => Some(Arc::new(insecure_config(tls)?)),
            _ => None,
        };
        Ok(Dialer {
            options,
            connect_timeout,
            insecure,
        })
    }

    /// How long a dial may take: twice the connect timeout (the
    /// connection, then, with a user set, authentication's round trip).
    pub(crate) fn dial_bound(&self) -> std::time::Duration {
        self.connect_timeout * 2
    }

    /// A client to `endpoints` (when skipping verification: to the first
    /// of them; coord's handles move between members themselves). With a
    /// user set, the dial authenticates, within twice the connect timeout
    /// (the connection, then the round trip; an etcd that takes the
    /// connection and never answers fails as `etcd_client::Error::IoError`
    /// of kind `TimedOut`); without one, it is lazy and cannot fail on an
    /// unreachable etcd.
    pub(crate) async fn dial(
        &self,
        endpoints: &[String],
    ) -> Result<etcd_client::Client, etcd_client::Error> {
        let bound = self.dial_bound();
        tokio::time::timeout(bound, self.dial_unbounded(endpoints))
            .await
            .unwrap_or_else(|_| {
                Err(etcd_client::Error::IoError(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {bound:?}"),
                )))
            })
    }

    async fn dial_unbounded(
        &self,
        endpoints: &[String],
    ) -> Result<etcd_client::Client, etcd_client::Error> {
        let Some(config) = &self.insecure else {
            return etcd_client::Client::connect(endpoints, Some(self.options.clone())).await;
        };
        let endpoint = endpoints
            .first()
            .ok_or_else(|| etcd_client::Error::InvalidArgs("no endpoints given".into()))?;
        let authority = endpoint
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let connector = tls_connector(Arc::clone(config));
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{authority}"))
            .map_err(|e| etcd_client::Error::InvalidArgs(e.to_string()))?
            .connect_timeout(self.connect_timeout)
            .connect_with_connector_lazy(connector);
        etcd_client::Client::from_channel(
            etcd_client::Channel::Tonic(channel),
            Some(self.options.clone()),
        )
        .await
    }
}

/// TCP, then TLS with `config`, for tonic.
fn tls_connector(
    config: Arc<rustls::ClientConfig>,
) -> impl tower::Service<
    http::Uri,
    Response = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
    Error = std::io::Error,
    Future = impl Send,
> + Clone
       + Send
       + 'static {
    tower::service_fn(move |uri: http::Uri| {
        let config = Arc::clone(&config);
        async move {
            let invalid =
                |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, m.to_string());
            let host = uri
                .host()
                .ok_or_else(|| invalid("an endpoint without a host"))?;
            let host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let port = uri.port_u16().unwrap_or(2379);
            let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
            let name = ServerName::try_from(host).map_err(|e| invalid(&e.to_string()))?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await?;
            Ok(hyper_util::rt::TokioIo::new(tls))
        }
    })
}

/// rustls settings that accept any server certificate, offer HTTP/2, and
/// present the client certificate of `tls` if it has one.
fn insecure_config(tls: &TlsOptions) -> Result<rustls::ClientConfig, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(crate::Cause::new(e)))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)));
    let mut config = match tls.identity_der()? {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).map_err(|e| {
            Error::Tls(crate::Cause::described(
                format!("the client certificate: {e}"),
                e,
            ))
        })?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// Accepts any server certificate; still checks the handshake's
/// signatures, so the connection is encrypted to whoever answered.
#[derive(Debug)]
struct AcceptAny(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
