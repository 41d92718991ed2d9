//! `coord-sim`: the simulation campaign, coord's main job.
//!
//! ```text
//! cargo run --release -p coord-sim -- [--seeds N] [--start S] [--hosts N]
//!                                     [--faults N] [--duration SECS] [--jobs N]
//! cargo run --release -p coord-sim -- --compare     # each seed under coord's policy and
//!                                                   # the go-coord-style one, side by side
//! cargo run --release -p coord-sim -- --seed S      # replay one run, print its timeline
//! COORD_SIM_LOG=coord=debug cargo run ... --seed S   # ... with the driver's logs
//! ```
//!
//! Built normally, this binary rebuilds and runs itself under madsim
//! (`RUSTFLAGS="--cfg madsim"`, target dir `target/sim`): no etcd and no
//! protoc are needed.

#![forbid(unsafe_code)]

mod cli;

#[cfg(not(madsim))]
fn main() {
    use std::process::Command;
    // Answer --help, --version and bad flags at once, before any build.
    let _ = <cli::Cli as clap::Parser>::parse();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut rustflags = std::env::var("RUSTFLAGS").unwrap_or_default();
    if !rustflags.contains("--cfg madsim") {
        rustflags = format!("{rustflags} --cfg madsim").trim().to_string();
    }
    // The `campaign` profile (whole-program optimisation) runs a third
    // faster than `release`, for a longer first build; the suite's smoke
    // reuses its tests' `release` build with `COORD_SIM_PROFILE=release`.
    let profile = std::env::var("COORD_SIM_PROFILE").unwrap_or_else(|_| "campaign".into());
    eprintln!("coord-sim: building and running under madsim (target/sim, profile {profile}; the first build takes a few minutes)");
    let status = Command::new(cargo)
        .current_dir(&root)
        .env("RUSTFLAGS", rustflags)
        .env("CARGO_TARGET_DIR", root.join("target/sim"))
        .args([
            "run",
            "--profile",
            profile.as_str(),
            "--quiet",
            "-p",
            "coord-sim",
            "--bin",
            "coord-sim",
            "--",
        ])
        .args(std::env::args_os().skip(1))
        .status();
    match status {
        Ok(s) => std::process::exit(s.code().unwrap_or(1)),
        Err(e) => {
            eprintln!("coord-sim: cannot run cargo: {e}");
            std::process::exit(1);
        }
    }
}

/// Most of a campaign's time is the simulation's small allocations and
/// frees (messages, timers, tasks); mimalloc serves them faster than the
/// system allocator, and no run depends on where memory lies.
#[cfg(madsim)]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(madsim)]
fn main() {
    std::process::exit(campaign::main());
}

#[cfg(madsim)]
mod campaign {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::{Duration, Instant};

    use coord_sim::faults::schedule::{Case, Generator, Shape};
    const _: () = assert!(crate::cli::NEWEST_GENERATOR == Generator::NEWEST.number());
    use coord_sim::history::History;
    use coord_sim::report::{timeline, HistoryTally, Summary};
    use coord_sim::run::compare::{self, GoCoordStyle, Side};
    use coord_sim::run::runner::{run_case, run_case_with};

    struct Args {
        seeds: u64,
        start: u64,
        replay: Option<u64>,
        shape: Shape,
        jobs: usize,
        generator: Generator,
        compare: bool,
        list_pinned: bool,
    }

    /// The command line (clap prints help and usage errors and exits).
    fn parse() -> Args {
        let cli = <crate::cli::Cli as clap::Parser>::parse();
        let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        Args {
            seeds: cli.seeds,
            start: cli.start,
            replay: cli.seed,
            shape: Shape {
                max_hosts: count(cli.hosts),
                max_faults: count(cli.faults),
                phase1: Duration::from_secs(cli.duration),
            },
            jobs: cli.jobs.map_or_else(
                || std::thread::available_parallelism().map_or(2, |n| n.get()),
                count,
            ),
            generator: Generator::from_number(cli.generator),
            compare: cli.compare,
            list_pinned: cli.list_pinned,
        }
    }

    fn replay_command(seed: u64, shape: Shape, generator: Generator) -> String {
        let d = Shape::default();
        let mut cmd = format!("cargo run --release -p coord-sim -- --seed {seed}");
        if shape.max_hosts != d.max_hosts {
            cmd += &format!(" --hosts {}", shape.max_hosts);
        }
        if shape.max_faults != d.max_faults {
            cmd += &format!(" --faults {}", shape.max_faults);
        }
        if shape.phase1 != d.phase1 {
            cmd += &format!(" --duration {}", shape.phase1.as_secs());
        }
        if generator != Generator::default() {
            cmd += &format!(" --generator {}", generator.number());
        }
        cmd
    }

    pub fn main() -> i32 {
        let args = parse();
        if args.list_pinned {
            for p in coord_sim::run::pinned::PINNED {
                println!("{} {}", p.seed, p.generator.number());
            }
            return 0;
        }
        if let Some(seed) = args.replay {
            // COORD_SIM_LOG=debug (a tracing filter) logs what the driver
            // does in the replayed run.
            if let Ok(filter) = std::env::var("COORD_SIM_LOG") {
                let _ = tracing_subscriber::fmt()
                    .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                    .with_writer(std::io::stderr)
                    .try_init();
            }
            let r = run_case(&Case::generate_with(seed, args.shape, args.generator));
            print!("{}", timeline(&r));
            return i32::from(!r.passed());
        }
        let wall = Instant::now();
        let next = Arc::new(AtomicU64::new(args.start));
        let end = args.start.saturating_add(args.seeds);
        let (tx, rx) = mpsc::channel();
        let workers: Vec<_> = (0..args.jobs)
            .map(|_| {
                let next = Arc::clone(&next);
                let tx = tx.clone();
                let shape = args.shape;
                let generator = args.generator;
                let compare = args.compare;
                std::thread::spawn(move || loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= end {
                        return;
                    }
                    let case = Case::generate_with(seed, shape, generator);
                    let baseline = compare.then(|| run_case_with(&case, GoCoordStyle));
                    let mut r = run_case(&case);
                    // The summary needs only this of the history (the
                    // side-by-side comparison reads it whole): dropped
                    // here, beside the other workers, not on the one thread
                    // that collects.
                    let tally = HistoryTally::of(&r.history);
                    if !compare {
                        r.history = History::default();
                    }
                    if tx.send((r, tally, baseline)).is_err() {
                        return;
                    }
                })
            })
            .collect();
        drop(tx);
        let mut summary = Summary::default();
        let mut last = Instant::now();
        let (shape, generator) = (args.shape, args.generator);
        let (mut ours, mut theirs) = (Side::default(), Side::default());
        for (r, tally, baseline) in rx {
            if let Some(b) = baseline {
                ours.add(&r);
                theirs.add(&b);
            }
            let seed = r.case.seed;
            if let Some(violations) = summary.add(r, &tally) {
                // Say it now: a long campaign may be stopped before the end.
                eprintln!("FAILED seed {seed}: {violations:?}");
                eprintln!("  replay: {}", replay_command(seed, shape, generator));
            }
            if last.elapsed() >= Duration::from_secs(1) || summary.seeds == args.seeds {
                eprintln!(
                    "[{:>5}/{}] {:>5.1}s wall, {} failed",
                    summary.seeds,
                    args.seeds,
                    wall.elapsed().as_secs_f64(),
                    summary.failures.len()
                );
                last = Instant::now();
            }
        }
        for w in workers {
            let _ = w.join();
        }
        print!(
            "{}",
            summary.table(&|seed| replay_command(seed, shape, generator))
        );
        if args.compare {
            print!("{}", compare::table(&ours, &theirs));
        }
        // The wall time's line is the one line that differs between two
        // runs of the same seeds (`scripts/sim-diff` leaves it out).
        let secs = wall.elapsed().as_secs_f64().max(1e-3);
        println!(
            "wall time {secs:.1}s: {:.1} seeds/s, simulated time {:.0}x wall time",
            summary.seeds as f64 / secs,
            summary.virtual_ms as f64 / 1000.0 / secs
        );
        i32::from(!summary.failures.is_empty())
    }
}
