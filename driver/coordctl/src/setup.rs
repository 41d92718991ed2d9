//! What every subcommand needs first: the client (TLS and credentials
//! from the global flags, checked against etcd at once), and the signals
//! that end a command.

use std::time::Duration;

use coord::{ConnectOptions, Error, TlsOptions};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::cli::Global;
use crate::exit::Failure;

/// The connect options the global flags ask for. Certificates are loaded
/// and the password prompted for here; a problem with either is bad input
/// (nothing is dialled).
pub fn connect_options(global: &Global) -> Result<ConnectOptions, Failure> {
    if global.endpoints.iter().all(|e| e.trim().is_empty()) {
        return Err(Failure::Usage("--endpoints is empty".into()));
    }
    let wants_tls = global.insecure_skip_tls_verify
        || global.cacert.is_some()
        || global.cert.is_some()
        || global.key.is_some()
        || global.endpoints.iter().any(|e| e.starts_with("https://"));
    let tls = if wants_tls {
        let tls = TlsOptions::from_files(
            global.cacert.as_deref(),
            global.cert.as_deref(),
            global.key.as_deref(),
        )
        .map_err(|e| Failure::Usage(e.to_string()))?;
        Some(if global.insecure_skip_tls_verify {
            tls.with_insecure_skip_verify()
        } else {
            tls
        })
    } else {
        None
    };
    let user = match &global.user {
        None => None,
        Some(spec) => Some(credentials(spec, global.password.as_deref())?),
    };
    let mut options = ConnectOptions::default().with_connect_timeout(global.dial_timeout);
    if let Some((name, password)) = user {
        options = options.with_user(name, password);
    }
    if let Some(tls) = tls {
        options = options.with_tls(tls);
    }
    Ok(options)
}

/// `name[:password]`, the password otherwise from `--password` or the
/// terminal (not echoed).
fn credentials(spec: &str, password: Option<&str>) -> Result<(String, String), Failure> {
    let (name, inline) = match spec.split_once(':') {
        Some((name, password)) => (name, Some(password)),
        None => (spec, None),
    };
    if name.is_empty() {
        return Err(Failure::Usage("--user has an empty name".into()));
    }
    let password = match inline.or(password) {
        Some(p) => p.to_string(),
        None => rpassword::prompt_password(format!("Password for {name}: "))
            .map_err(|e| Failure::Usage(format!("cannot read the password: {e}")))?,
    };
    Ok((name.to_string(), password))
}

/// Connects and asks etcd once, within the dial timeout: a refused or
/// silent etcd, a TLS failure or refused credentials end the command here
/// (exit 2), before anything is written.
pub async fn connect(global: &Global) -> Result<coord::Client, Failure> {
    let options = connect_options(global)?;
    let dial = global.dial_timeout;
    let client = tokio::time::timeout(dial, coord::connect(&endpoints(global), options))
        .await
        .map_err(|_| no_answer(dial))??;
    client.check(dial).await?;
    Ok(client)
}

/// The `--endpoints` given, trimmed, empty ones left out.
pub fn endpoints(global: &Global) -> Vec<&str> {
    global
        .endpoints
        .iter()
        .map(|e| e.trim())
        .filter(|e| !e.is_empty())
        .collect()
}

/// etcd left a request unanswered for `within`.
pub fn no_answer(within: Duration) -> Error {
    Error::Unreachable(coord::Cause::msg(format!("no answer within {within:?}")))
}

/// The answer to an etcd-client `request`, within `within`: no answer in
/// time, or a failed request, is `Error::Unreachable`.
pub async fn answer<T, E>(
    within: Duration,
    request: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, Error>
where
    E: std::error::Error + Send + Sync + 'static,
{
    tokio::time::timeout(within, request)
        .await
        .map_err(|_| no_answer(within))?
        .map_err(|e| Error::Unreachable(coord::Cause::new(e)))
}

/// SIGINT, SIGTERM and SIGHUP, caught from the start so that none kills
/// coordctl before it has cleaned up; and a closed stdout, which ends a
/// subcommand the same way.
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    /// Catches SIGINT, SIGTERM and SIGHUP from now on, and watches stdout.
    pub fn catch() -> Result<Self, Failure> {
        let install =
            |kind| signal(kind).map_err(|e| Failure::Usage(format!("cannot catch signals: {e}")));
        let signals = Signals {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
            hangup: install(SignalKind::hangup())?,
        };
        crate::output::watch_stdout();
        Ok(signals)
    }

    /// The next SIGINT, SIGTERM or SIGHUP, its number; or SIGPIPE's once
    /// stdout is found closed.
    ///
    /// Cancel safety: cancel-safe.
    pub async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => nix::libc::SIGINT,
            _ = self.terminate.recv() => nix::libc::SIGTERM,
            _ = self.hangup.recv() => nix::libc::SIGHUP,
            () = crate::output::closed() => nix::libc::SIGPIPE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_split_at_the_first_colon() {
        assert_eq!(
            credentials("root:pa:ss", None).ok(),
            Some(("root".into(), "pa:ss".into()))
        );
        assert_eq!(
            credentials("root", Some("pw")).ok(),
            Some(("root".into(), "pw".into()))
        );
        assert!(matches!(credentials(":pw", None), Err(Failure::Usage(_))));
    }
}
