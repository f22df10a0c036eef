#!/usr/bin/env bash
# An emulated cluster built from a topology file (docs/topology.md), as root, on this machine:
# one network namespace per host of the file, the hosts of an island on one bridge, the islands
# joined through a second path shaped per host, and every link held to the file's rates divided
# by its emulation_scale with tc tbf. Removes all of it when done, also after a failure, Ctrl-C
# or SIGTERM.
#
# Usage: bench/emulate/cluster.sh [OPTIONS] COMMAND ...
#   up TOPOLOGY              build the cluster, print "host -> namespace address" lines, write a
#                            state file (/run/holmes-emulate/<pid>.state) and leave it up
#   exec TOPOLOGY HOST CMD.. run CMD in HOST's namespace (HOST: a host name of the file or its
#                            index; TOPOLOGY "-": the cluster of $CLUSTER_STATE, or the only
#                            one); CLUSTER_STATE, EMULATE_HOST and EMULATE_ADDR are set for it
#   down [TOPOLOGY]          remove a cluster `up` left (the one of TOPOLOGY, or the only one)
#   run TOPOLOGY -- CMD..    build, run CMD (in the root namespace, with CLUSTER_STATE set: use
#                            `exec` or `ip netns exec` to enter hosts), then remove everything;
#                            exits with CMD's status (1 if anything was left behind)
#   cleanup                  remove every hm-<pid>-* namespace (and the processes in it) whose
#                            creating process <pid> is gone: what a killed run (kill -9) or an
#                            `up` without `down` left; clusters of running scripts are kept
#   status                   list the clusters (state files) and hm-* namespaces present
# Options (before COMMAND):
#   -B BUILD        build directory with bin/holmes-topo (default: $HOLMES_BUILD, <repo>/build,
#                   or holmes-topo on PATH); holmes-topo parses the file: YAML in one place
#   --ranks N       N / hosts ranks per host instead of the file's gpus (state file, rank lines)
#   --shape WHAT    all (default): island links and uplinks; uplinks: only between islands
#                   (island links run at veth speed); none: nothing shaped (a CPU-bound baseline)
#   --state FILE    the state file to write (up, run) or read (exec, down)
#
# Layout (namespaces hm-<pid>-<n>, n = the host's index in the file; nothing is added to the
# root namespace, and addresses exist only inside these namespaces):
#   hm-<pid>-sw   the switches: bridge br<i> per island i, and brx between islands
#   hm-<pid>-<k>  host k: veth "isl" to its island's bridge with 10.77.<i+1>.<k+10>/24; with
#                 several islands also veth "uplink" to brx, without an address: the other
#                 islands' /24 are routed out of it (their hosts answer ARP there too)
# Rates (topology_plan.py, the shaping layer's rules): a host's link of class C carries C's
# Gbit/s x its NICs of class C (at least 1) / emulation_scale, for the whole host; inside an
# island C is the island's link_class (an ethernet island without one: inter_island_link),
# between islands inter_island_link. Each link is shaped with tbf at both ends (the host's egress
# and the switch port's egress towards the host), so a host has that rate up and down. tbf's
# goodput is about 0.956 x the rate (L2 framing); its burst is 256 KiB (400 us above 5 Gbit/s).
# Latency: this kernel has no netem, so the links add none. Holmes can add the file's latencies
# itself with its shaping layer (HOLMES_TOPOLOGY + HOLMES_HOST, HOLMES_SHAPING unset); the peers
# (Gloo, Open MPI, torch) get none. This machine's veths carry about 20 Gbit/s in total (CPU
# bound): topology_plan.py notes a file whose links add up to more.
#
# State file (tab-separated, the lines of topology_plan.py plus): "pid PID", "prefix hm-PID-",
# "file PATH", "switch NS", and per host "ns INDEX NAMESPACE". bench/compare.sh reads it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
state_dir=/run/holmes-emulate
python=/usr/bin/python3

say() { printf 'cluster: %s\n' "$*" >&2; }
die() {
  say "$*"
  exit 1
}
usage() {
  awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"
  exit 2
}

build="${HOLMES_BUILD:-$root/build}"
ranks_opt=""
shape=all
state_file=""
while (($# > 0)); do
  case $1 in
    -B) build="${2:?-B wants a directory}"; shift 2 ;;
    --ranks) ranks_opt="${2:?--ranks wants a number}"; shift 2 ;;
    --shape) shape="${2:?--shape wants all, uplinks or none}"; shift 2 ;;
    --state) state_file="${2:?--state wants a file}"; shift 2 ;;
    -h | --help) usage ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
  esac
done
(($# > 0)) || usage
command=$1
shift
[[ $shape =~ ^(all|uplinks|none)$ ]] || die "--shape wants all, uplinks or none, not '$shape'"
[[ -z $ranks_opt || $ranks_opt =~ ^[1-9][0-9]*$ ]] || die "--ranks wants a positive number"

need_root() { ((EUID == 0)) || die "$command needs root (network namespaces, veth, tc)"; }

in_ns() {
  local ns=$1
  shift
  ip netns exec "$ns" "$@"
}

holmes_topo() {
  local tool
  for tool in "${HOLMES_TOPO:-}" "$build/bin/holmes-topo" "$(command -v holmes-topo || true)"; do
    [[ -n $tool && -x $tool ]] && { printf '%s\n' "$tool"; return 0; }
  done
  die "holmes-topo not found in $build/bin or on PATH; build it (ninja -C BUILD holmes-topo) or
  pass -B BUILD"
}

# The plan of TOPOLOGY (topology_plan.py's lines) on stdout; dies with holmes-topo's error.
plan_of() {
  local file=$1 json
  [[ -f $file ]] || die "no topology file '$file'"
  json="$("$(holmes_topo)" --file "$file" --json)" || die "holmes-topo cannot read '$file'"
  local -a args=()
  [[ -n $ranks_opt ]] && args=(--ranks "$ranks_opt")
  "$python" "$here/topology_plan.py" "${args[@]}" <<<"$json" || die "cannot plan '$file'"
}

# ---- building ------------------------------------------------------------------------------
made_ns=()    # namespaces this process created (removed by teardown)
prefix=""
# tbf's burst: the bytes that may leave at veth speed after an idle spell, so messages up to
# about this size are not held to the rate. Smaller bursts fall short of the rate: 64 KiB gave
# only 4 of 5-10 Gbit/s, and at 0.5 Gbit/s two flows in opposite directions (data and the other
# flow's ACKs in one queue, as in every allreduce) got 250-360 Mbit/s each with 64 KiB and
# 478-485 with 256 KiB. So 256 KiB, or 400 us of the rate above 5 Gbit/s;
# EMULATE_TBF_BURST (bytes) and EMULATE_TBF_LATENCY (the queue, tc syntax) override.
tbf() { # tbf NS DEV KBIT
  local kbit=$3 burst
  burst=$((kbit * 1000 / 8 * 400 / 1000000))
  ((burst >= 262144)) || burst=262144
  burst="${EMULATE_TBF_BURST:-$burst}"
  in_ns "$1" tc qdisc replace dev "$2" root tbf rate "${kbit}kbit" burst "$burst" \
    latency "${EMULATE_TBF_LATENCY:-50ms}"
}

add_ns() {
  ip netns add "$1"
  made_ns+=("$1")
  in_ns "$1" ip link set lo up
  # No IPv6 (router solicitations, DAD); rp_filter must not drop the other islands' traffic
  # that arrives on "uplink", an interface without an address.
  in_ns "$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 \
    net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
}

# build_cluster TOPOLOGY STATE: namespaces, links, shaping, the state file.
build_cluster() {
  local file=$1 state=$2 plan
  plan="$(plan_of "$file")"
  prefix="hm-$$-"
  local sw="${prefix}sw"
  local -a island_subnet=() host_name=() host_island=() host_addr=() host_ikbit=() host_ukbit=()
  local kind a b c e f g h
  local islands=0
  while IFS=$'\t' read -r kind a b c _ e f g h _; do
    case $kind in
      island) island_subnet[a]=$e; islands=$((islands + 1)) ;;
      host) host_name[a]=$b; host_island[a]=$c; host_addr[a]=$e; host_ikbit[a]=$g
        host_ukbit[a]=$h ;;
      note) say "note: $a" ;;
    esac
  done <<<"$plan"
  add_ns "$sw"
  local i k ns j
  for ((i = 0; i < islands; i++)); do
    in_ns "$sw" ip link add "br$i" type bridge
    in_ns "$sw" ip link set "br$i" up
  done
  if ((islands > 1)); then
    in_ns "$sw" ip link add brx type bridge
    in_ns "$sw" ip link set brx up
  fi
  for k in "${!host_name[@]}"; do
    ns="$prefix$k"
    i=${host_island[k]}
    add_ns "$ns"
    ip link add name isl netns "$ns" type veth peer name "i$k" netns "$sw"
    in_ns "$sw" ip link set "i$k" master "br$i" up
    in_ns "$ns" ip addr add "${host_addr[k]}/24" dev isl
    in_ns "$ns" ip link set isl up
    if [[ $shape == all ]]; then
      tbf "$ns" isl "${host_ikbit[k]}"
      tbf "$sw" "i$k" "${host_ikbit[k]}"
    fi
    if ((islands > 1)); then
      ip link add name uplink netns "$ns" type veth peer name "x$k" netns "$sw"
      in_ns "$sw" ip link set "x$k" master brx up
      in_ns "$ns" ip link set uplink up
      for ((j = 0; j < islands; j++)); do
        ((j == i)) && continue
        in_ns "$ns" ip route add "${island_subnet[j]}" dev uplink src "${host_addr[k]}"
      done
      if [[ $shape != none ]]; then
        tbf "$ns" uplink "${host_ukbit[k]}"
        tbf "$sw" "x$k" "${host_ukbit[k]}"
      fi
    fi
  done
  check_network
  mkdir -p "$(dirname "$state")"
  {
    printf '%s\n' "$plan"
    printf 'pid\t%s\nprefix\t%s\nfile\t%s\nswitch\t%s\nshape\t%s\n' "$$" "$prefix" \
      "$(realpath "$file")" "$sw" "$shape"
    for k in "${!host_name[@]}"; do printf 'ns\t%s\t%s\n' "$k" "$prefix$k"; done
  } >"$state"
  for k in "${!host_name[@]}"; do
    local up=""
    ((islands > 1)) && up=", uplink $(rate_text "${host_ukbit[k]}" uplinks)"
    printf '%s -> %s %s (island %s: %s%s)\n' "${host_name[k]}" "$prefix$k" "${host_addr[k]}" \
      "$(awk -F'\t' -v i="${host_island[k]}" '$1 == "island" && $2 == i {print $3}' <<<"$plan")" \
      "$(rate_text "${host_ikbit[k]}" all)" "$up"
  done
}

rate_text() { # rate_text KBIT SHAPED_WHEN
  if [[ $shape == none || ($2 == all && $shape != all) ]]; then
    printf 'unshaped'
  else
    awk -v k="$1" 'BEGIN {printf "%g Gbit/s", k / 1e6}'
  fi
}

# Every host reaches every other host's address: a connect to a closed port that is refused
# proves the path both ways (no ping needed); fails fast instead of letting ranks time out.
check_network() {
  local k j answer
  for k in "${!host_name[@]}"; do
    for j in "${!host_name[@]}"; do
      ((k == j)) && continue
      answer="$(in_ns "$prefix$k" timeout 3 bash -c "exec 3<>/dev/tcp/${host_addr[j]}/9" 2>&1 ||
        true)"
      [[ $answer == *refused* ]] ||
        die "${host_name[k]} cannot reach ${host_name[j]} (${host_addr[j]}): ${answer:-no answer}"
    done
  done
}

# ---- tearing down ----------------------------------------------------------------------------
# remove_namespaces NS...: stops what runs inside them (started by a user of this cluster) and
# deletes them; a veth dies with either end, bridges and qdiscs with their namespace.
remove_namespaces() {
  local ns pid
  local -a killed=()
  for ns in "$@"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      kill -9 "$pid" 2>/dev/null && killed+=("$pid")
    done
  done
  # Wait (up to 5 s) until they are gone: a namespace outlives its name while processes remain.
  local tries=0 alive=1
  while ((alive && tries++ < 100)); do
    alive=0
    for pid in "${killed[@]}"; do
      [[ -e /proc/$pid && "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] && alive=1
    done
    ((alive)) && sleep 0.05
  done
  for ns in "$@"; do
    local tries=0
    while ip netns list | awk '{print $1}' | grep -qxF -- "$ns"; do
      ip netns del "$ns" 2>/dev/null || true
      ((++tries < 20)) || break
      sleep 0.05
    done
  done
}

# Namespaces named PREFIX* that exist now.
namespaces_with() {
  ip netns list | awk -v p="$1" 'index($1, p) == 1 {print $1}'
}

child=""
keep=0 # 1 once `up` has succeeded: the cluster outlives this process
teardown() {
  local status=$?
  trap - EXIT INT TERM
  if [[ -n $child ]]; then
    # CMD runs in its own session: stop all of it, then give it a moment to exit.
    kill -TERM -- "-$child" 2>/dev/null || true
    local tries=0
    while kill -0 "$child" 2>/dev/null && ((tries++ < 30)); do sleep 0.1; done
    kill -KILL -- "-$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  if ((keep == 0 && ${#made_ns[@]} > 0)); then
    remove_namespaces "${made_ns[@]}"
    local left
    left="$(namespaces_with "$prefix")"
    if [[ -n $left ]]; then
      say "namespaces left behind: $(tr '\n' ' ' <<<"$left")"
      status=1
    fi
    [[ -n $state_file ]] && rm -f "$state_file"
  fi
  exit "$status"
}

# ---- the state of a running cluster -----------------------------------------------------------
# find_state [TOPOLOGY]: the state file to use (--state, $CLUSTER_STATE, or the one whose file
# line is TOPOLOGY, or the only one).
find_state() {
  if [[ -n $state_file ]]; then
    [[ -f $state_file ]] || die "no state file $state_file"
    printf '%s\n' "$state_file"
    return
  fi
  local want="" f
  [[ -n ${1:-} && ${1:-} != - ]] && want="$(realpath "$1" 2>/dev/null || printf '%s' "$1")"
  if [[ -n ${CLUSTER_STATE:-} && -f ${CLUSTER_STATE:-} ]]; then
    if [[ -z $want ]] || grep -qxF "$(printf 'file\t%s' "$want")" "$CLUSTER_STATE"; then
      printf '%s\n' "$CLUSTER_STATE"
      return
    fi
  fi
  local -a found=()
  for f in "$state_dir"/*.state; do
    [[ -f $f ]] || continue
    if [[ -z $want ]] || grep -qxF "$(printf 'file\t%s' "$want")" "$f"; then found+=("$f"); fi
  done
  ((${#found[@]} == 1)) && { printf '%s\n' "${found[0]}"; return; }
  ((${#found[@]} == 0)) && die "no cluster is up${want:+ for $want} (cluster.sh up TOPOLOGY)"
  die "several clusters are up${want:+ for $want}: ${found[*]}; pick one with --state FILE"
}

field() { # field STATE KIND COLUMN [MATCH_COLUMN VALUE]
  awk -F'\t' -v kind="$2" -v col="$3" -v mc="${4:-0}" -v mv="${5:-}" \
    '$1 == kind && (mc == 0 || $mc == mv) {print $col; exit}' "$1"
}

case $command in
  up | run)
    need_root
    for cmd in ip tc timeout awk "$python"; do
      command -v "$cmd" >/dev/null || die "$cmd not found"
    done
    topology="${1:?$command wants a topology file}"
    shift
    if [[ $command == run ]]; then
      [[ ${1:-} == -- ]] || die "usage: cluster.sh run TOPOLOGY -- CMD..."
      shift
      (($# > 0)) || die "run: no command after --"
    fi
    [[ -n $state_file ]] || state_file="$state_dir/$$.state"
    trap teardown EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    build_cluster "$topology" "$state_file"
    say "state: $state_file"
    if [[ $command == up ]]; then
      keep=1
      say "up; remove it with: $0 down $topology"
      exit 0
    fi
    # Its own session, so that teardown stops all of it (and what it started) by one id.
    CLUSTER_STATE="$state_file" setsid "$@" &
    child=$!
    status=0
    wait "$child" || status=$?
    child=""
    exit "$status"
    ;;
  exec)
    need_root
    topology="${1:?exec wants TOPOLOGY HOST CMD...}"
    host="${2:?exec wants TOPOLOGY HOST CMD...}"
    shift 2
    (($# > 0)) || die "exec: no command"
    state="$(find_state "$topology")"
    index="$(field "$state" host 2 3 "$host")"
    [[ -n $index ]] || index="$(field "$state" host 2 2 "$host")"
    [[ -n $index ]] || die "no host '$host' in $state"
    ns="$(field "$state" ns 3 2 "$index")"
    addr="$(field "$state" host 6 2 "$index")"
    name="$(field "$state" host 3 2 "$index")"
    exec ip netns exec "$ns" env CLUSTER_STATE="$state" EMULATE_HOST="$name" \
      EMULATE_ADDR="$addr" "$@"
    ;;
  down)
    need_root
    state="$(find_state "${1:-}")"
    pfx="$(field "$state" prefix 2)"
    [[ $pfx =~ ^hm-[0-9]+-$ ]] || die "$state names no cluster (prefix '$pfx')"
    mapfile -t nss < <(namespaces_with "$pfx")
    ((${#nss[@]} == 0)) || remove_namespaces "${nss[@]}"
    left="$(namespaces_with "$pfx")"
    rm -f "$state"
    [[ -z $left ]] || die "namespaces left behind: $(tr '\n' ' ' <<<"$left")"
    say "removed ${#nss[@]} namespaces (${pfx}*)"
    ;;
  cleanup)
    need_root
    removed=0
    declare -A pids=()
    while read -r ns; do
      [[ $ns =~ ^hm-([0-9]+)- ]] || continue
      pids[${BASH_REMATCH[1]}]=1
    done < <(ip netns list | awk '{print $1}')
    for pid in "${!pids[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then
        say "kept hm-$pid-*: process $pid still runs"
        continue
      fi
      mapfile -t nss < <(namespaces_with "hm-$pid-")
      remove_namespaces "${nss[@]}"
      removed=$((removed + ${#nss[@]}))
    done
    for f in "$state_dir"/*.state; do
      [[ -f $f ]] || continue
      pid="$(field "$f" pid 2)"
      [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && continue
      [[ -n "$(namespaces_with "hm-$pid-")" ]] || rm -f "$f"
    done
    left="$(ip netns list | awk '$1 ~ /^hm-/ {print $1}' | tr '\n' ' ')"
    say "removed $removed namespaces${left:+; still present (live owners): $left}"
    ;;
  status)
    for f in "$state_dir"/*.state; do
      [[ -f $f ]] || continue
      printf '%s: %s (%s*)\n' "$f" "$(field "$f" file 2)" "$(field "$f" prefix 2)"
    done
    ip netns list | awk '$1 ~ /^hm-/ {print "namespace " $1}'
    ;;
  *) die "unknown command '$command' (see --help)" ;;
esac
