#!/usr/bin/env bash
# The slow tier on long links: two islands of two hosts (one rank each) on loopback, every link
# held by Holmes's shaping layer to the topology's rates, the link between the islands given a
# one-way latency of 0.03, 1 and 10 ms (no root: this kernel has no netem, so only Holmes can be
# given latency; Gloo and Open MPI cannot run these links). For each latency, in interleaved
# rounds, an allreduce (float32 sum, 64 MiB; -c: allgather or reduce_scatter) with the cost
# model's algorithm (hier) and, with -O, the same with another build (the commit before a
# change) for a before/after ratio.
#
# Prints per collective, rate and latency: the RTT, the bandwidth x RTT one host's uplink must
# keep in flight, the median busbw, and busbw over the slow tier's bound (each island's 2
# uplinks: an allreduce of S sends S across, each way; an allgather or reduce-scatter S/2): 3 x
# the rate per host for each of these collectives on these 4 ranks. With -o DIR also
# DIR/long-haul.csv (one row per collective, rate, latency and build: medians) and
# DIR/long-haul.png (busbw over the bound against the RTT, a line per collective and rate;
# bench/plot_table.py).
#
# Layout (bench/emulate/mixes/two-islands.yaml's, its latency varied): islands ib (ib-0, ib-1)
# and roce (roce-0, roce-1); inside an island 4 and 2 Gbit/s per host, between islands RATE per
# host (default 0.5 Gbit/s), each rank alone on its host.
#
# Usage: bench/emulate/long-haul.sh [-B BUILD] [-O OTHER_BUILD] [-s SIZE] [-n ITERS] [-w WARMUP]
#                                   [-r ROUNDS] [-L LATENCIES_US] [-R GBITS] [-A ALGO]
#                                   [-c COLLECTIVES] [-t SECONDS] [-o DIR]
#   -B BUILD         build with bin/holmes-run and holmes-bench (default $HOLMES_BUILD or build/)
#   -O OTHER_BUILD   also run this build, interleaved (its rows say "other")
#   -s SIZE          allreduce bytes (default 64M); -n, -w iterations (default 3, 1)
#   -r ROUNDS        rounds, interleaved; medians reported (default 3)
#   -L LATENCIES_US  one-way latencies between islands, comma-separated (default 30,1000,10000)
#   -R GBITS         rates between islands per host, Gbit/s, comma-separated (default 0.5)
#   -A ALGO          Holmes's algorithm (default auto)
#   -c COLLECTIVES   allreduce (default), allgather, reduce_scatter (SIZE: the whole buffer),
#                    comma-separated
#   -t SECONDS       limit of each run (default 180)
#   -o DIR           also write DIR/long-haul.csv and DIR/long-haul.png
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${HOLMES_BUILD:-$root/build}"
other=""
size=64M
iters=3
warmup=1
rounds=3
latencies=30,1000,10000
gbits=0.5
algo=auto
collectives=allreduce
run_timeout=180
out_dir=""
while getopts "B:O:s:n:w:r:L:R:A:c:t:o:h" opt; do
  case $opt in
    B) build="$OPTARG" ;;
    O) other="$OPTARG" ;;
    s) size="$OPTARG" ;;
    n) iters="$OPTARG" ;;
    w) warmup="$OPTARG" ;;
    r) rounds="$OPTARG" ;;
    L) latencies="$OPTARG" ;;
    R) gbits="$OPTARG" ;;
    A) algo="$OPTARG" ;;
    c) collectives="$OPTARG" ;;
    t) run_timeout="$OPTARG" ;;
    o) out_dir="$OPTARG" ;;
    *)
      awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"
      exit 2
      ;;
  esac
done
say() { printf 'long-haul: %s\n' "$*" >&2; }
die() {
  say "$*"
  exit 1
}
builds=("$build")
[[ -n $other ]] && builds+=("$other")
for b in "${builds[@]}"; do
  for tool in holmes-run holmes-bench; do [[ -x $b/bin/$tool ]] || die "$b/bin/$tool is not built"; done
done
IFS=, read -ra colls <<<"$collectives"
for c in "${colls[@]}"; do
  [[ $c =~ ^(allreduce|allgather|reduce_scatter)$ ]] ||
    die "-c wants allreduce, allgather or reduce_scatter, not '$c'"
done
IFS=, read -ra lats <<<"$latencies"
for l in "${lats[@]}"; do [[ $l =~ ^[0-9]+$ ]] || die "-L wants whole microseconds, not '$l'"; done
IFS=, read -ra rates <<<"$gbits"
for g in "${rates[@]}"; do
  [[ $g =~ ^[0-9]*\.?[0-9]+$ && ! $g =~ ^[0.]+$ ]] || die "-R wants Gbit/s above 0, not '$g'"
done
if [[ -n $out_dir ]]; then mkdir -p "$out_dir" || die "cannot make $out_dir"; fi

tmp="$(mktemp -d /tmp/holmes-long-haul.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT

# The topology: two-islands.yaml's, at scale 1 (rates as given) with the latency ($1) and rate
# ($2) between islands set; HOLMES_SHAPING=1 holds every link to it.
topology() {
  cat <<YAML
name: long-haul
emulation_scale: 1
link_classes:
  shm:      {fabric: nvlink,   gbit_per_s: 2400, latency_us: 2}
  ib:       {fabric: ib,       gbit_per_s: 4,    latency_us: 2}
  roce:     {fabric: roce,     gbit_per_s: 2,    latency_us: 4}
  wan:      {fabric: ethernet, gbit_per_s: $2, latency_us: $1}
intra_host_link: shm
inter_island_link: wan
islands:
  - {name: ib, fabric: ib, link_class: ib,
     hosts: [{name_prefix: ib-, count: 2, gpus: 1, gpu_model: cpu}]}
  - {name: roce, fabric: roce, link_class: roce,
     hosts: [{name_prefix: roce-, count: 2, gpus: 1, gpu_model: cpu}]}
YAML
}

say "2 islands x 2 hosts x 1 rank on loopback, ${rates[*]} Gbit/s per host between islands," \
  "latencies ${lats[*]} us one way, ${colls[*]} float32 $size, $rounds rounds;" \
  "builds ${builds[*]};" \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$tmp/results"
for ((round = 1; round <= rounds; round++)); do
  for c in "${colls[@]}"; do
    for g in "${rates[@]}"; do
      for l in "${lats[@]}"; do
        topology "$l" "$g" >"$tmp/topo.yaml"
        for b in "${builds[@]}"; do
          which=this
          [[ $b == "$other" ]] && which=other
          csv="$tmp/$which-$c-$g-$l-$round.csv"
          HOLMES_SHAPING=1 HOLMES_LOG_LEVEL=warn HOLMES_TIMEOUT_MS=$((run_timeout * 1000)) \
            EMULATE_RANK_HOSTS="ib-0 ib-1 roce-0 roce-1" timeout -k 5 "$run_timeout" \
            "$b/bin/holmes-run" -n 4 --topology "$tmp/topo.yaml" --timeout "$run_timeout" -- \
            "$here/rank-host.sh" "$b/bin/holmes-bench" "$c" -b "$size" -e "$size" \
            -n "$iters" -w "$warmup" --check --algo "$algo" --csv "$csv" >"$tmp/log" 2>&1 ||
            {
              tail -n 20 "$tmp/log" >&2
              die "$which build, $c, $g Gbit/s, latency $l us: the run failed"
            }
          printf '%s\t%s\t%s\t%s\t%s\n' "$which" "$c" "$g" "$l" "$csv" >>"$tmp/results"
          say "round $round, $c, $g Gbit/s, $l us, $which:" \
            "$(awk -F, 'NR == 2 {print $9 " GB/s (" $16 ")"}' "$csv")"
        done
      done
    done
  done
done

/usr/bin/python3 - "$tmp/results" "$size" "$out_dir" <<'EOF'
import csv, os, statistics, sys

results, size, out_dir = sys.argv[1:]
rows = {}
for line in open(results):
    which, collective, gbit, latency, path = line.rstrip("\n").split("\t")
    row = next(csv.DictReader(open(path)))
    if int(row["wrong"]) != 0:
        sys.exit(f"long-haul: {which} {collective} {gbit} Gbit/s {latency} us: "
                 f"{row['wrong']} wrong elements")
    rows.setdefault((collective, float(gbit), int(latency), which), []).append(
        (float(row["busbw"]), row["algorithm"]))
# An allreduce sends S across from each island through its 2 hosts' uplinks (an allgather or
# reduce-scatter S/2): time >= S / (2 x rate), busbw = 2(n-1)/n x S / time with n = 4 (or S/2 and
# (n-1)/n): 3 x the rate per host either way.
table = []
for (collective, gbit, latency, which), values in sorted(rows.items()):
    uplink = gbit * 1e9 / 8  # bytes/s per host
    bound = 3 * uplink / 1e9
    busbw = statistics.median(v[0] for v in values)
    rtt_ms = 2 * latency / 1000
    table.append({"collective": collective, "gbit_per_host": f"{gbit:g}",
                  "one_way_us": latency, "rtt_ms": f"{rtt_ms:g}",
                  "bdp_kb": f"{uplink * rtt_ms / 1e6:.0f}", "build": which,
                  "algorithm": values[0][1], "rounds": len(values), "busbw": f"{busbw:.4f}",
                  "bound_busbw": f"{bound:.4f}", "of_bound": f"{busbw / bound:.3f}"})
print(f"# {size} float32, busbw GB/s: the median of {len(next(iter(rows.values())))} rounds; "
      "bound: 3 x the rate per host (2 uplinks per island)")
print(f"{'collective':<15} {'Gbit/s':>6} {'build':<6} {'one-way':>8} {'RTT':>7} {'BW x RTT':>9} "
      f"{'algo':>5} {'busbw':>8} {'/ bound':>8}")
for t in table:
    print(f"{t['collective']:<15} {t['gbit_per_host']:>6} {t['build']:<6} "
          f"{t['one_way_us'] / 1000:7.2f}ms {float(t['rtt_ms']):5.2f}ms {t['bdp_kb']:>7}KB "
          f"{t['algorithm']:>5} {t['busbw']:>8} {float(t['of_bound']):8.2f}")
medians = {k: statistics.median(v[0] for v in vals) for k, vals in rows.items()}
for (collective, gbit, latency, which), busbw in sorted(medians.items()):
    other = medians.get((collective, gbit, latency, "other"))
    if which == "this" and other:
        print(f"this / other, {collective} {gbit:g} Gbit/s {latency} us: {busbw / other:.2f}x")
if out_dir:
    with open(os.path.join(out_dir, "long-haul.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
EOF
if [[ -n $out_dir ]]; then
  label="{collective}, {gbit_per_host} Gbit/s per host"
  [[ -n $other ]] && label+=", {build} build"
  /usr/bin/python3 "$root/bench/plot_table.py" "$out_dir/long-haul.csv" "$out_dir/long-haul.png" \
    --x rtt_ms --y of_bound --label "$label" --logx --hline "1=the slow tier's bound" \
    --title "The slow tier on long links: 2 islands x 2 hosts x 1 rank, $size" \
    --xlabel "RTT between the islands, ms (log)" \
    --ylabel "busbw / the slow tier's bound" ||
    die "could not draw $out_dir/long-haul.png"
  say "wrote $out_dir/long-haul.csv and $out_dir/long-haul.png"
fi
