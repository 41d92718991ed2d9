//! Stable-Rust replay of the committed seed corpus (which holds every input
//! a fuzzer ever failed on, named `regression-*`), then a short seeded
//! random exploration through the same drivers the fuzz targets use, with
//! floors on how far it gets so it cannot silently become vacuous.

use std::path::Path;

use coord_fuzz::Reach;

fn replay(target: &str, run: fn(&[u8]) -> Reach) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("seeds")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("seed corpus dir") {
        let path = entry.expect("entry").path();
        let data = std::fs::read(&path).expect("seed file");
        let _ = run(&data);
        n += 1;
    }
    n
}

/// SplitMix64, for reproducible random inputs.
fn random_inputs(seed: u64, count: usize, run: fn(&[u8]) -> Reach) -> Reach {
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut reach = Reach::default();
    for _ in 0..count {
        let len = usize::try_from(next() % 2048).unwrap_or(0);
        let data: Vec<u8> = (0..len).map(|_| next().to_le_bytes()[0]).collect();
        reach += run(&data);
    }
    reach
}

#[test]
fn liveness_corpus_and_random_smoke() {
    assert!(replay("liveness", coord_fuzz::liveness::run) > 0);
    let reach = random_inputs(1, 20_000, coord_fuzz::liveness::run);
    // Not vacuous: long runs that register, lose and stop.
    assert!(reach.steps > 1_000_000, "{reach:?}");
    assert!(reach.milestones > 10_000, "{reach:?}");
}

#[test]
fn watcher_corpus_and_random_smoke() {
    assert!(replay("watcher", coord_fuzz::watcher::run) > 0);
    let reach = random_inputs(2, 20_000, coord_fuzz::watcher::run);
    assert!(reach.steps > 1_000_000, "{reach:?}");
    assert!(reach.milestones > 1_500, "{reach:?}");
    eprintln!("REACH {reach:?}");
}

#[test]
fn session_corpus_and_random_smoke() {
    assert!(replay("session", coord_fuzz::session::run) > 0);
    let reach = random_inputs(3, 20_000, coord_fuzz::session::run);
    // Not vacuous: long runs that register, elect, lose and close.
    assert!(reach.steps > 1_000_000, "{reach:?}");
    assert!(reach.milestones > 5_000, "{reach:?}");
    eprintln!("REACH {reach:?}");
}

#[test]
fn probe_corpus_and_random_smoke() {
    assert!(replay("probe", coord_fuzz::probe::run) > 0);
    let reach = random_inputs(4, 20_000, coord_fuzz::probe::run);
    // Not vacuous: etcd found back after silences, many times.
    assert!(reach.steps > 1_000_000, "{reach:?}");
    assert!(reach.milestones > 5_000, "{reach:?}");
    eprintln!("REACH {reach:?}");
}

#[test]
fn lock_corpus_and_random_smoke() {
    assert!(replay("lock", coord_fuzz::lock::run) > 0);
    let reach = random_inputs(5, 20_000, coord_fuzz::lock::run);
    // Not vacuous: table steps, acquires and verdicts that take over.
    assert!(reach.steps > 500_000, "{reach:?}");
    assert!(reach.milestones > 100_000, "{reach:?}");
    eprintln!("REACH {reach:?}");
}
