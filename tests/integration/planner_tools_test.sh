#!/usr/bin/env bash
# holmes-plan, holmes-sim and holmes-topo as a user runs them: plans and simulations for the
# example topologies (table, JSON, Graphviz, sweep, calibration), discovery of this machine, and
# clear errors for bad files and impossible requests.
# Usage: planner_tools_test.sh BIN_DIR SOURCE_DIR
source "$(dirname "$0")/lib.sh"
BIN=$1
SRC=$2
TOPO=$SRC/examples/topologies
PY=/usr/bin/python3

# The paper's setup: both placements, the speedup, and Holmes's groups on their own fabrics.
"$BIN/holmes-plan" -t "$TOPO/paper-gpt-7.5b.yaml" -m gpt-7.5b --tp 1 --pp 2 >"$WORK/table"
expect_contains "$WORK/table" "holmes placement: tp 1 x pp 2 x dp 32"
expect_contains "$WORK/table" "naive placement: tp 1 x pp 2 x dp 32"
expect_contains "$WORK/table" "dp ib (ib-hdr) x1, roce (roce-100) x1"
expect_contains "$WORK/table" "predicted speedup of holmes over naive"

# JSON: whole and well formed; every rank has a role and the DP groups stay in their island.
"$BIN/holmes-plan" -t "$TOPO/uneven-islands.yaml" -m gpt-7.5b --json >"$WORK/plan.json"
$PY - "$WORK/plan.json" <<'PYEOF' || fail "plan JSON does not hold what it should"
import json, sys
plan = json.load(open(sys.argv[1]))
h = plan["holmes"]
assert len(h["ranks"]) == plan["gpus"], "a role per rank"
assert h["tp"] * h["pp"] * h["dp"] == plan["gpus"]
assert sum(s["layers"] for s in h["stages"]) == plan["model"]["layers"]
for group in h["groups"]["dp"]:
    assert group["transport"] in ("ib", "roce"), group
assert plan["speedup"] >= 1.0
PYEOF

# Graphviz: islands as clusters, the pipeline edge over the slow link.
"$BIN/holmes-plan" -t "$TOPO/paper-gpt-7.5b.yaml" -m gpt-7.5b --pp 2 --dot >"$WORK/plan.dot"
expect_contains "$WORK/plan.dot" "graph holmes_plan {"
expect_contains "$WORK/plan.dot" "subgraph cluster_"
expect_contains "$WORK/plan.dot" "(eth-25)"

# A malformed file names file, line and column; a model preset that does not exist lists them.
printf 'link_classes:\n  eth: {fabric: ethernet, gbit_per_s: [1}\n' >"$WORK/bad.yaml"
if "$BIN/holmes-plan" -t "$WORK/bad.yaml" -m gpt-7.5b >"$WORK/out" 2>&1; then fail "bad file accepted"; fi
expect_contains "$WORK/out" "bad.yaml:2:"
if "$BIN/holmes-plan" -t "$TOPO/paper-gpt-7.5b.yaml" -m gpt-9000 >"$WORK/out" 2>&1; then
  fail "unknown model accepted"
fi
expect_contains "$WORK/out" "gpt-7.5b, gpt-39.1b"
# A shape that cannot be placed says why and what would work.
if "$BIN/holmes-plan" -t "$TOPO/uneven-islands.yaml" -m gpt-7.5b --tp 1 --pp 2 >"$WORK/out" 2>&1; then
  fail "impossible shape accepted"
fi
expect_contains "$WORK/out" "a data-parallel group would have to span two islands"
expect_contains "$WORK/out" "leave tp and pp open"

# Discovery on this machine: it runs, and says so when there is no RDMA device.
"$BIN/holmes-topo" >"$WORK/topo"
expect_contains "$WORK/topo" "NICs:"
if [ ! -d /sys/class/infiniband ] || [ -z "$(ls -A /sys/class/infiniband 2>/dev/null)" ]; then
  expect_contains "$WORK/topo" "no RDMA"
fi
"$BIN/holmes-topo" --json >"$WORK/topo.json"
$PY -c 'import json,sys; json.load(open(sys.argv[1]))' "$WORK/topo.json" || fail "holmes-topo --json"
"$BIN/holmes-topo" --file "$TOPO/three-fabrics.yaml" --summary >"$WORK/topo-file"
expect_contains "$WORK/topo-file" "eth"
# holmes-sim: both placements stage by stage on the paper's setup, with the FLOP formula stated.
"$BIN/holmes-sim" -t "$TOPO/paper-gpt-7.5b.yaml" -m gpt-7.5b --tp 1 --pp 2 >"$WORK/sim"
expect_contains "$WORK/sim" "x4 for full recompute"
expect_contains "$WORK/sim" "holmes placement: tp 1 x pp 2 x dp 32"
expect_contains "$WORK/sim" "naive placement: tp 1 x pp 2 x dp 32"
expect_contains "$WORK/sim" "TFLOPS/GPU"
expect_contains "$WORK/sim" "holmes / naive:"
"$BIN/holmes-sim" -t "$TOPO/paper-gpt-7.5b.yaml" -m gpt-7.5b --placement naive >"$WORK/sim"
expect_not_contains "$WORK/sim" "holmes placement"
# The 10,000-GPU cluster simulates (its time is in docs/simulator.md, measured, not asserted).
"$BIN/holmes-sim" -t "$TOPO/large-10k.yaml" -m "$SRC/examples/models/gpt-175b.yaml" >"$WORK/sim"
expect_contains "$WORK/sim" "10000 GPUs"
# A sweep writes its CSV, one row per bandwidth.
"$BIN/holmes-sim" -t "$TOPO/paper-gpt-7.5b.yaml" -m gpt-7.5b --tp 1 --pp 2 --sweep 100,10,1 \
  --csv "$WORK/sweep.csv" >"$WORK/sweep"
[ "$(wc -l <"$WORK/sweep.csv")" -eq 4 ] || fail "sweep CSV should hold a header and 3 rows"
# Calibration: a class the topology lacks is named; a good file changes the prediction.
printf '{"link_classes": {"eth-1": {"gbit_per_s": 1, "latency_us": 50}}}' >"$WORK/cal.json"
if "$BIN/holmes-sim" -t "$TOPO/paper-gpt-7.5b.yaml" -m gpt-7.5b --calibration "$WORK/cal.json" \
  >"$WORK/out" 2>&1; then fail "calibration of an unknown class accepted"; fi
expect_contains "$WORK/out" "'eth-1'"
printf '{"link_classes": {"eth-25": {"gbit_per_s": 1, "latency_us": 50}}}' >"$WORK/cal.json"
"$BIN/holmes-sim" -t "$TOPO/paper-gpt-7.5b.yaml" -m gpt-7.5b --tp 1 --pp 2 \
  --calibration "$WORK/cal.json" >"$WORK/sim"
expect_contains "$WORK/sim" "calibrated eth-25: 25 -> 1 Gbit/s"
echo "planner tools: ok"
