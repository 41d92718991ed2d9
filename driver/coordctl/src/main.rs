//! `coordctl`: coord's operator command line. See `coordctl --help`, and
//! the README's `coordctl` section.

#![forbid(unsafe_code)]

mod cli;
mod elect;
mod exit;
mod guard;
mod hosts;
mod inspect;
mod lock;
mod output;
mod register;
mod setup;
mod supervise;

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command};
use crate::exit::Failure;
use crate::output::Printer;
use crate::setup::Signals;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if !e.use_stderr() {
                ExitCode::SUCCESS
            } else if usage_names_a_command(std::env::args()) {
                ExitCode::from(exit::COMMAND_FAILED)
            } else {
                ExitCode::from(exit::USAGE)
            };
        }
    };
    match &cli.command {
        Command::Guard => return guard::serve(),
        Command::Completion(c) => {
            let mut command = cli::for_completion();
            clap_complete::generate(c.shell, &mut command, "coordctl", &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    let with_command = cli.command.runs_command();
    logs(cli.global.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            // Not eprintln!, which panics on a closed stderr.
            let _ = writeln!(std::io::stderr(), "coordctl: cannot start: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let ended = runtime.block_on(run(cli));
    if output::stdout_closed() {
        // As a writer killed by SIGPIPE, after cleaning up.
        return ExitCode::from(exit::STDOUT_CLOSED);
    }
    match ended {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            let _ = writeln!(std::io::stderr(), "coordctl: {failure}");
            failure.exit_code(with_command)
        }
    }
}

/// Whether a command line that does not parse was meant to run a command
/// (`lock`, or anything with `--`): its bad usage then exits 125, not 1.
fn usage_names_a_command(args: impl Iterator<Item = String>) -> bool {
    args.skip(1).any(|a| a == "--" || a == "lock")
}

/// Logs to stderr: `RUST_LOG`, else warnings, `-v` coord's debug logs,
/// `-vv` everything's.
fn logs(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "warn,coord=debug,coordctl=debug",
        _ => "debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Serves coord's metrics in Prometheus' text format at `addr` until the
/// process ends. Keep-alive round trips and waits get buckets from 1 ms to
/// 60 s.
fn serve_metrics(addr: std::net::SocketAddr) -> Result<(), Failure> {
    const BUCKETS: [f64; 14] = [
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0, 60.0,
    ];
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets(&BUCKETS)
        .and_then(|b| b.install())
        .map_err(|e| Failure::Metrics(format!("{addr}: {e}")))
}

async fn run(cli: Cli) -> Result<u8, Failure> {
    let mut signals = Signals::catch()?;
    if let Some(addr) = cli.global.metrics_addr {
        serve_metrics(addr)?;
    }
    let printer = Printer::new(cli.global.output);
    let global = &cli.global;
    match &cli.command {
        Command::Guard | Command::Completion(_) => Ok(0),
        Command::Register(args) => {
            register::run(global, args, &mut signals, printer).await?;
            Ok(0)
        }
        Command::Hosts(args) => {
            hosts::run(global, args, &mut signals, printer).await?;
            Ok(0)
        }
        Command::Campaign(args) => elect::campaign(global, args, &mut signals, printer).await,
        Command::Leader(args) => {
            elect::leader(global, args, printer).await?;
            Ok(0)
        }
        Command::Observe(args) => {
            elect::observe(global, args, &mut signals, printer).await?;
            Ok(0)
        }
        Command::Lock(args) => lock::run(global, args, &mut signals, printer).await,
        Command::Status => {
            inspect::status(global, printer).await?;
            Ok(0)
        }
        Command::Queue(args) => {
            inspect::queue(global, args, printer).await?;
            Ok(0)
        }
    }
}
