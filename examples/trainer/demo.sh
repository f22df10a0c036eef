#!/usr/bin/env bash
# make demo: the whole mission on one machine, without root. Eight local ranks emulate two
# clusters (an IB island and a RoCE island of two hosts each) joined by a slow Ethernet link
# (examples/topologies/emulated-two-islands.yaml, links shaped to 1/100 of its rates). The
# example trainer takes its pipeline and data-parallel groups and its layer split from the
# planner and trains; its loss must equal a single-process run's. Then the naive placement
# (Megatron-LM's rank order, one network for the job as NCCL has it) trains on the same links,
# and the measured speedup is printed beside the planner's prediction.
# usage: demo.sh BUILD_DIR
set -euo pipefail
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=$ROOT/$BUILD/bin
[ -x "$BIN/holmes-trainer" ] || BIN=$BUILD/bin
TOPOLOGY=$ROOT/examples/topologies/emulated-two-islands.yaml
RANKS=8
TRAIN=(--width 256 --layers 8 --micro-batch 16 --global-batch 256 --steps 30)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
start=$(date +%s)

section() { printf '\n== %s\n' "$*"; }

section "topology: $TOPOLOGY (holmes-topo)"
"$BIN/holmes-topo" --file "$TOPOLOGY" --summary

section "reference: the same model and samples in one process"
"$BIN/holmes-trainer" "${TRAIN[@]}" --reference --quiet --losses-out "$WORK/reference.txt"
printf 'reference loss %.4f -> %.4f over %d steps\n' "$(head -1 "$WORK/reference.txt")" \
  "$(tail -1 "$WORK/reference.txt")" "$(wc -l <"$WORK/reference.txt")"

run() {  # run PLACEMENT [VAR=VALUE ...]
  local placement=$1
  shift
  section "$placement placement: $RANKS ranks on the emulated links"
  env "$@" HOLMES_TOPOLOGY="$TOPOLOGY" "$BIN/holmes-run" -n $RANKS -- "$HERE/emulated_rank.sh" \
    "$BIN/holmes-trainer" "${TRAIN[@]}" --placement "$placement" \
    --compare-with "$WORK/reference.txt" --summary "$WORK/$placement.json" |
    sed -e 's/^\[rank 0\] //'
}
run holmes
# NCCL cannot join the IB and RoCE islands' RDMA: the naive job runs every link between hosts
# at the Ethernet rate.
run naive HOLMES_SHAPING=one-network

section "result"
/usr/bin/python3 - "$WORK/holmes.json" "$WORK/naive.json" <<'PY'
import json, sys
h, n = (json.load(open(p)) for p in sys.argv[1:3])
measured = n["mean_step_ms"] / h["mean_step_ms"]
# Both predictions from the one plan the Holmes run made (same measured device speed).
predicted = h["predicted_naive_step_ms"] / h["predicted_holmes_step_ms"]
print(f"measured step time: holmes {h['mean_step_ms']:.1f} ms, naive {n['mean_step_ms']:.1f} ms")
print(f"predicted step time: holmes {h['predicted_holmes_step_ms']:.1f} ms, "
      f"naive {h['predicted_naive_step_ms']:.1f} ms")
print(f"speedup of the Holmes plan over the naive placement: measured {measured:.2f}x, "
      f"predicted {predicted:.2f}x")
print("(absolute times differ: the model leaves out 8 ranks and their communication threads "
      "contending for 2 cores)")
PY
echo "demo finished in $(( $(date +%s) - start )) s"
