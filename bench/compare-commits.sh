#!/usr/bin/env bash
# Two commits of Holmes measured in one run, interleaved, to show that a change (a refactoring, a
# new layer) leaves performance as it was: per round, for each commit in turn,
#   compare-local.sh -r 1      one host, 4 ranks: Holmes on shm and tcp beside Gloo and Open MPI
#   two-islands.sh             (as root) the emulated two islands, hierarchical allreduce
# each with that commit's own scripts and a build of its benchmark tools (without UCX, verbs,
# CUDA and torch, as two-islands.sh wants). Prints one line per run and measurement, so that the
# rounds can be read side by side; the peers (Gloo, Open MPI) are measured in every run, so
# Holmes / peer ratios stay comparable when the machine's load moves.
#
# Usage: bench/compare-commits.sh [-r ROUNDS] [-w DIR] OLD NEW
#   OLD, NEW   commits (anything git rev-parse takes)
#   -r ROUNDS  rounds (default 2)
#   -w DIR     where the worktrees, builds and logs go (default /tmp/holmes-compare-commits);
#              builds are kept there and reused by later runs
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds=2
work=/tmp/holmes-compare-commits
while getopts "r:w:h" opt; do
  case $opt in
    r) rounds="$OPTARG" ;;
    w) work="$OPTARG" ;;
    *)
      awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"
      exit 2
      ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || { echo "compare-commits: wants two commits (-h for help)" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "compare-commits: -r wants a positive number" >&2; exit 2; }

mkdir -p "$work"
trees=()
for rev in "$1" "$2"; do
  sha=$(git -C "$root" rev-parse --short "$rev^{commit}") ||
    { echo "compare-commits: '$rev' is not a commit" >&2; exit 2; }
  tree="$work/$sha"
  [ -d "$tree" ] || git -C "$root" worktree add -q --detach "$tree" "$sha"
  if [ ! -f "$tree/build-bench/build.ninja" ]; then
    cmake -S "$tree" -B "$tree/build-bench" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DHOLMES_WITH_UCX=OFF -DHOLMES_WITH_VERBS=OFF -DHOLMES_WITH_CUDA=OFF \
      -DHOLMES_WITH_TORCH=OFF >/dev/null
  fi
  echo "compare-commits: building $sha"
  cmake --build "$tree/build-bench" --target holmes-run holmes-bench holmes-store \
    gloo-allreduce-bench mpi-allreduce-bench >/dev/null
  trees+=("$tree")
done

for round in $(seq 1 "$rounds"); do
  for tree in "${trees[@]}"; do
    sha=$(basename "$tree")
    log="$work/local-$sha-$round.log"
    (cd "$tree" && bench/compare-local.sh -B "$tree/build-bench" -r 1 \
      -o "$work/local-$sha-$round.csv") >"$log" 2>&1 || echo "compare-commits: $log failed"
    grep -E '^(Holmes|Gloo|Open MPI) ' "$log" | sed "s/^/round $round $sha local  /"
    if ((EUID == 0)); then
      log="$work/islands-$sha-$round.log"
      (cd "$tree" && bench/emulate/two-islands.sh -B "$tree/build-bench") >"$log" 2>&1 ||
        echo "compare-commits: $log failed"
      grep -E '^(holmes-auto|gloo-ring) |/ gloo-ring|/ bound \(iperf3\)' "$log" |
        sed "s/^/round $round $sha islands  /"
    fi
  done
done
echo "compare-commits: logs in $work (remove the worktrees with git worktree remove)"
