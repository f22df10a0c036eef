#!/usr/bin/env bash
# The example trainer on 8 ranks of the emulated two-island cluster, both placements: every
# step's loss equals the single-process run's (relative 1e-3) and falls; the Holmes placement's
# groups stay inside islands and its pipeline crosses between them. (make demo runs the same at
# full length and prints the speedup; here only correctness is asserted.) Then a run that loses a
# rank mid-step and recovers (make demo-elastic at full length).
# Usage: trainer_test.sh BIN_DIR SOURCE_DIR
source "$(dirname "$0")/lib.sh"
BIN=$1
SRC=$2
TRAIN=(--width 64 --layers 6 --micro-batch 8 --global-batch 128 --steps 12)
"$BIN/holmes-trainer" "${TRAIN[@]}" --reference --quiet --losses-out "$WORK/ref.txt"
[ "$(wc -l <"$WORK/ref.txt")" -eq 12 ] || fail "the reference wrote no losses"
for placement in holmes naive; do
  shaping=""
  [ $placement = naive ] && shaping=one-network
  HOLMES_SHAPING=$shaping "$BIN/holmes-run" -n 8 --timeout 300 -- \
    "$SRC/examples/trainer/emulated_rank.sh" "$BIN/holmes-trainer" "${TRAIN[@]}" \
    --placement $placement --compare-with "$WORK/ref.txt" >"$WORK/$placement" 2>&1 ||
    { cat "$WORK/$placement"; fail "$placement run failed"; }
  expect_contains "$WORK/$placement" "$placement: loss"
  expect_contains "$WORK/$placement" "(falls)"
  expect_contains "$WORK/$placement" "): OK"
done
expect_contains "$WORK/holmes" "stage 0: layers 0-"
expect_contains "$WORK/holmes" "on island ib (emu-ib-0,emu-ib-1)"
expect_contains "$WORK/holmes" "on island roce (emu-roce-0,emu-roce-1)"
expect_contains "$WORK/holmes" "dp groups: ib (ib-hdr) x1, roce (roce-100) x1"
expect_contains "$WORK/naive" "on hosts of several islands"
# A reference of another length is a mismatch, reported as such.
head -5 "$WORK/ref.txt" >"$WORK/short.txt"
if "$BIN/holmes-run" -n 8 --timeout 300 -- "$SRC/examples/trainer/emulated_rank.sh" \
  "$BIN/holmes-trainer" "${TRAIN[@]}" --compare-with "$WORK/short.txt" >"$WORK/short" 2>&1; then
  fail "a 5-step reference matched a 12-step run"
fi
expect_contains "$WORK/short" "FAILED"
# Elastic: rank 5 (a roce stage-1 rank) dies mid-step; the survivors shrink, re-plan, copy
# weights and go on, and every step's loss still equals the single-process run's.
HOLMES_TIMEOUT_MS=5000 "$BIN/holmes-run" -n 8 --elastic --timeout 300 -- \
  "$SRC/examples/trainer/emulated_rank.sh" "$BIN/holmes-trainer" "${TRAIN[@]}" \
  --compare-with "$WORK/ref.txt" --kill-rank 5 --kill-step 6 --kill-stamp "$WORK/kill" \
  >"$WORK/elastic" 2>&1 || { cat "$WORK/elastic"; fail "the elastic run failed"; }
expect_contains "$WORK/elastic" "lost 1 of 8 ranks"
expect_contains "$WORK/elastic" "re-planned on 7 ranks"
expect_contains "$WORK/elastic" "recovered: "
expect_contains "$WORK/elastic" "): OK"
grep -h "recovered: " "$WORK/elastic"
echo "trainer: ok"
