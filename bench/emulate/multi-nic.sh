#!/usr/bin/env bash
# Hosts with two NICs each, emulated with network namespaces, and one allreduce (float32 sum,
# 64 MiB) measured over them, in rounds that interleave:
#   holmes-1nic   Holmes on one NIC (HOLMES_TCP_NICS=off: its listen address, on rail 0)
#   holmes-2nic   Holmes striping over both (HOLMES_TCP_NICS=nic0@R,nic1@R)
#   gloo          gloo::allreduce ring (Gloo's tcp device takes one address: rail 0)
#   mpi-1nic      Open MPI, btl tcp on nic0 only
#   mpi-2nic      Open MPI, btl tcp on nic0 and nic1 (it stripes large messages over its
#                 interfaces by their btl_tcp_bandwidth_<if>, which it is told)
# Prints per run the median busbw, the ratio holmes-2nic / holmes-1nic, each against the bound
# (the hosts' NICs' aggregate rate) and what each NIC carried (sysfs tx_bytes), then removes
# every namespace it made (also on failure and Ctrl-C).
#
# Layout (namespaces hs-<pid>-*, nothing added to the root namespace):
#   hs-<pid>-sw   the switch: bridges rail0 and rail1
#   hs-<pid>-hK   host K: veth nic0 10.78.1.(10+K)/24 on rail0 and nic1 10.78.2.(10+K)/24 on
#                 rail1 (a host listed in -1 has nic0 only), each shaped to RATE with tc tbf at
#                 both ends (the host's egress and the switch port's), so a NIC has RATE up and
#                 RATE down; rails are separate networks, as dual-rail clusters are wired.
# One rank per host. Needs root, iproute2 and Open MPI (mpirun) and the peers built.
#
# Usage: bench/emulate/multi-nic.sh [-B BUILD] [-H HOSTS] [-s SIZE] [-n ITERS] [-w WARMUP]
#                                   [-R RATE] [-r ROUNDS] [-t SECONDS] [-1 HOST] [-x RUNS]
#                                   [-A ALGO] [-S RATE1] [-E] [-o DIR]
#   -B BUILD    build with bin/holmes-bench, holmes-store, gloo-allreduce-bench and
#               mpi-allreduce-bench (default: $HOLMES_BUILD or <repo>/build)
#   -H HOSTS    hosts (default 2)
#   -s SIZE     allreduce bytes, holmes-bench syntax (default 64M)
#   -n, -w      timed and untimed iterations per run (default 4 and 1)
#   -R RATE     each NIC's rate per direction, Mbit/s (default 1000; 0: not shaped)
#   -r ROUNDS   rounds of every run, interleaved; medians are reported (default 3)
#   -t SECONDS  limit of each run (default 180)
#   -1 HOST     host HOST has one NIC (rail 0 only); may be given more than once
#   -x RUNS     the runs, comma-separated (default holmes-1nic,holmes-2nic,gloo,mpi-1nic,mpi-2nic)
#   -A ALGO     Holmes's algorithm (default auto: the cost model's)
#   -S RATE1    nic1's rate, Mbit/s (default RATE): NICs of unequal speed
#   -E          holmes-2nic is not told the NICs' rates (equal weights): its split then follows
#               only what each NIC's connections drain (their kernel backlog)
#   -o DIR      also add the medians to DIR/multi-nic.csv (a row per run, NICs and rates: so a
#               second invocation with other rates adds its rows) and draw every row of it in
#               DIR/multi-nic.png: busbw per run, a bar per NIC configuration (bench/plot_table.py)
# Each run's line on stderr ends with the MB each NIC sent ("h0.nic0=N h0.nic1=N ..."), which
# tests/transports/tcp/multi_nic_test.sh reads.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${HOLMES_BUILD:-$root/build}"
nhosts=2
size=64M
iters=4
warmup=1
rate_mbit=1000
rounds=3
run_timeout=180
one_nic=()
runs_text=holmes-1nic,holmes-2nic,gloo,mpi-1nic,mpi-2nic
algo=auto
rate1_mbit=""
tell_rates=1
out_dir=""
while getopts "B:H:s:n:w:R:r:t:1:x:A:S:Eo:h" opt; do
  case $opt in
    B) build="$OPTARG" ;;
    H) nhosts="$OPTARG" ;;
    s) size="$OPTARG" ;;
    n) iters="$OPTARG" ;;
    w) warmup="$OPTARG" ;;
    R) rate_mbit="$OPTARG" ;;
    r) rounds="$OPTARG" ;;
    t) run_timeout="$OPTARG" ;;
    1) one_nic+=("$OPTARG") ;;
    x) runs_text="$OPTARG" ;;
    A) algo="$OPTARG" ;;
    S) rate1_mbit="$OPTARG" ;;
    E) tell_rates=0 ;;
    o) out_dir="$OPTARG" ;;
    *)
      awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"
      exit 2
      ;;
  esac
done

netns_name=multi-nic
prefix="hs-$$-"
netns_keep=${MULTI_NIC_KEEP_TMP:-0}
# shellcheck source=netns-lib.sh
source "$here/netns-lib.sh"

rate1_mbit=${rate1_mbit:-$rate_mbit}
for v in nhosts iters warmup rate_mbit rate1_mbit rounds run_timeout; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "-$v wants a whole number, not '${!v}'"
done
((nhosts >= 2 && nhosts <= 8)) || die "-H wants 2 to 8 hosts"
((EUID == 0)) || die "needs root (network namespaces, veth, tc)"
if [[ -n $out_dir ]]; then mkdir -p "$out_dir" || die "cannot make $out_dir"; fi
IFS=, read -ra runs <<<"$runs_text"
bin="$build/bin"
for run in "${runs[@]}"; do
  case $run in
    holmes-*) tools=(holmes-bench holmes-store) ;;
    gloo) tools=(gloo-allreduce-bench) ;;
    mpi-*) tools=(mpi-allreduce-bench) ;;
    *) die "unknown run '$run' (-x)" ;;
  esac
  for tool in "${tools[@]}"; do [[ -x $bin/$tool ]] || die "$bin/$tool is not built"; done
done
for cmd in ip tc timeout awk; do command -v "$cmd" >/dev/null || die "$cmd not found"; done

sw="${prefix}sw"
declare -a ns_of addr0 addr1 nics_of
for ((k = 0; k < nhosts; k++)); do
  ns_of[k]="${prefix}h$k"
  addr0[k]="10.78.1.$((10 + k))"
  addr1[k]="10.78.2.$((10 + k))"
  nics_of[k]=2
  for h in "${one_nic[@]}"; do ((h == k)) && nics_of[k]=1; done
done

build_network() {
  add_ns "$sw"
  local k r
  for r in 0 1; do
    in_ns "$sw" ip link add "rail$r" type bridge
    in_ns "$sw" ip link set "rail$r" up
  done
  for ((k = 0; k < nhosts; k++)); do
    add_ns "${ns_of[k]}"
    for ((r = 0; r < ${nics_of[k]}; r++)); do
      ip link add name "nic$r" netns "${ns_of[k]}" type veth peer name "r${r}p$k" netns "$sw"
      in_ns "$sw" ip link set "r${r}p$k" master "rail$r" up
      local addr
      [[ $r == 0 ]] && addr=${addr0[k]} || addr=${addr1[k]}
      in_ns "${ns_of[k]}" ip addr add "$addr/24" dev "nic$r"
      in_ns "${ns_of[k]}" ip link set "nic$r" up
      local mbit=$rate_mbit
      [[ $r == 1 ]] && mbit=$rate1_mbit
      shape "${ns_of[k]}" "nic$r" "$mbit"
      shape "$sw" "r${r}p$k" "$mbit"
    done
  done
  # The state file netns-rsh.sh reads (cluster.sh's format): mpirun reaches each host by its
  # rail-0 address.
  : >"$tmp/state"
  for ((k = 0; k < nhosts; k++)); do
    printf 'host\t%d\th%d\t0\tlan\t%s\n' "$k" "$k" "${addr0[k]}" >>"$tmp/state"
    printf 'ns\t%d\t%s\n' "$k" "${ns_of[k]}" >>"$tmp/state"
  done
}

# Every host reaches every other host on every rail both have (a refused TCP connect proves
# the path both ways).
check_network() {
  local k j answer target
  for ((k = 0; k < nhosts; k++)); do
    for ((j = 0; j < nhosts; j++)); do
      ((k == j)) && continue
      for target in "${addr0[j]}" "${addr1[j]}"; do
        [[ $target == "${addr1[j]}" ]] && ((nics_of[k] < 2 || nics_of[j] < 2)) && continue
        answer="$(in_ns "${ns_of[k]}" timeout 3 bash -c "exec 3<>/dev/tcp/$target/9" 2>&1 || true)"
        [[ $answer == *"refused"* ]] || die "h$k cannot reach $target: ${answer:-no answer in 3 s}"
      done
    done
  done
}

# Bytes every NIC has sent so far: "h0.nic0=N h0.nic1=N ...".
nic_bytes() {
  local k r
  for ((k = 0; k < nhosts; k++)); do
    for ((r = 0; r < ${nics_of[k]}; r++)); do
      printf 'h%d.nic%d=%s ' "$k" "$r" \
        "$(in_ns "${ns_of[k]}" cat "/sys/class/net/nic$r/statistics/tx_bytes")"
    done
  done
}

# Starts one rank per host (RANK_CMD_FN k prints host k's command, one word per line), waits
# for all and stops the others as soon as one fails.
run_ranks() {
  local name=$1 fn=$2 k pid code status=0
  local -a pids=()
  for ((k = 0; k < nhosts; k++)); do
    local -a cmd
    mapfile -t cmd < <("$fn" "$k")
    in_ns "${ns_of[k]}" timeout -k 5 "$run_timeout" "${cmd[@]}" >"$tmp/$name.rank$k.log" 2>&1 &
    pids+=($!)
    background+=($!)
  done
  for pid in "${pids[@]}"; do
    code=0
    wait "$pid" || code=$?
    if ((code != 0 && status == 0)); then
      status=$code
      for k in "${pids[@]}"; do kill "$k" 2>/dev/null || true; done
    fi
  done
  if ((status != 0)); then
    for ((k = 0; k < nhosts; k++)); do
      printf -- '--- %s rank %d ---\n' "$name" "$k" >&2
      tail -n 15 "$tmp/$name.rank$k.log" >&2 || true
    done
    die "$name failed (exit status $status)"
  fi
}

holmes_nics=off
holmes_port=0
holmes_token=""
holmes_rank_cmd() {
  local k=$1
  local nics=$holmes_nics
  ((nics_of[k] < 2)) && nics=off
  printf '%s\n' env "HOLMES_RANK=$k" "HOLMES_WORLD_SIZE=$nhosts" \
    "HOLMES_STORE=${addr0[0]}:$holmes_port" "HOLMES_TOKEN=$holmes_token" HOLMES_STORE_SERVE=0 \
    "HOLMES_HOST=h$k" HOLMES_FABRIC=ethernet "HOLMES_ADDR=${addr0[k]}" "HOLMES_TCP_NICS=$nics" \
    "HOLMES_LOG_LEVEL=${HOLMES_LOG_LEVEL:-info}" "HOLMES_TIMEOUT_MS=$((run_timeout * 1000))" \
    "$bin/holmes-bench" allreduce -b "$size" -e "$size" -n "$iters" -w "$warmup" --check \
    --algo "$algo"
  ((k == 0)) && printf '%s\n' --csv "$tmp/$run_name.csv"
  return 0
}

run_holmes() {
  holmes_nics=$1
  start_store "${ns_of[0]}" "${addr0[0]}" "$tmp/$run_name.store.log" "$((run_timeout + 30))"
  holmes_port=$store_port
  holmes_token=$store_token
  run_ranks "$run_name" holmes_rank_cmd
  stop_store
}

gloo_store=""
gloo_rank_cmd() {
  local k=$1
  printf '%s\n' env "RANK=$k" "WORLD_SIZE=$nhosts" "GLOO_STORE_DIR=$gloo_store" \
    "GLOO_HOSTNAME=${addr0[k]}" "GLOO_TIMEOUT_S=$run_timeout" \
    "$bin/gloo-allreduce-bench" allreduce -b "$size" -e "$size" -n "$iters" -w "$warmup" -c
  ((k == 0)) && printf '%s\n' --csv "$tmp/$run_name.csv"
  return 0
}

run_mpi() {
  local interfaces=$1 k
  : >"$tmp/hostfile"
  for ((k = 0; k < nhosts; k++)); do printf '%s slots=1\n' "${addr0[k]}" >>"$tmp/hostfile"; done
  # mpirun in host 0's namespace reaches the others through netns-rsh.sh; out-of-band traffic on
  # rail 0; btl tcp on the interfaces given, each told the NIC's rate (Mbit/s) so that it splits
  # large messages by it; yield_when_idle: spinning ranks starve the network on 2 cores.
  CLUSTER_STATE="$tmp/state" in_ns "${ns_of[0]}" timeout -k 5 "$run_timeout" mpirun \
    --allow-run-as-root --oversubscribe -np "$nhosts" --hostfile "$tmp/hostfile" --map-by slot \
    --bind-to none --mca plm_rsh_agent "$here/netns-rsh.sh" --mca plm_rsh_no_tree_spawn 1 \
    --mca routed direct --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$interfaces" \
    --mca oob_tcp_if_include nic0 --mca btl_tcp_bandwidth_nic0 "$rate_mbit" \
    --mca btl_tcp_bandwidth_nic1 "$rate1_mbit" \
    --mca mpi_yield_when_idle 1 -x CLUSTER_STATE \
    "$bin/mpi-allreduce-bench" allreduce -b "$size" -e "$size" -n "$iters" -w "$warmup" -c \
    --csv "$tmp/$run_name.csv" >"$tmp/$run_name.rank0.log" 2>&1 ||
    {
      tail -n 20 "$tmp/$run_name.rank0.log" >&2
      die "$run_name failed"
    }
}

say "$nhosts hosts, NICs ${nics_of[*]}, ${rate_mbit} Mbit/s per NIC and direction, allreduce" \
  "float32 $size, $rounds rounds of: ${runs[*]}; build $build; load $(cut -d' ' -f1-3 /proc/loadavg)"
# Holmes is told each NIC's rate; unshaped veths have none that means anything: equal weights.
gbit="$(awk -v m="$rate_mbit" 'BEGIN {print (m > 0 ? m / 1000 : 1)}')"
gbit1="$(awk -v m="$rate1_mbit" 'BEGIN {print (m > 0 ? m / 1000 : 1)}')"
build_network
check_network
: >"$tmp/results"
for ((round = 1; round <= rounds; round++)); do
  for run in "${runs[@]}"; do
    run_name="$run.$round"
    read -ra before <<<"$(nic_bytes)"
    begun=$SECONDS
    case $run in
      holmes-1nic) run_holmes off ;;
      holmes-2nic)
        if ((tell_rates)); then run_holmes "nic0@$gbit,nic1@$gbit1"; else run_holmes nic0,nic1; fi
        ;;
      gloo)
        gloo_store="$(mktemp -d "$tmp/gloo-store.XXXXXX")"
        run_ranks "$run_name" gloo_rank_cmd
        ;;
      mpi-1nic) run_mpi nic0 ;;
      mpi-2nic) run_mpi nic0,nic1 ;;
    esac
    read -ra after <<<"$(nic_bytes)"
    sent=""
    for i in "${!after[@]}"; do
      sent+=" ${after[i]%%=*}=$(((${after[i]#*=} - ${before[i]#*=}) / 1000000))"
    done
    [[ -s $tmp/$run_name.csv ]] || die "$run_name wrote no CSV"
    printf '%s\t%s\t%s\n' "$run" "$tmp/$run_name.csv" "$sent" >>"$tmp/results"
    say "$run_name done [$((SECONDS - begun))s]; MB each NIC sent:$sent"
  done
done

/usr/bin/python3 - "$tmp/results" "$nhosts" "$rate_mbit" "${nics_of[*]}" "$size" "$rate1_mbit" \
  "$tell_rates" "$out_dir" "$root/bench" <<'EOF'
import csv, os, statistics, sys

results, hosts, rate_mbit, nics, size, rate1_mbit, told, out_dir, bench = sys.argv[1:]
hosts, rate_mbit, rate1_mbit = int(hosts), float(rate_mbit), float(rate1_mbit)
nics = [int(n) for n in nics.split()]
runs = {}
for line in open(results):
    name, path, sent = line.rstrip("\n").split("\t")
    row = next(csv.DictReader(open(path)))
    if int(row["wrong"]) != 0 or int(row.get("wrong_inplace", 0) or 0) > 0:
        sys.exit(f"multi-nic: {name}: {row['wrong']} wrong elements")
    runs.setdefault(name, []).append((float(row["busbw"]), sent.strip()))
# An allreduce sends 2(n-1)/n x S out of every host: busbw is bounded by the slowest host's
# NICs' aggregate rate (tbf delivers about 0.956 of it).
bound_1 = rate_mbit * 1e6 / 8 / 1e9 or float("nan")  # unshaped: no bound
bound_all = bound_1 if min(nics) == 1 else (rate_mbit + rate1_mbit) * 1e6 / 8 / 1e9
print(f"# {hosts} hosts x 1 rank, NICs per host {nics}, nic0 {rate_mbit:g} and nic1 "
      f"{rate1_mbit:g} Mbit/s, allreduce float32 {size}; holmes-2nic "
      f"{'told the rates' if told == '1' else 'not told the rates'}; busbw GB/s, median of "
      f"{len(next(iter(runs.values())))}")
print(f"{'run':<12} {'busbw':>8} {'/ bound':>8}  MB each NIC sent (last round)")
for name, values in runs.items():
    busbw = statistics.median(v[0] for v in values)
    bound = bound_1 if name.endswith("1nic") or name == "gloo" else bound_all
    print(f"{name:<12} {busbw:8.4f} {busbw / bound:8.2f}  {values[-1][1]}")
med = {name: statistics.median(v[0] for v in values) for name, values in runs.items()}
if "holmes-2nic" in med and "holmes-1nic" in med:
    print(f"holmes-2nic / holmes-1nic: {med['holmes-2nic'] / med['holmes-1nic']:.2f}x "
          "(target >= 1.8)")
for peer in ("gloo", "mpi-1nic", "mpi-2nic"):
    if "holmes-2nic" in med and peer in med:
        print(f"holmes-2nic / {peer}: {med['holmes-2nic'] / med[peer]:.2f}x")
if "mpi-2nic" in med and "mpi-1nic" in med:
    print(f"mpi-2nic / mpi-1nic: {med['mpi-2nic'] / med['mpi-1nic']:.2f}x")
if out_dir:
    sys.path.insert(0, bench)
    from results_csv import append_rows
    nic1 = f"{rate1_mbit / 1000:g}" if max(nics) > 1 else "none"
    config = (f"nic0 {rate_mbit / 1000:g} + nic1 {nic1} Gbit/s"
              + (", rates untold" if told != "1" else ""))
    rows = []
    for name, values in runs.items():
        bound = bound_1 if name.endswith("1nic") or name == "gloo" else bound_all
        rows.append({"nics": config, "hosts": hosts, "size": size, "run": name,
                     "rounds": len(values), "busbw": f"{med[name]:.4f}",
                     "bound_busbw": f"{bound:.4f}", "of_bound": f"{med[name] / bound:.3f}"})
    append_rows(os.path.join(out_dir, "multi-nic.csv"),
                ["nics", "hosts", "size", "run", "rounds", "busbw", "bound_busbw", "of_bound"],
                rows, "multi-nic")
EOF
if [[ -n $out_dir ]]; then
  /usr/bin/python3 "$root/bench/plot_table.py" "$out_dir/multi-nic.csv" "$out_dir/multi-nic.png" \
    --x run --y busbw --bars --label "{nics}" \
    --title "Hosts with two NICs: allreduce float32 $size, $nhosts hosts x 1 rank" \
    --xlabel "run (1nic: rail 0 only; 2nic: both rails)" --ylabel "busbw, GB/s" ||
    die "could not draw $out_dir/multi-nic.png"
  say "added to $out_dir/multi-nic.csv, drew $out_dir/multi-nic.png"
fi
