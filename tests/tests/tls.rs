//! `coord::connect` with TLS and with etcd's authentication, against real
//! etcd servers: it works with the right certificates and credentials, and
//! anything wrong is a typed error within the deadline, never a hang.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use coord::{ConnectOptions, Error, HostLiveness, HostMetadata, LivenessOptions, TlsOptions};
use coord_tests::certs::{Certs, Pair};
use coord_tests::etcd::EtcdCluster;

/// Generous on a loaded 2-core machine.
const DEADLINE: Duration = Duration::from_secs(10);

fn options(ca: &std::path::Path, client: Option<&Pair>) -> ConnectOptions {
    let tls = TlsOptions::from_files(
        Some(ca),
        client.map(|p| p.cert.as_path()),
        client.map(|p| p.key.as_path()),
    )
    .expect("the test's certificates load");
    ConnectOptions::default().with_tls(tls)
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_with_client_certificates_registers_and_refuses_what_etcd_does_not_trust() {
    let certs = Certs::generate();
    let etcd = EtcdCluster::single_tls(certs.server_tls()).await;
    let eps = etcd.endpoints();

    let client = coord::connect(&eps, options(&certs.ca, Some(&certs.client)))
        .await
        .unwrap();
    client.check(DEADLINE).await.unwrap();
    let host = HostLiveness::register(
        client,
        HostMetadata::new("tls-host", "node-1"),
        LivenessOptions::default(),
    )
    .await
    .unwrap();
    assert!(host.lease_id().is_some());
    host.stop().await.unwrap();

    for (what, ca, pair) in certs.refused() {
        let client = coord::connect(&eps, options(ca, pair)).await.unwrap();
        let checked = tokio::time::timeout(2 * DEADLINE, client.check(DEADLINE))
            .await
            .unwrap_or_else(|_| panic!("{what}: check hung"));
        assert!(matches!(checked, Err(Error::Tls(_))), "{what}: {checked:?}");
    }

    // Without verification a wrong CA goes (the client certificate is
    // still presented), as with `etcdctl --insecure-skip-tls-verify`.
    let unverified = ConnectOptions::default().with_tls(
        TlsOptions::from_files(
            Some(&certs.foreign_ca),
            Some(&certs.client.cert),
            Some(&certs.client.key),
        )
        .unwrap()
        .with_insecure_skip_verify(),
    );
    let client = coord::connect(&eps, unverified).await.unwrap();
    client.check(DEADLINE).await.unwrap();
    let host = HostLiveness::register(
        client,
        HostMetadata::new("unverified-host", "node-2"),
        LivenessOptions::default(),
    )
    .await
    .unwrap();
    host.stop().await.unwrap();

    // Plain text to a TLS-only etcd: unreachable, not a hang.
    let plain: Vec<String> = eps
        .iter()
        .map(|e| e.replace("https://", "http://"))
        .collect();
    let client = coord::connect(&plain, ConnectOptions::default())
        .await
        .unwrap();
    let checked = client.check(DEADLINE).await;
    assert!(
        matches!(checked, Err(Error::Unreachable(_) | Error::Tls(_))),
        "{checked:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_password_is_an_auth_error_and_the_right_one_works() {
    let etcd = EtcdCluster::single().await;
    let eps = etcd.endpoints();
    etcd.enable_auth("s3cret").await;
    let with = |password: &str| ConnectOptions::default().with_user("root", password);
    let wrong = coord::connect(&eps, with("wrong")).await;
    assert!(matches!(wrong, Err(Error::Auth(_))), "{wrong:?}");
    assert!(
        !format!("{:?}", with("wrong")).contains("wrong"),
        "Debug never shows the password"
    );

    let client = coord::connect(&eps, with("s3cret")).await.unwrap();
    client.check(DEADLINE).await.unwrap();
    let host = HostLiveness::register(
        client,
        HostMetadata::new("authed-host", "node-1"),
        LivenessOptions::default(),
    )
    .await
    .unwrap();
    host.stop().await.unwrap();

    // Without credentials etcd refuses the write: a typed error, nothing
    // registered.
    let anonymous = coord::connect(&eps, ConnectOptions::default())
        .await
        .unwrap();
    let refused = HostLiveness::register(
        anonymous,
        HostMetadata::new("anonymous", "node-2"),
        LivenessOptions::default(),
    )
    .await;
    assert!(refused.is_err(), "{refused:?}");
}
