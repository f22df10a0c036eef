#!/usr/bin/env bash
# Fault injection over real processes and sockets, each scenario REPEAT times in a row (default 2;
# `make test-faults` runs 10): a rank killed (SIGKILL) or frozen (SIGSTOP) in the middle of a
# stream of allreduces, and a stranger with the wrong token. Every survivor must fail its blocked
# call with the right status, naming the peer, within the timeout + 2 s of the fault; the
# stranger is refused and the job finishes undisturbed. Then a host's link taken down in an
# emulated namespace cluster (link_down_test.sh, REPEAT times; skipped without root/netns).
# HOLMES_FAULT_SCENARIOS picks among "processes link-down" (default both; ctest registers them as
# faults.inject and faults.link_down).
# Usage: faults_test.sh BIN_DIR [REPEAT]
source "$(dirname "$0")/../integration/lib.sh"
BIN=$1
REPEAT=${2:-${HOLMES_FAULT_REPEAT:-2}}
SCENARIOS=" ${HOLMES_FAULT_SCENARIOS:-processes link-down} "
RANKS=3
TIMEOUT_MS=3000
BOUND_MS=$((TIMEOUT_MS + 2000))
CLEAN=(env -u HOLMES_RANK -u HOLMES_WORLD_SIZE -u HOLMES_STORE -u HOLMES_TOKEN
       -u HOLMES_STORE_SERVE -u HOLMES_TRANSPORT -u HOLMES_TOPOLOGY)

# run_job NAME FAULT EXPECT: ranks 0..RANKS-1, rank 1 the victim; outputs in $WORK/NAME.<rank>.
# A job whose store port was taken between free_port and rank 0's listen (tests run in
# parallel) is started again on another port.
run_job() {
  local attempt
  for attempt in 1 2 3; do
    run_job_once "$@" && return 0
    grep -qs "Address already in use" "$WORK/$1".* || break
    echo "  (store port taken by another test: again)"
  done
  cat "$WORK/$1".*
  fail "$1: a survivor did not see the fault as expected"
}

# With HIER=1 every rank is its own host, rank 0 in island i0 and ranks 1 and 2 in i1, and the
# allreduces (4 MiB) take the hierarchical algorithm in segments on their own threads. Both
# survivors exchange data with the victim: rank 0 across the islands, rank 2 inside i1.
hier_env() {
  [ -n "${HIER:-}" ] && echo "HOLMES_HOST=fault-h$1 HOLMES_ISLAND=i$(($1 > 0)) HOLMES_ALGO=hier"
}

run_job_once() {
  local name=$1 fault=$2 expect=$3 port pids=() r code ok=0
  port=$(free_port)
  for r in $(seq 0 $((RANKS - 1))); do
    "${CLEAN[@]}" HOLMES_RANK=$r HOLMES_WORLD_SIZE=$RANKS HOLMES_STORE=127.0.0.1:$port \
      HOLMES_TOKEN=job-token HOLMES_TIMEOUT_MS=$TIMEOUT_MS HOLMES_TRANSPORT=${TRANSPORT:-auto} \
      $(hier_env "$r") \
      "$BIN/holmes_fault_rank" --fault "$fault" --victim 1 --after 30 --bound-ms $BOUND_MS \
      --expect "$expect" --stamp "$WORK/$name.stamp" ${HIER:+--count 1048576} \
      >"$WORK/$name.$r" 2>&1 &
    pids+=($!)
  done
  for r in 0 2; do
    set +e
    wait "${pids[$r]}"
    code=$?
    set -e
    [ "$code" = 0 ] && grep -q "$expect" "$WORK/$name.$r" && grep -q "rank 1" "$WORK/$name.$r" ||
      ok=1
  done
  kill -9 "${pids[1]}" 2>/dev/null || true  # the frozen victim
  wait "${pids[1]}" 2>/dev/null || true
  [ "$ok" = 0 ] || return 1
  grep -h "after" "$WORK/$name".0 "$WORK/$name".2 | sed 's/^/  /'
}

if [[ $SCENARIOS == *" processes "* ]]; then
  for transport in tcp shm; do
    for i in $(seq 1 "$REPEAT"); do
      echo "== $transport: a rank killed (SIGKILL), run $i/$REPEAT"
      TRANSPORT=$transport run_job "kill-$transport-$i" kill HM_ERR_PEER_FAILED
      echo "== $transport: a rank frozen (SIGSTOP), run $i/$REPEAT"
      TRANSPORT=$transport run_job "stop-$transport-$i" stop HM_ERR_TIMEOUT
    done
  done

  for i in $(seq 1 "$REPEAT"); do
    echo "== two islands, hierarchical allreduce in segments: a rank killed, run $i/$REPEAT"
    HIER=1 TRANSPORT=auto run_job "kill-hier-$i" kill HM_ERR_PEER_FAILED
  done

  echo "== a stranger with the wrong token is refused; the job is undisturbed"
  port=$(free_port)
  for r in 0 1; do
    "${CLEAN[@]}" HOLMES_RANK=$r HOLMES_WORLD_SIZE=2 HOLMES_STORE=127.0.0.1:$port \
      HOLMES_TOKEN=job-token HOLMES_TIMEOUT_MS=20000 \
      "$BIN/holmes_fault_rank" --fault none --iterations 2000 >"$WORK/job.$r" 2>&1 &
    eval "job$r=\$!"
  done
  set +e
  "${CLEAN[@]}" HOLMES_RANK=1 HOLMES_WORLD_SIZE=2 HOLMES_STORE=127.0.0.1:$port \
    HOLMES_TOKEN=wrong-token HOLMES_TIMEOUT_MS=5000 HOLMES_STORE_SERVE=0 \
    "$BIN/holmes_fault_rank" --fault none --iterations 1 >"$WORK/stranger" 2>&1
  stranger=$?
  wait "$job0"; c0=$?
  wait "$job1"; c1=$?
  set -e
  [ "$stranger" != 0 ] || fail "the stranger joined"
  expect_contains "$WORK/stranger" "HM_ERR_AUTH"
  [ "$c0" = 0 ] && [ "$c1" = 0 ] || { cat "$WORK/job.0" "$WORK/job.1"; fail "the job was disturbed"; }
  expect_contains "$WORK/job.0" "finished 2000 iterations"
fi

if [[ $SCENARIOS == *" link-down "* ]]; then
  set +e
  # Over tcp alone, then with the transports Holmes picks (shm between the ranks of a host).
  for transport in tcp auto; do
    HOLMES_FAULT_TRANSPORT=$transport "$(dirname "$0")/link_down_test.sh" "$BIN" "$REPEAT"
    code=$?
    [ "$code" = 77 ] && echo "(link down: skipped, it needs root and network namespaces)"
    [ "$code" = 0 ] || [ "$code" = 77 ] || fail "link down over $transport (exit $code)"
  done
  set -e
fi
echo "faults: ok"
