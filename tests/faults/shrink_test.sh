#!/usr/bin/env bash
# Recovery from a lost rank (issue 27), each scenario REPEAT times in a row (default 1; `make
# test-faults` runs 10): ranks run checked allreduces, a victim is killed (SIGKILL), frozen
# (SIGSTOP) or revokes the communicator, and the others shrink with HM_SHRINK_FAILED and go on
# with exact results on the new communicator (shrink_rank.cpp). Over tcp and shm at 4 and 8
# ranks, and the mixed layout (two hosts of two ranks: shm inside a host, tcp between); a second
# rank dying during the agreement; a frozen rank woken after the shrink is refused and disturbs
# nobody; a revoke ends the others' calls with HM_ERR_ABORTED at once and keeps every rank; a
# replacement process joins the survivors (hm_comm_grow / hm_comm_join) in the victim's place.
# Prints each survivor's time from the fault to its first checked allreduce after the shrink.
# Usage: shrink_test.sh BIN_DIR [REPEAT]
source "$(dirname "$0")/../integration/lib.sh"
BIN=$1
REPEAT=${2:-${HOLMES_FAULT_REPEAT:-1}}
TIMEOUT_MS=${HOLMES_SHRINK_TIMEOUT_MS:-5000}
CLEAN=(env -u HOLMES_RANK -u HOLMES_WORLD_SIZE -u HOLMES_STORE -u HOLMES_TOKEN
       -u HOLMES_STORE_SERVE -u HOLMES_TRANSPORT -u HOLMES_TOPOLOGY -u HOLMES_HOST
       -u HOLMES_ISLAND)

# run_case NAME FAULT RANKS TRANSPORT VICTIM [VICTIM2]: outputs in $WORK/NAME.<rank>.
run_case() {
  local name=$1 fault=$2 ranks=$3 transport=$4 victim=$5 victim2=${6:--1}
  local port r pids=() code ok=0 layout="" joiner=""
  port=$(free_port)
  rm -f "$WORK/$name.recovered"
  for r in $(seq 0 $((ranks - 1))); do
    # mixed: hosts of two ranks, one island per host: shm inside a host, tcp between.
    [ "$transport" = mixed ] && layout="HOLMES_HOST=shrink-h$((r / 2)) HOLMES_ISLAND=i$((r / 2))"
    "${CLEAN[@]}" HOLMES_RANK=$r HOLMES_WORLD_SIZE=$ranks HOLMES_STORE=127.0.0.1:$port \
      HOLMES_TOKEN=job-token HOLMES_TIMEOUT_MS=$TIMEOUT_MS \
      HOLMES_TRANSPORT=$([ "$transport" = mixed ] && echo auto || echo "$transport") $layout \
      "$BIN/holmes_shrink_rank" --fault "$fault" --victim "$victim" --victim2 "$victim2" \
      --after 15 --after2 20 --stamp "$WORK/$name.stamp" --recovered "$WORK/$name.recovered" \
      >"$WORK/$name.$r" 2>&1 &
    pids+=($!)
  done
  if [ "$fault" = grow ]; then
    # The replacement: started once the victim is dead, it joins the survivors' grow.
    for _ in $(seq 1 400); do
      [ -e "$WORK/$name.stamp" ] && break
      sleep 0.05
    done
    "${CLEAN[@]}" HOLMES_STORE=127.0.0.1:$port HOLMES_TOKEN=job-token \
      HOLMES_TIMEOUT_MS=$TIMEOUT_MS HOLMES_TRANSPORT=$transport \
      "$BIN/holmes_shrink_rank" --join --fault grow --victim "$victim" --after2 20 \
      --stamp "$WORK/$name.stamp" >"$WORK/$name.joiner" 2>&1 &
    joiner=$!
  fi
  if [ "$fault" = stop ]; then
    # Wake the frozen victim once the others work on the new communicator.
    for _ in $(seq 1 $((TIMEOUT_MS / 50 * 4))); do
      [ -e "$WORK/$name.recovered" ] && break
      sleep 0.05
    done
    kill -CONT "${pids[$victim]}" 2>/dev/null || true
  fi
  for r in $(seq 0 $((ranks - 1))); do
    set +e
    wait "${pids[$r]}"
    code=$?
    set -e
    if [ "$r" = "$victim2" ] || { [ "$r" = "$victim" ] && [ "$fault" != revoke ] && [ "$fault" != stop ]; }; then
      continue  # killed
    fi
    [ "$code" = 0 ] || { echo "  rank $r exited $code"; ok=1; }
  done
  if [ "$fault" = grow ]; then
    set +e
    wait "$joiner"
    code=$?
    set -e
    [ "$code" = 0 ] || { echo "  the joiner exited $code"; ok=1; }
  fi
  if [ "$ok" != 0 ]; then
    tail -n 20 "$WORK/$name".*
    fail "$name: recovery failed"
  fi
  grep -h "recovered" "$WORK/$name".* | sed 's/^/  /' | head -n 3
}

# SHRINK_CASE="FAULT RANKS TRANSPORT VICTIM [VICTIM2]": that case alone (while debugging).
if [ -n "${SHRINK_CASE:-}" ]; then
  # shellcheck disable=SC2086
  run_case one $SHRINK_CASE
  exit 0
fi

for i in $(seq 1 "$REPEAT"); do
  for transport in tcp shm; do
    for ranks in 4 8; do
      echo "== $transport, $ranks ranks: rank $((ranks - 2)) killed, the rest shrink (run $i/$REPEAT)"
      run_case "kill-$transport-$ranks-$i" kill "$ranks" "$transport" $((ranks - 2))
    done
    echo "== $transport, 4 ranks: rank 2 revokes; every rank stays (run $i/$REPEAT)"
    run_case "revoke-$transport-$i" revoke 4 "$transport" 2
  done
  for ranks in 4 8; do
    echo "== mixed layout, $ranks ranks: rank 1 killed (run $i/$REPEAT)"
    run_case "kill-mixed-$ranks-$i" kill "$ranks" mixed 1
  done
  echo "== tcp, 8 ranks: rank 3 killed, rank 5 dies during the agreement (run $i/$REPEAT)"
  run_case "kill2-tcp-$i" kill2 8 tcp 3 5
  echo "== tcp, 4 ranks: rank 1 killed; the survivors shrink, then grow by a replacement (run $i/$REPEAT)"
  run_case "grow-tcp-$i" grow 4 tcp 1
  echo "== tcp, 4 ranks: rank 2 frozen, woken after the shrink (run $i/$REPEAT)"
  run_case "stop-tcp-$i" stop 4 tcp 2
  expect_contains "$WORK/stop-tcp-$i.2" "left out after waking, as expected"
  for layout in "tcp 8 5" "shm 4 2" "shm 8 5" "mixed 4 2" "mixed 8 5"; do
    set -- $layout
    echo "== $1, $2 ranks: rank $3 frozen, woken after the shrink (run $i/$REPEAT)"
    run_case "stop-$1-$2-$i" stop "$2" "$1" "$3"
    expect_contains "$WORK/stop-$1-$2-$i.$3" "left out after waking, as expected"
  done
done
echo "shrink: ok"
