//! The command line: global flags (etcdctl's names, and its `ETCDCTL_*`
//! environment variables) and one subcommand per job.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// coordctl: coord's operator command line, for hosts, elections and locks
/// on etcd v3 (keys compatible with go-coord and `etcdctl elect`/`lock`).
///
/// Exit status without a command: 0 ok; 1 bad usage or input (nothing
/// written); 2 etcd unreachable or refused (TLS, credentials); 4
/// leadership lost; 141 stdout closed (a pipe's reader left).
///
/// With a command (`lock`, `campaign ... -- CMD`): the command's own
/// status, or 128+N when a signal N ended it; coordctl's own outcomes
/// keep out of its way, as `timeout(1)`'s do: 123 the hold was lost (the
/// command was stopped); 124 not taken (`--try`, or `--timeout` passed;
/// the command did not run); 125 coordctl failed (bad usage, etcd
/// unreachable, a backend failing); 126 the command cannot be run; 127
/// it is not found; 128+N a signal N ended coordctl before the command
/// ran.
#[derive(Debug, Parser)]
#[command(name = "coordctl", version)]
pub struct Cli {
    /// Flags every subcommand takes.
    #[command(flatten)]
    pub global: Global,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns and one human line per event.
    Table,
    /// One JSON object per line (per host or event), each with `ts`.
    Json,
}

/// Flags every subcommand takes. Each falls back on etcdctl's environment
/// variable where etcdctl has one.
#[derive(Debug, Args)]
pub struct Global {
    /// etcd endpoints, comma-separated (`host:port`, `http://` or
    /// `https://`).
    #[arg(
        long,
        global = true,
        env = "ETCDCTL_ENDPOINTS",
        value_delimiter = ',',
        default_value = "127.0.0.1:2379"
    )]
    pub endpoints: Vec<String>,
    /// Key prefix of the hosts (`register`, `hosts`).
    #[arg(long, global = true, env = "COORD_PREFIX", default_value = coord::DEFAULT_PREFIX)]
    pub prefix: String,
    /// How long to wait for etcd's first answer (for example `2s`).
    #[arg(long, global = true, env = "ETCDCTL_DIAL_TIMEOUT", default_value = "2s", value_parser = duration)]
    pub dial_timeout: Duration,
    /// Deadline of each etcd request (for example `5s`).
    #[arg(long, global = true, env = "ETCDCTL_COMMAND_TIMEOUT", default_value = "5s", value_parser = duration)]
    pub command_timeout: Duration,
    /// CA certificate (PEM) that signs etcd's certificates; enables TLS.
    #[arg(long, global = true, env = "ETCDCTL_CACERT")]
    pub cacert: Option<PathBuf>,
    /// Client certificate (PEM), for etcd's `--client-cert-auth`; needs
    /// `--key`.
    #[arg(long, global = true, env = "ETCDCTL_CERT")]
    pub cert: Option<PathBuf>,
    /// Private key (PEM) of `--cert`.
    #[arg(long, global = true, env = "ETCDCTL_KEY")]
    pub key: Option<PathBuf>,
    /// Accept any certificate etcd presents (TLS without verification, as
    /// etcdctl's flag): for tests and throw-away clusters only.
    #[arg(long, global = true, env = "ETCDCTL_INSECURE_SKIP_TLS_VERIFY")]
    pub insecure_skip_tls_verify: bool,
    /// User for etcd's authentication, `name` or `name:password`. Without
    /// a password (and without `--password`) it is prompted for on the
    /// terminal, never echoed.
    #[arg(long, global = true, env = "ETCDCTL_USER", hide_env_values = true)]
    pub user: Option<String>,
    /// Password of `--user` (prefer the prompt or `ETCDCTL_PASSWORD`: a
    /// flag shows in the process list).
    #[arg(long, global = true, env = "ETCDCTL_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// Output format.
    #[arg(
        long,
        short = 'w',
        alias = "write-out",
        global = true,
        value_enum,
        default_value = "table"
    )]
    pub output: Output,
    /// More logs on stderr: `-v` coord's debug logs, `-vv` everything's.
    /// `RUST_LOG` overrides.
    #[arg(long, short = 'v', global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Serve coord's metrics in Prometheus' text format at this address
    /// (`/metrics`), for as long as the command runs.
    #[arg(long, global = true, env = "COORD_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Register this host and stay registered (healing) until SIGINT or
    /// SIGTERM, then revoke its lease and exit 0. Prints every liveness
    /// change.
    #[command(after_help = "Examples:\n  \
        coordctl register --id 6b1f0c1e --hostname node-7 --version 1.4.2 --ttl 10\n  \
        coordctl -w json register --id node-7")]
    Register(Register),
    /// List the registered hosts; with `--watch`, then stream their
    /// changes.
    #[command(after_help = "Examples:\n  \
        coordctl hosts\n  \
        coordctl hosts --watch -w json\n  \
        coordctl hosts --hostname 'db-*' --version '1.4.*'\n  \
        coordctl --prefix /myapp/hosts/ hosts")]
    Hosts(Hosts),
    /// Campaign in the election NAME with VALUE and print when elected.
    /// Without a command, lead until SIGINT or SIGTERM (then resign, exit
    /// 0) or until leadership is lost (exit 4). With a command after
    /// `--`, run it while leading (see `lock` for the contract and its
    /// exit statuses).
    #[command(after_help = "Examples:\n  \
        coordctl campaign scheduler node-7\n  \
        coordctl campaign scheduler node-7 --ttl 15 --grace 30s -- ./run-scheduler")]
    Campaign(Campaign),
    /// Print the current leader of the election NAME (nothing is written).
    #[command(after_help = "Examples:\n  \
        coordctl leader scheduler\n  \
        coordctl -w json leader scheduler")]
    Leader(Named),
    /// Print every change of the leader of the election NAME until SIGINT
    /// or SIGTERM (nothing is written).
    #[command(after_help = "Examples:\n  \
        coordctl observe scheduler\n  \
        coordctl -w json observe scheduler | head -1")]
    Observe(Named),
    /// Print each endpoint's health, member id, version, whether it leads,
    /// raft term, revision, database size and alarms; then the members, and
    /// how many keys are under `--prefix`. Exit 2 if an endpoint does not
    /// answer (after printing what did).
    #[command(after_help = "Examples:\n  \
        coordctl --endpoints 10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379 status\n  \
        coordctl -w json status")]
    Status,
    /// Print the holder and the waiters of the election or lock NAME in
    /// order (the holder first), with their values, create revisions,
    /// leases and the seconds each lease has left (nothing is written).
    #[command(after_help = "Examples:\n  \
        coordctl queue nightly-backup\n  \
        coordctl -w json queue scheduler")]
    Queue(Named),
    /// Take the lock NAME and run a command while holding it. The command
    /// gets the fencing token in `COORD_FENCE` and the lock's key in
    /// `COORD_KEY`. If the lock is lost, the command gets SIGTERM, then
    /// SIGKILL after `--grace`, and coordctl exits 123. When the command
    /// exits, the lock is released and coordctl exits with its status.
    ///
    /// There is no `unlock` (nor `resign`): only the process that holds a
    /// lock or leadership can give it up, through its lease, so a stray
    /// command can never release someone else's. It is released when the
    /// command ends or coordctl gets SIGINT/SIGTERM/SIGHUP, and by etcd
    /// one TTL after coordctl dies.
    ///
    /// The command never outlives the hold: if coordctl dies (SIGKILL, a
    /// crash), a guard process it started gives the command SIGTERM at
    /// once and SIGKILL after `--grace`, and the lock passes on only once
    /// the command is gone (flock, file, postgres), or the command's time
    /// is cut to end before the TTL lets another holder in (etcd, redis).
    #[command(after_help = "Examples:\n  \
        coordctl lock nightly-backup -- ./backup.sh\n  \
        coordctl lock nightly-backup --try -- ./backup.sh     # 124 if held\n  \
        coordctl lock nightly-backup --timeout 5m -- ./backup.sh\n  \
        coordctl lock --backend flock --dir /var/lock/myapp nightly-backup -- ./backup.sh\n  \
        coordctl lock --backend postgres --url 'host=db user=ops dbname=app' jobs -- ./job.sh\n\n\
        Exit status: the command's own; 123 lost (the command was stopped), 124 not\n\
        taken, 125 coordctl failed, 126/127 the command cannot run / is not found.")]
    Lock(Lock),
    /// Print a shell completion script: `coordctl completion bash >
    /// /etc/bash_completion.d/coordctl`, `coordctl completion zsh >
    /// "${fpath[1]}/_coordctl"`, `coordctl completion fish >
    /// ~/.config/fish/completions/coordctl.fish`.
    #[command(after_help = "Examples:\n  \
        coordctl completion bash > /etc/bash_completion.d/coordctl\n  \
        coordctl completion zsh > \"${fpath[1]}/_coordctl\"\n  \
        coordctl completion fish > ~/.config/fish/completions/coordctl.fish")]
    Completion(Completion),
    /// The guard of a command run under a hold (internal: coordctl starts
    /// it itself).
    #[command(hide = true)]
    Guard,
}

impl Command {
    /// True when the subcommand runs a command, whose exit status is then
    /// coordctl's (and coordctl's own outcomes move to 123-127).
    pub fn runs_command(&self) -> bool {
        match self {
            Command::Lock(_) => true,
            Command::Campaign(c) => !c.command.is_empty(),
            _ => false,
        }
    }
}

/// The command line as shells complete it: without hidden subcommands
/// (`clap_complete` would offer them).
pub fn for_completion() -> clap::Command {
    use clap::CommandFactory;
    let full = Cli::command();
    let visible: Vec<clap::Command> = full
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let mut shown = clap::Command::new("coordctl").subcommands(visible);
    for arg in full.get_arguments() {
        shown = shown.arg(arg.clone());
    }
    shown
}

/// `coordctl completion`.
#[derive(Debug, Args)]
pub struct Completion {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `coordctl register`.
#[derive(Debug, Args)]
pub struct Register {
    /// The host's id: the last segment of its key (no `/`, `..` or control
    /// characters).
    #[arg(long)]
    pub id: String,
    /// Host name recorded (default: this machine's).
    #[arg(long)]
    pub hostname: Option<String>,
    /// Hypervisor recorded.
    #[arg(long, default_value = "")]
    pub hypervisor: String,
    /// Agent version recorded.
    #[arg(long = "version", default_value = "")]
    pub agent_version: String,
    /// Lease TTL in seconds (1 to 86,400).
    #[arg(long, default_value_t = 10)]
    pub ttl: u64,
}

/// `coordctl hosts`.
#[derive(Debug, Args)]
pub struct Hosts {
    /// After the list, stream every change until SIGINT or SIGTERM.
    #[arg(long)]
    pub watch: bool,
    /// Only hosts whose id matches this pattern (`*` any text, `?` one
    /// character).
    #[arg(long)]
    pub id: Option<String>,
    /// Only hosts whose host name matches this pattern.
    #[arg(long)]
    pub hostname: Option<String>,
    /// Only hosts whose agent version matches this pattern.
    #[arg(long = "version")]
    pub agent_version: Option<String>,
}

/// A subcommand that only names an election.
#[derive(Debug, Args)]
pub struct Named {
    /// The election's name (its keys live under `NAME/`).
    pub name: String,
}

/// What `campaign` and `lock` share when they run a command.
#[derive(Debug, Args)]
pub struct Hold {
    /// Lease TTL in seconds (1 to 86,400): a holder whose process dies is
    /// replaced about this long later. Default 10, as `etcdctl lock`.
    #[arg(long, default_value_t = 10)]
    pub ttl: u64,
    /// After a loss, how long the command has between SIGTERM and SIGKILL
    /// (for example `10s`). If coordctl itself dies, its guard gives the
    /// command the same, cut to end before the lock could pass on: two
    /// thirds of the TTL, less a quarter second, for etcd and redis.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub grace: Duration,
}

/// `coordctl campaign`.
#[derive(Debug, Args)]
pub struct Campaign {
    /// The election's name (its keys live under `NAME/`, as `etcdctl
    /// elect NAME` writes them).
    pub name: String,
    /// The value this candidate proclaims.
    pub value: String,
    /// Shared with `lock`.
    #[command(flatten)]
    pub hold: Hold,
    /// The command to run while leading, after `--`.
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// `coordctl lock`.
#[derive(Debug, Args)]
pub struct Lock {
    /// The lock's name (its keys live under `NAME/`, as `etcdctl lock
    /// NAME` writes them).
    pub name: String,
    /// Shared with `campaign`.
    #[command(flatten)]
    pub hold: Hold,
    /// Give up (exit 124) if the lock is not held within this long (for
    /// example `30s`). Default: wait for ever.
    #[arg(long, value_parser = duration, conflicts_with = "try_lock")]
    pub timeout: Option<Duration>,
    /// Fail at once (exit 124) if the lock is held.
    #[arg(long = "try")]
    pub try_lock: bool,
    /// Where the lock lives: etcd (the default, shared with `etcdctl
    /// lock NAME`), or a directory on this host: `flock` locks, or `file`
    /// marker locks (see the README's lock family).
    #[arg(long, value_enum, default_value_t = LockBackend::Etcd)]
    pub backend: LockBackend,
    /// The directory of `flock` and `file` locks.
    #[arg(long, required_if_eq_any = [("backend", "flock"), ("backend", "file")])]
    pub dir: Option<PathBuf>,
    /// The server of `redis` locks (`redis://host:port/db`; their TTL is
    /// `--ttl`) or `postgres` locks (a connection string).
    #[arg(long, required_if_eq_any = [("backend", "redis"), ("backend", "postgres")])]
    pub url: Option<String>,
    /// `file` locks: how long after its holder stops refreshing it a
    /// marker the pid cannot judge is taken over (for example `30s`).
    #[arg(long, value_parser = duration, default_value = "30s")]
    pub stale_after: Duration,
    /// Holders at once (a semaphore); not for `etcd`.
    #[arg(long, default_value_t = 1)]
    pub slots: u32,
    /// The command to run while holding the lock, after `--`.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Where `coordctl lock` keeps its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LockBackend {
    /// etcd (`etcdctl lock` compatible).
    Etcd,
    /// An exclusive `flock` on `DIR/NAME.lock` (this host only).
    Flock,
    /// A marker file `DIR/NAME.held`, judged by pid and age.
    File,
    /// A Redis key with a TTL (`--url`, `--ttl`).
    Redis,
    /// A Postgres advisory lock on a connection of its own (`--url`).
    Postgres,
}

/// A duration as etcdctl writes them (`500ms`, `2s`, `1m`), or bare
/// seconds.
fn duration(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn every_subcommand_shows_examples_in_its_help() {
        use clap::CommandFactory;
        let cli = Cli::command();
        for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
            let help = sub.clone().render_long_help().to_string();
            assert!(
                help.contains("Examples:\n  coordctl "),
                "{}: {help}",
                sub.get_name()
            );
        }
    }

    #[test]
    fn completion_scripts_name_every_subcommand() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut for_completion(), "coordctl", &mut out);
            let script = String::from_utf8(out).unwrap_or_default();
            for sub in [
                "register",
                "hosts",
                "status",
                "queue",
                "campaign",
                "leader",
                "observe",
                "lock",
                "completion",
            ] {
                assert!(script.contains(sub), "{shell}: {sub} missing");
            }
        }
        // The hidden guard is left out (clap_complete would offer it).
        let shown = for_completion();
        assert!(shown.get_subcommands().all(|s| s.get_name() != "guard"));
        assert!(shown.get_arguments().any(|a| a.get_id() == "endpoints"));
    }

    #[test]
    fn durations_take_go_style_units_or_seconds() {
        assert_eq!(duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("3"), Ok(Duration::from_secs(3)));
        assert!(duration("soon").is_err());
    }

    #[test]
    fn lock_needs_a_command_and_campaign_does_not() {
        assert!(Cli::try_parse_from(["coordctl", "lock", "jobs"]).is_err());
        assert!(Cli::try_parse_from(["coordctl", "lock", "jobs", "--", "true"]).is_ok());
        assert!(Cli::try_parse_from(["coordctl", "campaign", "jobs", "v"]).is_ok());
        let cli = Cli::try_parse_from(["coordctl", "campaign", "e", "v", "--", "sleep", "9"])
            .map_err(|e| e.to_string());
        assert!(
            matches!(&cli, Ok(Cli { command: Command::Campaign(c), .. }) if c.command == ["sleep", "9"]),
            "{cli:?}"
        );
    }

    #[test]
    fn help_never_shows_a_password_from_the_environment() {
        use clap::CommandFactory;
        std::env::set_var("ETCDCTL_USER", "root:hunter2");
        std::env::set_var("ETCDCTL_PASSWORD", "hunter3");
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("ETCDCTL_USER"), "{help}");
        assert!(!help.contains("hunter"), "{help}");
    }

    #[test]
    fn endpoints_are_comma_separated() {
        let cli = Cli::try_parse_from(["coordctl", "--endpoints", "a:1,b:2", "hosts"])
            .map_err(|e| e.to_string());
        assert!(
            matches!(&cli, Ok(c) if c.global.endpoints == ["a:1", "b:2"]),
            "{cli:?}"
        );
    }
}
