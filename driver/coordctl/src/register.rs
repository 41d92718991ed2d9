//! `coordctl register`: a host's liveness until SIGINT or SIGTERM.

use std::time::Duration;

use coord::{
    validate_host_id, Error, HostLiveness, HostMetadata, LivenessEvent, LivenessOptions,
    RevokeOutcome,
};
use tokio::sync::broadcast::error::RecvError;

use crate::cli::{Global, Register};
use crate::exit::Failure;
use crate::output::{Printer, Record};
use crate::setup::{self, Signals};

/// Registers, prints every liveness change, and on SIGINT/SIGTERM stops
/// (revokes: the key is gone at once). A revoke etcd did not confirm
/// exits 2 (the key then expires within one TTL).
pub async fn run(
    global: &Global,
    args: &Register,
    signals: &mut Signals,
    printer: Printer,
) -> Result<(), Failure> {
    validate_host_id(&args.id).map_err(Error::from)?;
    let hostname = match &args.hostname {
        Some(h) => h.clone(),
        None => nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    let meta = HostMetadata {
        hypervisor: args.hypervisor.clone(),
        version: args.agent_version.clone(),
        ..HostMetadata::new(args.id.clone(), hostname)
    };
    let options = LivenessOptions::default()
        .with_prefix(global.prefix.clone())
        .with_ttl(Duration::from_secs(args.ttl))
        .with_request_timeout(global.command_timeout);
    options.validate()?;
    let client = setup::connect(global).await?;
    // Not raced against the signals: a registration dropped half-way
    // would leave its lease to expire. It is bounded by the request
    // timeout; a signal that came meanwhile stops the host at once below.
    let host = HostLiveness::register(client, meta, options).await?;
    let mut events = host.subscribe();
    printer.event(
        &Record::new("registered")
            .with("key", host.key())
            .with("lease", host.lease_id().map(|l| l.to_string())),
    );
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Ok(event) => printer.event(&liveness_record(&event)),
                Err(RecvError::Lagged(n)) => {
                    printer.event(&Record::new("missed").with("events", n));
                }
                Err(RecvError::Closed) => break,
            },
            _ = signals.next() => break,
        }
    }
    let stopped = host.stop().await;
    printer.event(&Record::new("stopped").with("revoked", stopped.is_ok()));
    stopped.map_err(Failure::from)
}

/// One liveness event as a record.
pub fn liveness_record(event: &LivenessEvent) -> Record {
    match event {
        LivenessEvent::Registered { lease, ttl } => Record::new("registered")
            .with("lease", lease.to_string())
            .with("ttl_s", ttl.as_secs()),
        LivenessEvent::KeepAliveInterrupted { lease, failure } => {
            Record::new("keepalive-interrupted")
                .with("lease", lease.to_string())
                .with("failure", failure.to_string())
        }
        LivenessEvent::Lost { lease, reason } => Record::new("lost")
            .with("lease", lease.to_string())
            .with("reason", reason.to_string()),
        LivenessEvent::Retrying(retry) => Record::new("retrying")
            .with("attempt", retry.attempt)
            .with("failure", retry.failure.as_ref().map(|f| f.to_string())),
        LivenessEvent::Reregistered { lease, resumed } => Record::new("reregistered")
            .with("lease", lease.to_string())
            .with("resumed", *resumed),
        LivenessEvent::StartFailed { reason } => {
            Record::new("start-failed").with("reason", reason.to_string())
        }
        LivenessEvent::Closed { revoke } => Record::new("closed").with(
            "revoke",
            match revoke {
                RevokeOutcome::NothingToRevoke => "nothing to revoke".to_string(),
                RevokeOutcome::Revoked(l) => format!("revoked {l}"),
                RevokeOutcome::NotConfirmed(l) => format!("not confirmed for {l}"),
                other => format!("{other:?}"),
            },
        ),
    }
}
