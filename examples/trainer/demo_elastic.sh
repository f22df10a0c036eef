#!/usr/bin/env bash
# make demo-elastic: training that survives a lost rank, on the emulated two islands of make demo
# (8 ranks, links shaped). Rank 5 (a RoCE host's rank) kills itself (SIGKILL) in the middle of a
# step; the survivors see HM_ERR_PEER_FAILED, revoke their communicators, shrink the world
# (hm_comm_shrink, HM_SHRINK_FAILED), re-plan the model on the 7 left (hm_plan_replan: its
# replica is taken out, the global batch kept), copy weights from the surviving replicas and run
# the interrupted step again. Every step's loss must equal the uninterrupted single-process run's;
# the time from the kill to the end of the first resumed step is printed.
# usage: demo_elastic.sh BUILD_DIR [RUNS]
set -euo pipefail
BUILD=${1:-build}
RUNS=${2:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=$ROOT/$BUILD/bin
[ -x "$BIN/holmes-trainer" ] || BIN=$BUILD/bin
TRAIN=(--width 256 --layers 8 --micro-batch 16 --global-batch 256 --steps 30)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

printf '== reference: the same model and samples in one process, uninterrupted\n'
"$BIN/holmes-trainer" "${TRAIN[@]}" --reference --quiet --losses-out "$WORK/reference.txt"
for run in $(seq 1 "$RUNS"); do
  printf '\n== run %d/%d: 8 ranks on the emulated links, rank 5 killed in step 12\n' "$run" "$RUNS"
  # The failure timeout bounds what the survivors wait for a rank nobody saw die.
  HOLMES_TIMEOUT_MS=${HOLMES_TIMEOUT_MS:-5000} "$BIN/holmes-run" -n 8 --elastic --timeout 600 -- \
    "$HERE/emulated_rank.sh" "$BIN/holmes-trainer" "${TRAIN[@]}" \
    --compare-with "$WORK/reference.txt" --kill-rank 5 --kill-step 11 \
    --kill-stamp "$WORK/kill" 2>&1 | grep -v -e "warning\]" -e "UCX  ERROR" |
    sed -e 's/^\[rank 0\] //' | tee "$WORK/run.txt"
  grep -q "): OK" "$WORK/run.txt" || { echo "demo-elastic: run $run FAILED"; exit 1; }
done
