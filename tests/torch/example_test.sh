#!/usr/bin/env bash
# examples/torch/train.py on 8 ranks emulating make demo's two islands on loopback (holmes-run
# --torch, the shaping layer holding Holmes's links to the topology's rates): backend holmes on
# the planner's placement, then gloo on the naive one; every step's loss must equal the
# single-process reference's. Usage: example_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
train=(/usr/bin/python3 "$src/examples/torch/train.py" --steps 3 --width 64 --layers 8
       --micro-batch 8 --global-batch 64)
"${train[@]}" --reference --losses-out "$tmp/reference.txt"
for run in "holmes holmes" "gloo naive"; do
  read -r backend placement <<<"$run"
  "$bin/holmes-run" -n 8 --torch --timeout 300 -- "$src/examples/trainer/emulated_rank.sh" \
    "${train[@]}" --backend "$backend" --placement "$placement" \
    --compare-with "$tmp/reference.txt" | tee "$tmp/$backend.log"
  grep -q "every step's loss matches the single-process reference" "$tmp/$backend.log"
done
grep -q "holmes backend, holmes placement: 2 stages" "$tmp/holmes.log"
grep -q "gloo backend, naive placement: 2 stages" "$tmp/gloo.log"
