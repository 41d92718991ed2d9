//! `coord-sim`'s command line, parsed the same way by the launcher (so
//! `--help` and bad flags answer at once, before any build) and by the
//! campaign under madsim.

use clap::Parser;

/// The newest schedule generator (`Generator::default().number()`; the
/// launcher parses flags before the simulator is built, so it cannot ask).
pub const NEWEST_GENERATOR: u8 = 10;

/// Deterministic simulation of coord under faults: runs the real core and
/// driver under madsim against a model of etcd, with generated fault
/// schedules, and checks every invariant. Needs no etcd.
///
/// A campaign prints a summary (checks, faults, latencies) and, for each
/// failed seed, the command that replays it. Exit status: 0 when every seed
/// passed, 1 when one failed, 2 on bad usage.
#[derive(Debug, Clone, Parser)]
#[command(name = "coord-sim", version)]
pub struct Cli {
    /// Seeds to run in a campaign.
    #[arg(long, default_value_t = 2000, value_name = "N")]
    pub seeds: u64,
    /// First seed of the campaign.
    #[arg(long, default_value_t = 1, value_name = "S")]
    pub start: u64,
    /// Replay one seed and print its timeline (instead of a campaign).
    /// `COORD_SIM_LOG=coord=debug` adds the driver's logs.
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    /// Most hosts in a generated fleet.
    #[arg(long, default_value_t = 10, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub hosts: u64,
    /// Most faults in a run's fault phase.
    #[arg(long, default_value_t = 20, value_name = "N",
          value_parser = clap::value_parser!(u64).range(0..=500))]
    pub faults: u64,
    /// Length of the fault phase, seconds (a heal phase follows).
    #[arg(long, default_value_t = 120, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub duration: u64,
    /// Worker threads (default: the machine's cores).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=64))]
    pub jobs: Option<u64>,
    /// Schedule generator version; older ones reproduce seeds pinned with
    /// them.
    #[arg(long, default_value_t = NEWEST_GENERATOR, value_name = "V",
          value_parser = clap::value_parser!(u8).range(1..=i64::from(NEWEST_GENERATOR)))]
    pub generator: u8,
    /// Run every seed twice, with coord's policy and with the
    /// go-coord-style one (plain doubling to 30 s, no jitter, no fast
    /// class, no resume), and print the two side by side. Only coord's
    /// runs fail the campaign.
    #[arg(long)]
    pub compare: bool,
    /// Print every pinned regression as `SEED GENERATOR`, one a line (what
    /// `scripts/sim-diff` replays), and exit.
    #[arg(long, conflicts_with_all = ["seed", "compare"])]
    pub list_pinned: bool,
}
