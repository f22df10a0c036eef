#!/usr/bin/env bash
# A host's link goes down under a running job (issue 9), in an emulated cluster of network
# namespaces (bench/emulate/cluster.sh), each case REPEAT times in a row (default 2; `make
# test-faults` runs 10):
#   4x1  pure-ethernet mix: 4 hosts, one rank each
#   2x2  link_down_two_hosts.yaml: 2 hosts, two ranks each (the two ranks cut off together stay
#        connected to each other)
# All ranks run 4 KiB allreduces over tcp with a 3 s timeout; once they are busy, host 1's link
# goes down: inside its namespace (`ip link set isl down`) on odd runs, on the switch's side
# (`ip link set i1 down` in the switch namespace) on even runs. Every rank must fail its blocked
# call with HM_ERR_PEER_FAILED or HM_ERR_TIMEOUT within timeout + 2 s of the fault; the ranks on
# the other hosts must name a rank of host 1 and its link ("rank R (tcp ADDR:PORT") in
# hm_last_error_message. Prints each rank's time to detect. After every run no namespace of the
# cluster (hm-<pid>-*) and no state file may remain, whether the run passed or failed.
# Needs root and network namespaces: exits 77 (skipped) without them. HOLMES_FAULT_TRANSPORT
# (default tcp) sets HOLMES_TRANSPORT of the ranks: "auto" puts the ranks of a host on shm, and
# a rank blocked on its shm neighbour learns the cause from the reason that neighbour leaves in
# its segment when it closes.
#
# Usage: link_down_test.sh BIN_DIR [REPEAT]     (BIN_DIR holds holmes_fault_rank, holmes-topo)
#        link_down_test.sh --inside DIR SIDE    (run by cluster.sh inside the cluster)
TIMEOUT_MS=3000
BOUND_MS=$((TIMEOUT_MS + 2000))
TRANSPORT=${HOLMES_FAULT_TRANSPORT:-tcp}
VICTIM_HOST=1
STORE_PORT=29500 # inside the cluster's namespaces nothing else listens

# ---- inside the cluster: start the ranks, take the link down, judge ----------------------------
# DIR holds "bin" (BIN_DIR) and receives every rank's output (rank.R), the stamp, "result" (what
# failed) and "times" (the other hosts' ranks' times to detect, ms).
inside() {
  set -uo pipefail
  local dir=$1 side=$2 state=${CLUSTER_STATE:?run by cluster.sh}
  local bin
  bin=$(cat "$dir/bin")
  field() { awk -F'\t' -v k="$1" -v i="$2" -v c="$3" '$1 == k && $2 == i {print $c}' "$state"; }
  local switch victim_ns victim_addr store
  switch=$(awk -F'\t' '$1 == "switch" {print $2}' "$state")
  victim_ns=$(field ns "$VICTIM_HOST" 3)
  victim_addr=$(field host "$VICTIM_HOST" 6)
  store="$(field host 0 6):$STORE_PORT"
  awk -F'\t' '$1 == "prefix" {print $2}' "$state" >"$dir/prefix"
  local -a pids=() rank_host=() rank_local=()
  local rank host local_rank
  while IFS=$'\t' read -r _ rank host local_rank; do
    rank_host[rank]=$host
    rank_local[rank]=$local_rank
  done < <(awk -F'\t' '$1 == "rank"' "$state")
  local size=${#rank_host[@]}
  for rank in "${!rank_host[@]}"; do
    host=${rank_host[rank]}
    ip netns exec "$(field ns "$host" 3)" env -i PATH="$PATH" HOLMES_RANK="$rank" \
      HOLMES_WORLD_SIZE="$size" HOLMES_LOCAL_RANK="${rank_local[rank]}" \
      HOLMES_HOST="$(field host "$host" 3)" HOLMES_STORE="$store" HOLMES_TOKEN=link-down \
      HOLMES_TIMEOUT_MS=$TIMEOUT_MS HOLMES_TRANSPORT="$TRANSPORT" \
      "$bin/holmes_fault_rank" --fault external --after 200 --ready "$dir/ready" \
      --stamp "$dir/stamp" --bound-ms $BOUND_MS --expect HM_ERR_PEER_FAILED,HM_ERR_TIMEOUT \
      >"$dir/rank.$rank" 2>&1 &
    pids[rank]=$!
  done
  # Strike once the job is busy (rank 0 is 200 allreduces in); give up if it never gets there.
  local waited=0
  while [[ ! -e $dir/ready ]]; do
    if ((waited++ > 300)) || ! kill -0 "${pids[@]}" 2>/dev/null; then
      echo "the job did not start its allreduces" >"$dir/result"
      return 1
    fi
    sleep 0.1
  done
  date +%s%3N >"$dir/stamp.tmp" && mv "$dir/stamp.tmp" "$dir/stamp"
  if [[ $side == host ]]; then
    ip -n "$victim_ns" link set isl down || { echo "ip link set down failed" >"$dir/result"; return 1; }
  else
    ip -n "$switch" link set "i$VICTIM_HOST" down ||
      { echo "ip link set down failed" >"$dir/result"; return 1; }
  fi
  # Every rank must have returned by the bound; a rank still running then has hung.
  local deadline=$(($(date +%s%3N) + BOUND_MS + 3000)) status=0 code
  for rank in "${!pids[@]}"; do
    while kill -0 "${pids[rank]}" 2>/dev/null && (($(date +%s%3N) < deadline)); do sleep 0.05; done
    if kill -0 "${pids[rank]}" 2>/dev/null; then
      echo "rank $rank still blocked $((BOUND_MS + 3000)) ms after the link went down (hang)" \
        >>"$dir/result"
      kill -9 "${pids[rank]}" 2>/dev/null
      status=1
    fi
    code=0
    wait "${pids[rank]}" || code=$?
    if ((code != 0)); then
      echo "rank $rank: exit $code (not PEER_FAILED/TIMEOUT within ${BOUND_MS} ms)" >>"$dir/result"
      status=1
    fi
    # The ranks of the other hosts must name a rank of the victim host and its tcp link.
    [[ ${rank_host[rank]} == "$VICTIM_HOST" ]] && continue
    if grep -qE "^rank $rank: .*rank [0-9]+ \(tcp ${victim_addr//./\\.}:[0-9]+" "$dir/rank.$rank"
    then
      sed -nE "s/^rank $rank: .* after ([0-9]+) ms.*/\1/p" "$dir/rank.$rank" >>"$dir/times"
    else
      echo "rank $rank: the message names no rank of host $VICTIM_HOST ($victim_addr) with its" \
        "link" >>"$dir/result"
      status=1
    fi
  done
  return "$status"
}

if [[ ${1:-} == --inside ]]; then
  inside "$2" "$3"
  exit $?
fi

# ---- outside: one cluster per run -------------------------------------------------------------
source "$(dirname "$0")/../integration/lib.sh"
BIN=$(cd "${1:?usage: link_down_test.sh BIN_DIR [REPEAT]}" && pwd)
REPEAT=${2:-${HOLMES_FAULT_REPEAT:-2}}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CLUSTER=$ROOT/bench/emulate/cluster.sh

if [ "$(id -u)" -ne 0 ]; then echo "skipped: the link-down test needs root"; exit 77; fi
probe="hm-probe-$$"
if ! ip netns add "$probe" 2>/dev/null; then
  echo "skipped: no network namespaces here"
  exit 77
fi
ip netns del "$probe"
for tool in ip tc; do command -v "$tool" >/dev/null || fail "$tool not found"; done
[ -x "$BIN/holmes_fault_rank" ] && [ -x "$BIN/holmes-topo" ] ||
  fail "$BIN lacks holmes_fault_rank or holmes-topo"

# A cluster.sh stopped with this script (ctest's timeout, Ctrl-C) tears its cluster down itself.
cluster_pid=""
stop_cluster() {
  [ -n "$cluster_pid" ] && kill -TERM "$cluster_pid" 2>/dev/null && wait "$cluster_pid" || true
}
trap 'stop_cluster; cleanup' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# run_case NAME MIX SIDE: one cluster, one link down; prints the times to detect.
run_case() {
  local name=$1 mix=$2 side=$3 dir="$WORK/$1" code=0 left
  mkdir -p "$dir"
  echo "$BIN" >"$dir/bin"
  HOLMES_TOPO="$BIN/holmes-topo" "$CLUSTER" run "$mix" -- "$HERE/link_down_test.sh" --inside \
    "$dir" "$side" >"$dir/cluster.log" 2>&1 &
  cluster_pid=$!
  wait "$cluster_pid" || code=$?
  # Nothing of the cluster may outlive it, on any path.
  left="$(ip netns list | awk -v p="hm-$cluster_pid-" 'index($1, p) == 1 {print $1}' | xargs)"
  [ -e "/run/holmes-emulate/$cluster_pid.state" ] && left+=" /run/holmes-emulate/$cluster_pid.state"
  cluster_pid=""
  grep -h "^rank [0-9]*: " "$dir"/rank.* 2>/dev/null | sed -E 's/^/  /; s/(.{0,400}).*/\1/' ||
    true
  if [ "$code" != 0 ]; then
    cat "$dir/cluster.log" "$dir"/rank.* 2>/dev/null | tail -n 40
    [ -e "$dir/result" ] && sed 's/^/  FAILED: /' "$dir/result"
    [ -z "${left// /}" ] || echo "  and the cluster left: $left"
    fail "$name: link down not reported as required (exit $code)"
  fi
  [ -z "${left// /}" ] || fail "$name: the cluster left $left behind"
  cat "$dir/times" >>"$WORK/times"
}

: >"$WORK/times"
for i in $(seq 1 "$REPEAT"); do
  side=$([ $((i % 2)) = 1 ] && echo host || echo switch)
  echo "== 4 hosts x 1 rank ($TRANSPORT): host 1's link down on the $side side, run $i/$REPEAT"
  run_case "4x1-$i" "$ROOT/bench/emulate/mixes/pure-ethernet.yaml" "$side"
  echo "== 2 hosts x 2 ranks ($TRANSPORT): host 1's link down on the $side side, run $i/$REPEAT"
  run_case "2x2-$i" "$HERE/link_down_two_hosts.yaml" "$side"
done
sort -n "$WORK/times" | awk '{t[NR] = $1} END {
  printf "link down: %d runs; ranks of the other hosts detected it in %d-%d ms (median %d ms)\n",
    '"$((REPEAT * 2))"', t[1], t[NR], t[int((NR + 1) / 2)]}'
echo "link down: ok"
