# Sourced by the scripts that build their own namespace hosts (two-islands.sh, multi-nic.sh): the
# namespaces and processes they make, removed on exit, failure, Ctrl-C and SIGTERM; entering a
# namespace; tbf shaping; a Holmes store started inside one. Before sourcing, a script sets
#   netns_name     its name, the prefix of its messages ("two-islands")
#   prefix         the prefix of every namespace it makes ("hm-$$-"): cleanup checks none is left
#   netns_keep     1 keeps its temporary directory (logs) for a look afterwards
# and gets `tmp` (a fresh temporary directory), `background` (pids it starts: add them) and
# `made_ns` (filled by add_ns).
# shellcheck shell=bash

say() { printf '%s: %s\n' "$netns_name" "$*" >&2; }
die() {
  say "$*"
  exit 1
}

tmp="$(mktemp -d "/tmp/holmes-$netns_name.XXXXXX")"
background=() # pids of processes this script started that may still run
made_ns=()    # namespaces this script created
netns_cleanup() {
  local status=$? pid ns
  trap - EXIT INT TERM
  for pid in "${background[@]}"; do kill "$pid" 2>/dev/null || true; done
  for ns in "${made_ns[@]}"; do
    # Whatever still runs inside our namespaces was started by this script.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  done
  for pid in "${background[@]}"; do wait "$pid" 2>/dev/null || true; done
  # Deleting a namespace removes its veths (both ends: a veth pair dies with either end),
  # bridges and qdiscs.
  for ns in "${made_ns[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  local left
  left="$(ip netns list | awk -v p="$prefix" 'index($1, p) == 1 {print $1}')"
  if [[ -n $left ]]; then
    say "namespaces left behind: $left"
    status=1
  elif ((${#made_ns[@]} > 0)); then
    say "removed namespaces ${made_ns[*]}; ip netns list now: $(ip netns list | tr '\n' ' ')"
  fi
  if [[ ${netns_keep:-0} == 1 ]]; then say "kept logs in $tmp"; else rm -rf "$tmp"; fi
  exit "$status"
}
trap netns_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

in_ns() {
  local ns=$1
  shift
  ip netns exec "$ns" "$@"
}

add_ns() {
  ip netns add "$1"
  made_ns+=("$1")
  in_ns "$1" ip link set lo up
  # IPv6 would only add router solicitations and DAD to the links; rp_filter must not drop
  # traffic that arrives on an interface without an address (two-islands.sh's uplinks).
  in_ns "$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 \
    net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
}

# shape NS DEV MBIT: tbf on DEV's egress (0: left unshaped). Burst 256 KiB: smaller bursts fall
# short of the rate at Gbit speeds on veth.
shape() {
  (($3 > 0)) || return 0
  in_ns "$1" tc qdisc replace dev "$2" root tbf rate "${3}mbit" burst 256kb latency 50ms
}

# start_store NS ADDR LOG SECONDS: a holmes-store ($bin/holmes-store) in NS on ADDR, a random
# port and token, for SECONDS at most; sets store_pid, store_port and store_token once it listens.
start_store() {
  local ns=$1 addr=$2 log=$3 seconds=$4 tries=0
  store_port=$((30000 + RANDOM % 20000))
  store_token="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
  in_ns "$ns" timeout -k 5 "$seconds" "$bin/holmes-store" --host "$addr" --port "$store_port" \
    --token "$store_token" >"$log" 2>&1 &
  store_pid=$!
  background+=("$store_pid")
  until in_ns "$ns" bash -c "exec 3<>/dev/tcp/$addr/$store_port" 2>/dev/null; do
    kill -0 "$store_pid" 2>/dev/null || die "holmes-store did not start: $(cat "$log")"
    ((++tries < 50)) || die "holmes-store does not listen on $addr:$store_port"
    sleep 0.1
  done
}

stop_store() {
  kill "$store_pid" 2>/dev/null || true
  wait "$store_pid" 2>/dev/null || true
}
