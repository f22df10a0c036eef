#!/usr/bin/env bash
# examples/torch/train.py losing a rank: 8 ranks emulating make demo's two islands on loopback
# (holmes-run --torch --elastic), rank 5 (a stage-1 rank of the roce island) SIGKILLs itself in
# step 2 after its first forward. The survivors must revoke, shrink, re-plan on 7 ranks, copy the
# weights and run the step again: every step's loss equals the uninterrupted single-process
# run's, and rank 0 prints the time from the kill to the first resumed step.
# Usage: example_elastic_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
train=(/usr/bin/python3 "$src/examples/torch/train.py" --steps 4 --width 64 --layers 8
       --micro-batch 8 --global-batch 64)
"${train[@]}" --reference --losses-out "$tmp/reference.txt"
[ "$(wc -l <"$tmp/reference.txt")" -eq 4 ] || { echo "the reference wrote no losses"; exit 1; }
# The failure timeout bounds what a survivor waits for a rank nobody saw die.
HOLMES_TIMEOUT_MS=5000 "$bin/holmes-run" -n 8 --torch --elastic --timeout 300 -- \
  "$src/examples/trainer/emulated_rank.sh" "${train[@]}" --compare-with "$tmp/reference.txt" \
  --kill-rank 5 --kill-step 1 --kill-stamp "$tmp/kill" >"$tmp/run.log" 2>&1 ||
  { cat "$tmp/run.log"; echo "the elastic run failed"; exit 1; }
grep -v "warning\]" "$tmp/run.log"
expect() {
  grep -Eq "$1" "$tmp/run.log" || { echo "missing from the run's output: $1"; exit 1; }
}
expect "rank 5 was killed by signal 9 .*: lost"
expect "\[rank 0\] lost 1 of 8 ranks .*re-planned on 7 ranks: pp 2 x dp 3"
expect "\[rank 0\] step 2/4 loss"
expect "\[rank 0\] recovered: [0-9]+ ms from the kill to the end of the first resumed step"
expect "\[rank 0\] every step's loss matches the single-process reference"
[ "$(grep -c '^\[rank 0\] step [0-9]/4 loss' "$tmp/run.log")" -eq 4 ] ||
  { echo "rank 0 did not report each of the 4 steps once"; exit 1; }
echo "torch example: survived the lost rank"
