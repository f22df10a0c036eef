#!/usr/bin/env bash
# Two islands of two hosts each, emulated on this machine with network namespaces, and one
# allreduce (float32 sum, 64 MiB; or with -c an allgather or reduce_scatter) measured on them with
#   holmes-auto   Holmes with the cost model's own choice (expected: hier)
#   holmes-ring   Holmes forced onto its ring (--algo ring; pairwise for an alltoall)
#   gloo-ring     gloo::allreduce ring over Gloo's tcp transport (allreduce only)
# and with -T (allreduce only) the same allreduce through torch.distributed:
#   torch-holmes  bench/peers/torch_allreduce.py --backend holmes (import holmes.torch)
#   torch-gloo    bench/peers/torch_allreduce.py --backend gloo (torch's own backend)
# Prints the busbw of each, the ratios holmes-auto/gloo-ring and holmes-auto/holmes-ring, and
# the bound the slow tier sets, then removes every namespace, link and qdisc it made (also on
# failure and Ctrl-C).
#
# Layout (all in namespaces named hm-<pid>-*; nothing is added to the root namespace):
#   hm-<pid>-sw   the switches: bridge brA (island A), brB (island B), brX (between islands)
#   hm-<pid>-h0   island A, 10.77.1.10      hm-<pid>-h2   island B, 10.77.2.12
#   hm-<pid>-h1   island A, 10.77.1.11      hm-<pid>-h3   island B, 10.77.2.13
# Every host has two veths: "isl" to its island's bridge (unshaped; carries its one address)
# and "uplink" to brX, which has no address: the other island's /24 is routed out of "uplink"
# (the other island's hosts answer ARP for their island address there). "uplink" is shaped to
# RATE with tc tbf at both ends (the host's egress, and brX's port towards the host), so each
# host has RATE up and RATE down to the other island; an island's aggregate uplink is 2 x RATE.
# Same-host Holmes ranks use shm, all others tcp (build without UCX/verbs for that).
#
# Output: one row per run (out-of-place and in-place busbw), the ratios, the bound for the
# nominal rate and for the rate iperf3 measured, and per run the MB each uplink sent, which
# shows how the run spread its inter-island traffic. TWO_ISLANDS_KEEP_TMP=1 keeps every rank's
# log and CSV; with HOLMES_LOG_LEVEL=debug (or trace) as well, each Holmes rank's log has every
# hierarchical allreduce's, allgather's and reduce-scatter's timeline (README, HOLMES_LOG_LEVEL).
#
# Usage: bench/emulate/two-islands.sh [-B BUILD] [-p RANKS_PER_HOST] [-s SIZE] [-n ITERS]
#                                     [-w WARMUP] [-R RATE] [-t SECONDS] [-P] [-c COLLECTIVE]
#                                     [-A ALGO] [-T] [-o DIR]
#   -B BUILD           build with bin/holmes-bench, holmes-store and gloo-allreduce-bench
#                      (default: $HOLMES_BUILD or <repo>/build)
#   -p RANKS_PER_HOST  ranks on each of the 4 hosts (default 2: 8 ranks)
#   -s SIZE            allreduce bytes, holmes-bench syntax (default 64M)
#   -n ITERS, -w WARMUP  timed and untimed iterations (default 5 and 1)
#   -R RATE            inter-island rate per host and direction, tc syntax in Mbit (default 1000)
#   -t SECONDS         limit of each run (default 180)
#   -c COLLECTIVE      allreduce (default), allgather, reduce_scatter (SIZE: the whole buffer) or
#                      alltoall (SIZE: one rank's buffer, a block per rank)
#   -A ALGO            the algorithm of the holmes-auto run (default auto: the cost model's)
#   -P                 Holmes measures its links when it starts (HOLMES_COST_PROBE=1) instead of
#                      being told the shaped rate (HOLMES_COST_INTER_ISLAND); rank 0's log line
#                      "cost probe ..." (in the output with TWO_ISLANDS_KEEP_TMP=1) has the numbers
#   -T                 also torch-holmes and torch-gloo (needs python3-torch and the torch backend)
#   -o DIR             also add a row per run to DIR/two-islands.csv (so that runs of other
#                      collectives, ranks and rates add theirs) and draw every row of it:
#                      DIR/two-islands.png, busbw over the bound per collective and ranks, a bar
#                      per run; DIR/two-islands-model.png, the cost model's time for each
#                      holmes-auto run against the measured (bench/plot_table.py)
# Needs root, iproute2 (ip, tc) and iperf3 (measures one shaped uplink for the bound).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${HOLMES_BUILD:-$root/build}"
per_host=2
size=64M
iters=5
warmup=1
rate_mbit=1000
run_timeout=180
probe=0
collective=allreduce
auto_algo_flag=auto
torch_runs=0
out_dir=""
while getopts "B:p:s:n:w:R:t:Pc:A:To:h" opt; do
  case $opt in
    B) build="$OPTARG" ;;
    p) per_host="$OPTARG" ;;
    s) size="$OPTARG" ;;
    n) iters="$OPTARG" ;;
    w) warmup="$OPTARG" ;;
    R) rate_mbit="$OPTARG" ;;
    t) run_timeout="$OPTARG" ;;
    P) probe=1 ;;
    T) torch_runs=1 ;;
    c) collective="$OPTARG" ;;
    A) auto_algo_flag="$OPTARG" ;;
    o) out_dir="$OPTARG" ;;
    *)
      awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"
      exit 2
      ;;
  esac
done

netns_name=two-islands
prefix="hm-$$-"
netns_keep=${TWO_ISLANDS_KEEP_TMP:-0}
# shellcheck source=netns-lib.sh
source "$root/bench/emulate/netns-lib.sh"

for v in per_host iters warmup rate_mbit run_timeout; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v wants a whole number, not '${!v}'"
done
((per_host >= 1)) || die "-p wants at least 1 rank per host"
[[ $collective =~ ^(allreduce|allgather|reduce_scatter|alltoall)$ ]] ||
  die "-c wants allreduce, allgather, reduce_scatter or alltoall, not '$collective'"
((EUID == 0)) || die "needs root (network namespaces, veth, tc)"
if [[ -n $out_dir ]]; then mkdir -p "$out_dir" || die "cannot make $out_dir"; fi
bin="$build/bin"
for tool in holmes-bench holmes-store gloo-allreduce-bench; do
  [[ -x $bin/$tool ]] || die "$bin/$tool is not built; build it with:
  cmake -S $root -B $build -G Ninja -DHOLMES_WITH_UCX=OFF -DHOLMES_WITH_VERBS=OFF
  ninja -C $build holmes-bench holmes-store gloo-allreduce-bench"
done
for cmd in ip tc iperf3 timeout awk; do
  command -v "$cmd" >/dev/null || die "$cmd not found"
done

# Size in bytes, as holmes-bench reads it (K, M, G are powers of 1024).
size_bytes="$(awk -v s="$size" 'BEGIN {
  n = s + 0; u = toupper(substr(s, length(s)));
  if (u == "K") n *= 1024; else if (u == "M") n *= 1048576; else if (u == "G") n *= 1073741824;
  printf "%d", n }')"
((size_bytes > 0)) || die "-s '$size' is not a size"

sw="${prefix}sw"
hosts=(h0 h1 h2 h3)
island_of=(A A B B)
addr_of=(10.77.1.10 10.77.1.11 10.77.2.12 10.77.2.13)
island_net=([0]=10.77.1.0/24 [1]=10.77.2.0/24) # A, B
ranks=$((${#hosts[@]} * per_host))

build_network() {
  add_ns "$sw"
  local br
  for br in brA brB brX; do
    in_ns "$sw" ip link add "$br" type bridge
    in_ns "$sw" ip link set "$br" up
  done
  local k ns isl other
  for k in "${!hosts[@]}"; do
    ns="$prefix${hosts[k]}"
    add_ns "$ns"
    isl=${island_of[k]}
    [[ $isl == A ]] && other=1 || other=0
    # Island link: host "isl" <-> switch "<island>p<k>" on br<island>, unshaped.
    ip link add name isl netns "$ns" type veth peer name "${isl,,}p$k" netns "$sw"
    in_ns "$sw" ip link set "${isl,,}p$k" master "br$isl" up
    in_ns "$ns" ip addr add "${addr_of[k]}/24" dev isl
    in_ns "$ns" ip link set isl up
    # Uplink: host "uplink" <-> switch "xp<k>" on brX, shaped at both ends.
    ip link add name uplink netns "$ns" type veth peer name "xp$k" netns "$sw"
    in_ns "$sw" ip link set "xp$k" master brX up
    in_ns "$ns" ip link set uplink up
    in_ns "$ns" ip route add "${island_net[other]}" dev uplink src "${addr_of[k]}"
    shape "$ns" uplink "$rate_mbit"
    shape "$sw" "xp$k" "$rate_mbit"
  done
}

# Every host reaches every other host's address (fails fast rather than letting ranks time
# out). No ping here: a TCP connect to a closed port that is refused proves the path both ways.
check_network() {
  local k j answer
  for k in "${!hosts[@]}"; do
    for j in "${!hosts[@]}"; do
      ((k == j)) && continue
      answer="$(in_ns "$prefix${hosts[k]}" timeout 3 bash -c \
        "exec 3<>/dev/tcp/${addr_of[j]}/9" 2>&1 || true)"
      [[ $answer == *"refused"* ]] ||
        die "${hosts[k]} cannot reach ${hosts[j]} (${addr_of[j]}): ${answer:-no answer in 3 s}"
    done
  done
}

# Goodput of one shaped uplink, h0 -> h2, in Mbit/s (iperf3, 3 s).
measure_uplink() {
  local port=$((20000 + RANDOM % 20000))
  in_ns "${prefix}h2" timeout -k 5 40 iperf3 -s -1 -B "${addr_of[2]}" -p "$port" \
    >"$tmp/iperf-server.log" 2>&1 &
  background+=($!)
  local tries=0
  while ((tries < 20)); do
    if in_ns "${prefix}h0" timeout -k 5 30 iperf3 -c "${addr_of[2]}" -p "$port" -t 3 -J \
      >"$tmp/iperf.json" 2>"$tmp/iperf.err" && grep -q '"sum_received"' "$tmp/iperf.json"; then
      break
    fi
    tries=$((tries + 1))
    sleep 0.2
  done
  wait "${background[-1]}" 2>/dev/null || true
  /usr/bin/python3 -c 'import json, sys
print("%.1f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 1e6))' \
    "$tmp/iperf.json" 2>/dev/null || echo 0
}

# Starts the ranks of one job, each with `env` VARS... in its host's namespace, waits for all,
# and stops the others as soon as one fails. run_ranks NAME RANK_CMD_FN: RANK_CMD_FN r k prints
# rank r's (on host k) command, one word per line.
run_ranks() {
  local name=$1 fn=$2
  local -a live=()
  local -A rank_of=()
  local r k
  for ((r = 0; r < ranks; r++)); do
    k=$((r / per_host))
    local -a cmd
    mapfile -t cmd < <("$fn" "$r" "$k")
    in_ns "$prefix${hosts[k]}" timeout -k 5 "$run_timeout" "${cmd[@]}" \
      >"$tmp/$name.rank$r.log" 2>&1 &
    live+=($!)
    rank_of[$!]=$r
    background+=($!)
  done
  local status=0 pid code other
  while ((${#live[@]} > 0)); do
    local -a still=()
    for pid in "${live[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then
        still+=("$pid")
        continue
      fi
      code=0
      wait "$pid" || code=$?
      if ((code != 0 && status == 0)); then
        status=$code
        say "$name: rank ${rank_of[$pid]} exited with status $code; stopping the others"
        for other in "${live[@]}"; do kill "$other" 2>/dev/null || true; done
      fi
    done
    live=("${still[@]}")
    ((${#live[@]} == 0)) || sleep 0.1
  done
  if ((status != 0)); then
    for ((r = 0; r < ranks; r++)); do
      printf -- '--- %s rank %d (%s) ---\n' "$name" "$r" "${hosts[r / per_host]}" >&2
      tail -n 15 "$tmp/$name.rank$r.log" >&2 || true
    done
    ((status == 124 || status == 137)) && die "$name timed out after ${run_timeout}s"
    die "$name failed (exit status $status)"
  fi
}

holmes_algo=auto
holmes_port=0
holmes_token=""
holmes_rank_cmd() {
  local r=$1 k=$2
  printf '%s\n' env "HOLMES_RANK=$r" "HOLMES_WORLD_SIZE=$ranks" \
    "HOLMES_STORE=${addr_of[0]}:$holmes_port" "HOLMES_TOKEN=$holmes_token" HOLMES_STORE_SERVE=0 \
    "HOLMES_HOST=${hosts[k]}" "HOLMES_ISLAND=${island_of[k]}" HOLMES_FABRIC=roce \
    "HOLMES_LOCAL_RANK=$((r % per_host))" "HOLMES_ADDR=${addr_of[k]}" \
    "$(if ((probe)); then echo HOLMES_COST_PROBE=1; else
      echo "HOLMES_COST_INTER_ISLAND=100,$(awk -v m="$rate_mbit" 'BEGIN {print m / 8000}')"; fi)" \
    "HOLMES_LOG_LEVEL=${HOLMES_LOG_LEVEL:-info}" HOLMES_TIMEOUT_MS=$((run_timeout * 1000)) \
    "$bin/holmes-bench" "$collective" -b "$size" -e "$size" -n "$iters" -w "$warmup" --check \
    --algo "$holmes_algo"
  ((r == 0)) && printf '%s\n' --csv "$tmp/$name.csv"
  return 0
}

run_holmes() {
  local name=$1
  holmes_algo=$2
  start_store "${prefix}h0" "${addr_of[0]}" "$tmp/$name.store.log" "$((run_timeout + 30))"
  holmes_port=$store_port
  holmes_token=$store_token
  run_ranks "$name" holmes_rank_cmd
  stop_store
}

gloo_store=""
gloo_rank_cmd() {
  local r=$1 k=$2
  printf '%s\n' env "RANK=$r" "WORLD_SIZE=$ranks" "GLOO_STORE_DIR=$gloo_store" \
    "GLOO_HOSTNAME=${addr_of[k]}" "GLOO_TIMEOUT_S=$run_timeout" \
    "$bin/gloo-allreduce-bench" allreduce -b "$size" -e "$size" -n "$iters" -w "$warmup" -c
  ((r == 0)) && printf '%s\n' --csv "$tmp/$name.csv"
  return 0
}

run_gloo() {
  local name=$1
  gloo_store="$(mktemp -d "$tmp/gloo-store.XXXXXX")"
  run_ranks "$name" gloo_rank_cmd
}

# torch.distributed's allreduce: torch's TCPStore on h0 (rank 0 serves it); each rank describes
# its host as the Holmes ranks do, so backend holmes sees the same islands and links.
torch_backend=gloo
torch_port=0
torch_rank_cmd() {
  local r=$1 k=$2
  printf '%s\n' env "RANK=$r" "WORLD_SIZE=$ranks" "LOCAL_RANK=$((r % per_host))" \
    "MASTER_ADDR=${addr_of[0]}" "MASTER_PORT=$torch_port" GLOO_SOCKET_IFNAME=isl \
    "TORCH_TIMEOUT_S=$run_timeout" OMP_NUM_THREADS=1 \
    "PYTHONPATH=$root/bindings/python" "HOLMES_LIBRARY=$build/lib/libholmes.so" \
    "HOLMES_TORCH_EXTENSION=$(ls "$build"/lib/python/_holmes_torch*.so 2>/dev/null | head -1)" \
    "HOLMES_HOST=${hosts[k]}" "HOLMES_ISLAND=${island_of[k]}" HOLMES_FABRIC=roce \
    "HOLMES_LOCAL_RANK=$((r % per_host))" "HOLMES_ADDR=${addr_of[k]}" \
    "HOLMES_COST_INTER_ISLAND=100,$(awk -v m="$rate_mbit" 'BEGIN {print m / 8000}')" \
    "HOLMES_LOG_LEVEL=${HOLMES_LOG_LEVEL:-info}" HOLMES_TIMEOUT_MS=$((run_timeout * 1000)) \
    /usr/bin/python3 "$root/bench/peers/torch_allreduce.py" allreduce -b "$size" -e "$size" \
    -n "$iters" -w "$warmup" -c --backend "$torch_backend"
  ((r == 0)) && printf '%s\n' --csv "$tmp/$name.csv"
  return 0
}

run_torch() {
  local name=$1
  torch_backend=$2
  torch_port=$((30000 + RANDOM % 20000))
  run_ranks "$name" torch_rank_cmd
}

# Column COL of the CSV row of a run (one size, so one row).
csv_field() {
  awk -F, -v col="$2" 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == col) c = i; next}
    c {print $c; exit}' "$tmp/$1.csv"
}

say "$((${#hosts[@]})) hosts in 2 islands, $per_host ranks per host ($ranks ranks), allreduce" \
  "float32 $size, uplinks ${rate_mbit} Mbit/s per host and direction; build $build;" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
build_network
check_network
uplink_mbit="$(measure_uplink)"
say "one shaped uplink (iperf3 h0 -> h2) carries $uplink_mbit Mbit/s"

# Bytes each host's uplink qdisc has sent so far, "h0=N h1=N ..." (the per-run difference shows
# how a run spread its inter-island traffic over the uplinks).
uplink_bytes() {
  local k
  for k in "${!hosts[@]}"; do
    printf '%s=%s ' "${hosts[k]}" "$(in_ns "$prefix${hosts[k]}" tc -s qdisc show dev uplink |
      awk '/Sent/ {print $2; exit}')"
  done
}

started=$SECONDS
runs=(holmes-auto holmes-ring)
flat=ring # the flat algorithm the holmes-ring run forces (alltoall has no ring: pairwise)
[[ $collective == alltoall ]] && flat=pairwise
[[ $collective == allreduce ]] && runs+=(gloo-ring)
[[ $collective == allreduce ]] && ((torch_runs)) && runs+=(torch-holmes torch-gloo)
for name in "${runs[@]}"; do
  begun=$SECONDS
  read -ra before <<<"$(uplink_bytes)"
  case $name in
    holmes-auto) run_holmes "$name" "$auto_algo_flag" ;;
    holmes-ring) run_holmes "$name" "$flat" ;;
    gloo-ring) run_gloo "$name" ;;
    torch-holmes) run_torch "$name" holmes ;;
    torch-gloo) run_torch "$name" gloo ;;
  esac
  [[ -s $tmp/$name.csv ]] || die "$name wrote no CSV (see $tmp/$name.rank0.log)"
  wrong="$(csv_field "$name" wrong)"
  [[ $wrong == 0 ]] || die "$name: $wrong wrong elements"
  read -ra after <<<"$(uplink_bytes)"
  sent=""
  for k in "${!after[@]}"; do
    sent+=" ${hosts[k]} $(((${after[k]#*=} - ${before[k]#*=}) / 1000000))"
  done
  say "$name done [$((SECONDS - begun))s]; MB each uplink sent (all iterations):$sent"
done
# Which transport rank 0 got for each peer (Holmes logs it at info).
transports="$(grep -m 1 -o 'rank 0/.*' "$tmp/holmes-auto.rank0.log" | sed 's/^[^)]*): //' || true)"
auto_algo="$(csv_field holmes-auto algorithm)"

# The slow tier's bound: each island must send the other 2(G-1)/G x S over its hosts' uplinks
# for an allreduce, (G-1)/G x S for an allgather or reduce-scatter; for an alltoall each of its
# ranks (G-1)/G of its buffer.
/usr/bin/python3 - "$size_bytes" "$ranks" "$rate_mbit" "$uplink_mbit" "$tmp" "$auto_algo" \
  "$transports" "$collective" "$torch_runs" "$out_dir" "$root/bench" <<'EOF'
import csv, os, sys
size, ranks, rate_mbit, uplink_mbit, tmp, auto_algo, transports, collective, torch_runs, \
    out_dir, bench = sys.argv[1:]
size, ranks, rate_mbit, uplink_mbit = int(size), int(ranks), float(rate_mbit), float(uplink_mbit)
islands, hosts_per_island = 2, 2
passes = 2 if collective == "allreduce" else 1
factor = passes * (ranks - 1) / ranks  # busbw = algbw x factor (nccl-tests)


def row(name):
    with open(f"{tmp}/{name}.csv") as f:
        return next(csv.DictReader(f))


def bound(bits_per_s_per_host):
    uplink = hosts_per_island * bits_per_s_per_host / 8  # bytes/s out of one island
    crossing = ranks / islands if collective == "alltoall" else passes
    seconds = crossing * (islands - 1) / islands * size / uplink
    return seconds, size / seconds / 1e9 * factor


names = ("holmes-auto", "holmes-ring") + (("gloo-ring",) if collective == "allreduce" else ())
if collective == "allreduce" and torch_runs == "1":
    names += ("torch-holmes", "torch-gloo")
runs = {name: row(name) for name in names}
print(f"# two islands x {hosts_per_island} hosts, {ranks} ranks, {collective} float32 {size} B, "
      f"uplinks {rate_mbit:g} Mbit/s per host (measured {uplink_mbit:g})")
if transports:
    print(f"# holmes rank 0's peers: {transports}")
print(f"{'run':<13} {'algo':>5} {'time(us)':>12} {'busbw':>8} {'busbw(ip)':>10}")
for name, r in runs.items():
    algo = r.get("algorithm", "-" if name.startswith("torch-") else "ring")
    print(f"{name:<13} {algo:>5} {float(r['time_us']):12.0f} "
          f"{float(r['busbw']):8.3f} {float(r['busbw_inplace']):10.3f}")
auto, ring = (float(runs[n]["busbw"]) for n in ("holmes-auto", "holmes-ring"))
nominal_s, nominal_busbw = bound(rate_mbit * 1e6)
measured_s, measured_busbw = bound(uplink_mbit * 1e6) if uplink_mbit > 0 else (0, 0)
print(f"bound (slow tier, nominal {rate_mbit:g} Mbit/s): time >= {nominal_s * 1e6:.0f} us, "
      f"busbw <= {nominal_busbw:.3f} GB/s")
if measured_busbw:
    print(f"bound (slow tier, iperf3 {uplink_mbit:g} Mbit/s): time >= {measured_s * 1e6:.0f} us, "
          f"busbw <= {measured_busbw:.3f} GB/s")
if "gloo-ring" in runs:
    gloo = float(runs["gloo-ring"]["busbw"])
    print(f"holmes-auto ({auto_algo}) / gloo-ring   : {auto / gloo:.2f}x  (target >= 2.5)")
print(f"holmes-auto ({auto_algo}) / holmes-ring : {auto / ring:.2f}x")
print(f"holmes-auto / bound (nominal)   : {auto / nominal_busbw:.2f}  (target >= 0.85)")
if measured_busbw:
    print(f"holmes-auto / bound (iperf3)    : {auto / measured_busbw:.2f}")
if "torch-holmes" in runs:
    th, tg = (float(runs[n]["busbw_inplace"]) for n in ("torch-holmes", "torch-gloo"))
    capi = float(runs["holmes-auto"]["busbw_inplace"])
    print(f"torch-holmes / torch-gloo (in place) : {th / tg:.2f}x  (target >= 2.5)")
    print(f"torch-holmes / holmes-auto (in place): {th / capi:.2f}  (target >= 0.9)")
if auto_algo != "hier":
    print(f"NOTE: the cost model chose '{auto_algo}', not hier")
if out_dir:
    sys.path.insert(0, bench)
    from results_csv import append_rows
    bound_busbw = measured_busbw or nominal_busbw
    rows = []
    for name, r in runs.items():
        predicted = r.get("predicted_us", "")
        rows.append({
            "collective": collective, "ranks": ranks, "size": size,
            "rate_mbit": f"{rate_mbit:g}", "uplink_mbit": f"{uplink_mbit:g}", "run": name,
            "algorithm": r.get("algorithm", "-" if name.startswith("torch-") else "ring"),
            "time_us": r["time_us"], "busbw": r["busbw"], "bound_busbw": f"{bound_busbw:.4f}",
            "of_bound": f"{float(r['busbw']) / bound_busbw:.3f}",
            "time_ms": f"{float(r['time_us']) / 1e3:.1f}",
            "predicted_ms": f"{float(predicted) / 1e3:.1f}" if predicted else "",
            "case": f"{collective}, {ranks} ranks"})
    append_rows(os.path.join(out_dir, "two-islands.csv"),
                ["collective", "ranks", "size", "rate_mbit", "uplink_mbit", "run", "algorithm",
                 "time_us", "busbw", "bound_busbw", "of_bound", "time_ms", "predicted_ms",
                 "case"], rows, "two-islands")
EOF
if [[ -n $out_dir ]]; then
  /usr/bin/python3 "$root/bench/plot_table.py" "$out_dir/two-islands.csv" \
    "$out_dir/two-islands.png" --x case --y of_bound --bars --label "{run}" \
    --hline "1=the slow tier's bound (iperf3's rate)" \
    --title "Two emulated islands x 2 hosts, uplinks shaped, float32 $size" \
    --xlabel "collective, ranks" --ylabel "busbw / bound" ||
    die "could not draw $out_dir/two-islands.png"
  /usr/bin/python3 "$root/bench/plot_table.py" "$out_dir/two-islands.csv" \
    "$out_dir/two-islands-model.png" --where run=holmes-auto --x time_ms --y predicted_ms \
    --label "{case}" --diagonal --title "The cost model on two emulated islands (holmes-auto)" \
    --xlabel "measured, ms" --ylabel "predicted, ms" ||
    die "could not draw $out_dir/two-islands-model.png"
  say "added to $out_dir/two-islands.csv, drew two-islands.png and two-islands-model.png there"
fi
say "measured in $((SECONDS - started))s"
