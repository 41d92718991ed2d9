# Sourced by scripts/sim-diff and scripts/sim-speed, from the repository's
# root: builds coord-sim under madsim for this tree and for another commit.
#
#   sim_build DIR TARGET   builds DIR's coord-sim into TARGET/release
#   sim_rev REV            builds REV in a git worktree under
#                          target/sim-diff/ (once; later calls reuse it) and
#                          sets rev_commit and rev_bin (its coord-sim)
# Both exit the script with status 2 on an unknown commit.

sim_build() { # DIR TARGET
  (cd "$1" && RUSTFLAGS="--cfg madsim" CARGO_TARGET_DIR="$2" \
    cargo build --release --quiet --locked -p coord-sim --bin coord-sim)
}

sim_rev() { # REV
  rev_commit=$(git rev-parse --verify --quiet "$1^{commit}") ||
    { echo "$(basename "$0"): no commit $1" >&2; exit 2; }
  local work="$PWD/target/sim-diff"
  local tree="$work/$rev_commit"
  mkdir -p "$work"
  if [ ! -d "$tree" ]; then
    git worktree add --detach --force "$tree" "$rev_commit" > /dev/null
  fi
  sim_build "$tree" "$work/target-$rev_commit"
  rev_bin="$work/target-$rev_commit/release/coord-sim"
}
