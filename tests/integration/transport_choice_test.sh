#!/usr/bin/env bash
# HOLMES_TRANSPORT: ranks that disagree about a link both fail at init with HM_ERR_MISMATCH
# naming each other (no hang); a forced transport this machine cannot run fails cleanly with
# HM_ERR_UNSUPPORTED and the reason; a bad value is refused.
# usage: transport_choice_test.sh BIN_DIR
source "$(dirname "$0")/lib.sh"
BIN=$1
BENCH=("$BIN/holmes-bench" allreduce -b 1K -e 1K --iters 1 --warmup 0)
export HOLMES_TIMEOUT_MS=30000
CLEAN=(env -u HOLMES_RANK -u HOLMES_WORLD_SIZE -u HOLMES_STORE -u HOLMES_TOKEN
       -u HOLMES_STORE_SERVE -u HOLMES_TRANSPORT -u HOLMES_ALGO)

# Starts ranks 0 and 1 of a 2-rank job, each with its extra variables (a space-separated list of
# NAME=VALUE, possibly empty), their output in $WORK/<name>0 and $WORK/<name>1, and fails unless
# both ranks fail within 20 s: a disagreement is reported at init, never waited out.
both_fail() {
  local name=$1 env0=$2 env1=$3 port start p0 p1 c0 c1
  port=$(free_port)
  start=$(date +%s)
  # shellcheck disable=SC2086  # the variable lists are meant to split
  "${CLEAN[@]}" HOLMES_RANK=0 HOLMES_WORLD_SIZE=2 HOLMES_STORE=127.0.0.1:$port $env0 \
    "${BENCH[@]}" >"$WORK/${name}0" 2>&1 &
  p0=$!
  # shellcheck disable=SC2086
  "${CLEAN[@]}" HOLMES_RANK=1 HOLMES_WORLD_SIZE=2 HOLMES_STORE=127.0.0.1:$port $env1 \
    "${BENCH[@]}" >"$WORK/${name}1" 2>&1 &
  p1=$!
  set +e
  wait $p0; c0=$?
  wait $p1; c1=$?
  set -e
  [ "$c0" != 0 ] && [ "$c1" != 0 ] || { cat "$WORK/${name}0" "$WORK/${name}1"; fail "a rank succeeded"; }
  [ $(( $(date +%s) - start )) -lt 20 ] || fail "disagreement took too long to report"
}

echo "== ranks that disagree fail on both sides, naming each other"
both_fail r "HOLMES_TRANSPORT=tcp" ""
expect_contains "$WORK/r0" "HM_ERR_MISMATCH"
expect_contains "$WORK/r1" "HM_ERR_MISMATCH"
expect_contains "$WORK/r0" "rank 1 runs with HOLMES_TRANSPORT=auto"
expect_contains "$WORK/r1" "rank 0 runs with HOLMES_TRANSPORT=tcp"

echo "== ranks with different HOLMES_ALGO fail at init, naming the variable (no hang)"
both_fail a "HOLMES_ALGO=rd" "HOLMES_ALGO=ring"
expect_contains "$WORK/a0" "rank 1 runs with HOLMES_ALGO='ring', this rank (rank 0) with 'rd'"
expect_contains "$WORK/a1" "HM_ERR_MISMATCH"

echo "== a bad setting on one rank fails every rank at init, naming it"
both_fail b "" "HOLMES_REDUCE_ISA=fastest"
expect_contains "$WORK/b1" "HOLMES_REDUCE_ISA"
expect_contains "$WORK/b0" "HOLMES_REDUCE_ISA"

echo "== a forced transport this machine cannot run"
for kind in verbs; do
  set +e
  "${CLEAN[@]}" HOLMES_TRANSPORT=$kind "$BIN/holmes-run" -n 2 --timeout 60 -- "${BENCH[@]}" \
    >"$WORK/forced" 2>&1
  code=$?
  set -e
  if [ "$code" = 0 ]; then
    # Only acceptable where the machine really has an RDMA device.
    ls /sys/class/infiniband/* >/dev/null 2>&1 || fail "HOLMES_TRANSPORT=$kind ran without a device"
  else
    expect_contains "$WORK/forced" "HM_ERR_UNSUPPORTED"
    expect_contains "$WORK/forced" "HOLMES_TRANSPORT=$kind but this rank cannot run it"
  fi
done

echo "== a bad value"
set +e
"${CLEAN[@]}" HOLMES_TRANSPORT=carrier-pigeon "$BIN/holmes-run" -n 1 -- "${BENCH[@]}" \
  >"$WORK/bad" 2>&1
code=$?
set -e
[ "$code" != 0 ] || fail "a bad HOLMES_TRANSPORT was accepted"
expect_contains "$WORK/bad" "HOLMES_TRANSPORT is 'carrier-pigeon'"

echo "== forcing tcp works"
"${CLEAN[@]}" HOLMES_TRANSPORT=tcp HOLMES_LOG_LEVEL=info "$BIN/holmes-run" -n 2 -- "${BENCH[@]}" --check \
  >"$WORK/tcp" 2>&1 || { cat "$WORK/tcp"; fail "forced tcp failed"; }
expect_contains "$WORK/tcp" "tcp -> 1 (forced by HOLMES_TRANSPORT=tcp)"
expect_contains "$WORK/tcp" "Out of bounds values : 0 OK"
echo "transport choice: all checks passed"
