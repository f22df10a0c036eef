#!/usr/bin/env bash
# Checks that bench/emulate/cluster.sh leaves nothing behind, in seconds, as root:
#   1. for every mix in bench/emulate/mixes: `cluster.sh run MIX -- true` succeeds, takes less
#      than LIMIT seconds, and no hm-<its pid>-* namespace and no state file remain;
#   2. `cluster.sh run` stopped by SIGTERM and by SIGINT while its command (a sleep inside a
#      host's namespace) runs: the namespaces, the state file and the sleep are gone;
#   3. `cluster.sh up` + `down`, and `cleanup` after a `kill -9` of a running `cluster.sh run`.
# Exits non-zero on the first leftover or failure (and removes what it found).
#
# Usage: bench/emulate/selftest.sh [-B BUILD] [-l LIMIT_SECONDS]   (default limit 20 per step)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${HOLMES_BUILD:-$here/../../build}"
limit=20
while getopts "B:l:h" opt; do
  case $opt in
    B) build="$OPTARG" ;;
    l) limit="$OPTARG" ;;
    *)
      awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"
      exit 2
      ;;
  esac
done
((EUID == 0)) || {
  echo "selftest: needs root" >&2
  exit 2
}
cluster=("$here/cluster.sh" -B "$build")
failures=0
fail() {
  printf 'selftest: FAIL: %s\n' "$*" >&2
  failures=$((failures + 1))
}
ok() { printf 'selftest: ok: %s\n' "$*" >&2; }

# leftovers PID: what a cluster made by process PID left (namespaces, state file).
leftovers() {
  local pid=$1 left
  left="$(ip netns list | awk -v p="hm-$pid-" 'index($1, p) == 1 {print $1}' | tr '\n' ' ')"
  [[ -e /run/holmes-emulate/$pid.state ]] && left+="/run/holmes-emulate/$pid.state"
  printf '%s' "$left"
}
remove_leftovers() {
  local pid=$1 ns
  for ns in $(ip netns list | awk -v p="hm-$pid-" 'index($1, p) == 1 {print $1}'); do
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -f "/run/holmes-emulate/$pid.state"
}

# running PID: the process exists and is not a zombie (this VM's init reaps orphans late).
running() {
  [[ -e /proc/$1 && "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]]
}

# Background jobs of a script ignore SIGINT unless job control is on: with it, each job is its
# own process group and can be sent SIGINT like a Ctrl-C.
set -m

# 1. Every mix, a trivial command.
for mix in "$here"/mixes/*.yaml; do
  name="$(basename "$mix" .yaml)"
  begun=$(date +%s.%N)
  "${cluster[@]}" run "$mix" -- true >/dev/null 2>"/tmp/selftest-$$.err" &
  pid=$!
  status=0
  timeout "$limit" tail --pid="$pid" -f /dev/null || status=$?
  if ((status != 0)); then
    kill -TERM "$pid" 2>/dev/null || true
    fail "$name: cluster.sh run -- true still runs after ${limit}s"
  fi
  code=0
  wait "$pid" || code=$?
  took=$(awk -v b="$begun" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - b}')
  left="$(leftovers "$pid")"
  if ((code != 0)); then
    fail "$name: exit status $code: $(tail -n 3 "/tmp/selftest-$$.err")"
  elif [[ -n $left ]]; then
    fail "$name: left $left"
  else
    ok "$name: up and down in ${took}s, nothing left"
  fi
  remove_leftovers "$pid"
done
rm -f "/tmp/selftest-$$.err"

# 2. A signal while the command runs inside a namespace.
mix="$here/mixes/two-islands.yaml"
for signal in TERM INT; do
  "${cluster[@]}" run "$mix" -- "$here/cluster.sh" exec "$mix" 1 sleep 300 >/dev/null 2>&1 &
  pid=$!
  sleeper=""
  for _ in $(seq 1 $((limit * 10))); do
    sleeper="$(ip netns pids "hm-$pid-1" 2>/dev/null | head -n 1 || true)"
    [[ -n $sleeper ]] && break
    sleep 0.1
  done
  if [[ -z $sleeper ]]; then
    fail "SIG$signal: the command never started inside hm-$pid-1"
    kill -TERM "$pid" 2>/dev/null || true
  else
    kill "-$signal" "$pid"
  fi
  code=0
  timeout "$limit" tail --pid="$pid" -f /dev/null || fail "SIG$signal: cluster.sh did not exit"
  wait "$pid" || code=$?
  left="$(leftovers "$pid")"
  if [[ -n $left ]]; then
    fail "SIG$signal: left $left"
  elif [[ -n $sleeper ]] && running "$sleeper"; then
    fail "SIG$signal: the command (pid $sleeper) still runs"
    kill -9 "$sleeper" 2>/dev/null || true
  elif [[ -n $sleeper ]]; then
    ok "SIG$signal during the command: exit status $code, namespaces and command gone"
  fi
  remove_leftovers "$pid"
done

# 3a. up, exec, down.
out="$("${cluster[@]}" up "$here/mixes/pure-ethernet.yaml" 2>&1)" || fail "up: $out"
state="$(ls -t /run/holmes-emulate/*.state 2>/dev/null | head -n 1 || true)"
pid="$(basename "${state:-x.state}" .state)"
if [[ -n $state ]]; then
  addr="$("$here/cluster.sh" --state "$state" exec x eth-2 sh -c 'echo $EMULATE_ADDR' || true)"
  [[ $addr == 10.77.1.12 ]] || fail "exec: eth-2's address is '$addr', not 10.77.1.12"
  "$here/cluster.sh" --state "$state" down >/dev/null 2>&1 || fail "down failed"
  left="$(leftovers "$pid")"
  [[ -z $left ]] && ok "up, exec, down: nothing left" || fail "down left $left"
  remove_leftovers "$pid"
fi

# 3b. kill -9 of a running cluster.sh run, then cleanup.
sleep_pid_file="/tmp/selftest-$$.sleep"
rm -f "$sleep_pid_file"
"${cluster[@]}" run "$here/mixes/pure-ib.yaml" -- \
  sh -c "echo \$\$ >$sleep_pid_file; exec sleep 300" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 $((limit * 10))); do
  [[ -s $sleep_pid_file ]] && break
  sleep 0.1
done
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
# Nothing stops the command when its cluster.sh is killed with -9: stop it here.
[[ -s $sleep_pid_file ]] && kill "$(cat "$sleep_pid_file")" 2>/dev/null
rm -f "$sleep_pid_file"
[[ -n "$(leftovers "$pid")" ]] || fail "kill -9 left nothing to clean up (test did not start?)"
"$here/cluster.sh" cleanup >/dev/null 2>&1 || fail "cleanup failed"
left="$(leftovers "$pid")"
[[ -z $left ]] && ok "cleanup after kill -9: nothing left" || fail "cleanup left $left"
remove_leftovers "$pid"

if ((failures > 0)); then
  printf 'selftest: %d failure(s)\n' "$failures" >&2
  exit 1
fi
printf 'selftest: all passed\n' >&2
