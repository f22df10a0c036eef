#!/usr/bin/env bash
# Holmes beside Gloo and Open MPI on this machine, in one run: 4 local ranks, allreduce float32
# sum, 1 MiB .. 64 MiB (x4) busbw and the 8-byte latency of each of
#   holmes-auto   Holmes with the transport it picks (one host: shm)
#   holmes-tcp    Holmes forced onto tcp (HOLMES_TRANSPORT=tcp)
#   gloo-tcp      gloo::allreduce ring over Gloo's tcp transport on 127.0.0.1
#   ompi-tcp      Open MPI MPI_Allreduce, --mca btl tcp,self on lo
#   ompi-vader    Open MPI MPI_Allreduce, --mca btl vader,self (shared memory)
# plus the loopback TCP capacity (one iperf3 pair per rank at once on 127.0.0.1). Every
# measurement is repeated REPS times, interleaved, and the median is kept (this machine is
# noisy). Prints one table and the ratios issue 4 sets targets for (at 16 MiB), and writes CSV
# files.
#
# Usage: bench/compare-local.sh [-B BUILD] [-o CSV] [-r REPS] [-t SECONDS]
#   -B BUILD    build directory with holmes-run, holmes-bench, gloo-allreduce-bench and
#               mpi-allreduce-bench in bin/ (default: $HOLMES_BUILD or <repo>/build)
#   -o CSV      summary CSV (default: <repo>/bench/results/compare-local.csv); the raw runs go
#               to <CSV without .csv>-runs.csv and the ratios to <...>-ratios.csv
#   -r REPS     repetitions of every measurement (default 3)
#   -t SECONDS  limit of each single run (default 90)
# Environment: COMPARE_RANKS (default 4), COMPARE_BW_ITERS / COMPARE_BW_WARMUP (default 5 / 2),
# COMPARE_LAT_ITERS / COMPARE_LAT_WARMUP (default 500 / 50), COMPARE_IPERF_SECONDS (default 3),
# COMPARE_KEEP_TMP=1 (keep every run's CSV and log in the temporary directory).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${HOLMES_BUILD:-$root/build}"
csv="$root/bench/results/compare-local.csv"
reps=3
run_timeout=90
while getopts "B:o:r:t:h" opt; do
  case $opt in
    B) build="$OPTARG" ;;
    o) csv="$OPTARG" ;;
    r) reps="$OPTARG" ;;
    t) run_timeout="$OPTARG" ;;
    *)
      awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"
      exit 2
      ;;
  esac
done
ranks="${COMPARE_RANKS:-4}"
bw_iters="${COMPARE_BW_ITERS:-5}"
bw_warmup="${COMPARE_BW_WARMUP:-2}"
lat_iters="${COMPARE_LAT_ITERS:-500}"
lat_warmup="${COMPARE_LAT_WARMUP:-50}"
iperf_seconds="${COMPARE_IPERF_SECONDS:-3}"
python=/usr/bin/python3

die() {
  printf 'compare-local: %s\n' "$*" >&2
  exit 1
}

[[ $reps =~ ^[1-9][0-9]*$ ]] || die "-r wants a positive number, not '$reps'"
[[ $run_timeout =~ ^[1-9][0-9]*$ ]] || die "-t wants a positive number of seconds"
bin="$build/bin"
for tool in holmes-run holmes-bench gloo-allreduce-bench mpi-allreduce-bench; do
  [[ -x $bin/$tool ]] || die "$bin/$tool is not built. Build it with:
  scripts/setup-debian.sh    (installs libgloo-dev, libopenmpi-dev, iperf3)
  cmake -S $root -B $build -G Ninja
  ninja -C $build holmes-run holmes-bench gloo-allreduce-bench mpi-allreduce-bench
(configure skips gloo-allreduce-bench and mpi-allreduce-bench when their library is absent)"
done
for cmd in mpirun iperf3 timeout "$python"; do
  command -v "$cmd" >/dev/null || die "$cmd not found (scripts/setup-debian.sh installs it)"
done

tmp="$(mktemp -d /tmp/holmes-compare.XXXXXX)"
background=() # pids of the processes this script started that are still running
keep_tmp="${COMPARE_KEEP_TMP:-0}"
cleanup() {
  local pid
  for pid in "${background[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [[ $keep_tmp == 1 ]]; then
    printf 'compare-local: kept the runs and logs in %s\n' "$tmp" >&2
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bw_args=(allreduce -b 1M -e 64M -f 4 -n "$bw_iters" -w "$bw_warmup" -c)
lat_args=(allreduce -b 8 -e 8 -n "$lat_iters" -w "$lat_warmup" -c)

# Runs one measurement: run CONFIG KIND REP, where KIND is bw or lat. Leaves
# $tmp/CONFIG.KIND.REP.csv and its log; fails with the log's tail when the run fails.
run() {
  local config=$1 kind=$2 rep=$3
  local out="$tmp/$config.$kind.$rep.csv" log="$tmp/$config.$kind.$rep.log"
  local -a args
  if [[ $kind == bw ]]; then args=("${bw_args[@]}"); else args=("${lat_args[@]}"); fi
  args+=(--csv "$out")
  local status=0 begun=$SECONDS
  case $config in
    holmes-auto | holmes-tcp)
      local transport=auto
      [[ $config == holmes-tcp ]] && transport=tcp
      # The latency runs log (at init) which transport each peer got.
      local level=warn
      [[ $kind == lat ]] && level=info
      HOLMES_TRANSPORT=$transport HOLMES_LOG_LEVEL=$level \
        timeout -k 5 "$run_timeout" "$bin/holmes-run" -n "$ranks" --timeout "$run_timeout" -- \
        "$bin/holmes-bench" "${args[@]}" >"$log" 2>&1 || status=$?
      ;;
    gloo-tcp) run_gloo "$log" "${args[@]}" || status=$? ;;
    ompi-tcp | ompi-vader)
      local btl=tcp
      [[ $config == ompi-vader ]] && btl=vader
      # yield_when_idle: 4 spinning ranks on 2 cores otherwise starve each other (ms stalls).
      timeout -k 5 "$run_timeout" mpirun -np "$ranks" --oversubscribe --allow-run-as-root \
        --bind-to none --mca pml ob1 --mca btl "$btl,self" --mca btl_tcp_if_include lo \
        --mca oob_tcp_if_include lo --mca mpi_yield_when_idle 1 \
        "$bin/mpi-allreduce-bench" "${args[@]}" >"$log" 2>&1 || status=$?
      ;;
  esac
  echo "$config $((SECONDS - begun))" >>"$tmp/durations"
  if ((status != 0)) || [[ ! -s $out ]]; then
    tail -n 20 "$log" >&2 || true
    ((status == 124 || status == 137)) &&
      die "$config $kind run $rep timed out after ${run_timeout}s"
    die "$config $kind run $rep failed (exit status $status); its log's tail is above"
  fi
}

# Gloo has no launcher: start the ranks here, meeting in a fresh FileStore directory; when one
# fails, stop the others rather than let them wait for it until their timeout.
run_gloo() {
  local log=$1
  shift
  local store
  store="$(mktemp -d "$tmp/gloo-store.XXXXXX")"
  local -a live=()
  local -A rank_of=()
  local r other
  for ((r = 0; r < ranks; r++)); do
    # Only rank 0 writes the --csv file.
    RANK=$r WORLD_SIZE=$ranks GLOO_STORE_DIR=$store GLOO_TIMEOUT_S=$run_timeout \
      timeout -k 5 "$run_timeout" "$bin/gloo-allreduce-bench" "$@" >"$log.rank$r" 2>&1 &
    live+=($!)
    rank_of[$!]=$r
  done
  background=("${live[@]}")
  # Polls rather than `wait -n`, which loses ranks that exit while others are being stopped.
  local status=0
  while ((${#live[@]} > 0)); do
    local -a still=()
    local pid code
    for pid in "${live[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then
        still+=("$pid")
        continue
      fi
      code=0
      wait "$pid" || code=$?
      # The first failure is the cause; the ranks stopped after it fail too.
      if ((code != 0 && status == 0)); then
        status=$code
        printf 'compare-local: gloo rank %s exited with status %d; stopping the others\n' \
          "${rank_of[$pid]}" "$code" >>"$log.rank${rank_of[$pid]}"
        for other in "${live[@]}"; do kill "$other" 2>/dev/null || true; done
      fi
    done
    live=("${still[@]}")
    background=("${live[@]}")
    ((${#live[@]} == 0)) || sleep 0.1
  done
  cat "$log.rank"* >"$log"
  rm -rf "$store"
  return "$status"
}

# Loopback TCP capacity: one iperf3 pair per rank (a server and a client of one stream each), all
# at once on 127.0.0.1, as a ring's ranks each send and receive; bits/s received, per pair. One
# iperf3 client with -P streams is a single process, and Holmes's tcp ring passed what it
# measured (BENCHMARKS.md), so that understated what the ranks' processes get.
measure_loopback() {
  local rep=$1 attempt k
  # Servers that cannot start (a random port taken, say) are retried on other ports.
  for attempt in 1 2 3; do
    local base=$((20000 + RANDOM % 20000))
    local -a servers=() clients=()
    for ((k = 0; k < ranks; k++)); do
      timeout -k 5 $((iperf_seconds + 30)) iperf3 -s -1 -B 127.0.0.1 -p $((base + k)) \
        >"$tmp/iperf-server.$rep.$k.log" 2>&1 &
      servers+=($!)
    done
    background=("${servers[@]}")
    for ((k = 0; k < ranks; k++)); do
      loopback_client "$rep" "$k" $((base + k)) "${servers[k]}" &
      clients+=($!)
    done
    background+=("${clients[@]}")
    local status=0 pid
    for pid in "${clients[@]}"; do wait "$pid" || status=1; done
    for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${servers[@]}"; do wait "$pid" 2>/dev/null || true; done
    background=()
    ((status == 0)) && return 0
    rm -f "$tmp"/iperf."$rep".*.json
    cat "$tmp"/iperf-server."$rep".*.log >&2 || true
  done
  cat "$tmp"/iperf.*.err >&2 2>/dev/null || true
  die "iperf3 on 127.0.0.1 failed"
}

# One client of measure_loopback: connects (retrying while its server starts) and keeps the JSON.
loopback_client() {
  local rep=$1 k=$2 port=$3 server=$4 tries=0
  local json="$tmp/iperf.$rep.$k.json" err="$tmp/iperf.$rep.$k.err"
  while ((tries < 20)); do
    # The JSON must hold a received total: iperf3 can exit 0 with only an "error" in it.
    if timeout -k 5 $((iperf_seconds + 20)) iperf3 -c 127.0.0.1 -p "$port" \
      -t "$iperf_seconds" -J >"$json" 2>"$err" && grep -q '"sum_received"' "$json"; then
      return 0
    fi
    grep -q "unable to connect\|Connection refused" "$json" "$err" || break
    kill -0 "$server" 2>/dev/null || break # the server is gone
    tries=$((tries + 1))
    sleep 0.2
  done
  rm -f "$json"
  return 1
}

configs=(holmes-auto holmes-tcp gloo-tcp ompi-tcp ompi-vader)
started=$SECONDS
printf 'compare-local: %d ranks, %d repetitions, %s, load average %s\n' "$ranks" "$reps" \
  "$build" "$(cut -d' ' -f1-3 /proc/loadavg)"
for ((rep = 1; rep <= reps; rep++)); do
  measure_loopback "$rep"
  for config in "${configs[@]}"; do
    run "$config" bw "$rep"
    run "$config" lat "$rep"
  done
  printf 'compare-local: repetition %d of %d done [%ds]\n' "$rep" "$reps" $((SECONDS - started))
done

# Which transport Holmes gave rank 0's peers (its info line: "...): shm -> 1,2,3 (same host);").
for config in holmes-auto holmes-tcp; do
  grep -m 1 -o "rank 0/[0-9]* on .*" "$tmp/$config.lat.1.log" | sed 's/^[^)]*): //' \
    >"$tmp/$config.transports" || true
done

mkdir -p "$(dirname "$csv")"
analysis=0
"$python" - "$tmp" "$csv" "$ranks" "$reps" <<'EOF' || analysis=$?
import csv, glob, json, os, statistics, sys

tmp, out, ranks, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
configs = ["holmes-auto", "holmes-tcp", "gloo-tcp", "ompi-tcp", "ompi-vader"]
labels = {
    "holmes-auto": "Holmes (auto: shm)", "holmes-tcp": "Holmes (tcp)", "gloo-tcp": "Gloo (tcp)",
    "ompi-tcp": "Open MPI (tcp)", "ompi-vader": "Open MPI (vader)",
}
stem = out[:-4] if out.endswith(".csv") else out

runs = []  # every row of every run
for config in configs:
    for path in sorted(glob.glob(os.path.join(tmp, f"{config}.*.csv"))):
        kind, rep = os.path.basename(path).split(".")[1:3]
        with open(path) as f:
            for row in csv.DictReader(f):
                runs.append(dict(config=config, kind=kind, rep=int(rep), **row))

per_rep = {}  # repetition -> bits/s received over all pairs
for path in glob.glob(os.path.join(tmp, "iperf.*.*.json")):
    rep = int(os.path.basename(path).split(".")[1])
    with open(path) as f:
        received = json.load(f)["end"]["sum_received"]["bits_per_second"]
    per_rep[rep] = per_rep.get(rep, 0.0) + received
loopback = list(per_rep.values())  # one total per repetition

summary = {}  # (config, size) -> medians
for config in configs:
    sizes = sorted({int(r["size"]) for r in runs if r["config"] == config})
    for size in sizes:
        rows = [r for r in runs if r["config"] == config and int(r["size"]) == size]
        busbw = [float(r["busbw"]) for r in rows]
        summary[(config, size)] = dict(
            runs=len(rows),
            busbw=statistics.median(busbw), busbw_min=min(busbw), busbw_max=max(busbw),
            busbw_inplace=statistics.median(float(r["busbw_inplace"]) for r in rows),
            time_us=statistics.median(float(r["time_us"]) for r in rows),
            wrong=sum(max(0, int(r["wrong"])) + max(0, int(r["wrong_inplace"])) for r in rows),
        )

MiB = 1 << 20
bw_sizes = [MiB, 4 * MiB, 16 * MiB, 64 * MiB]
capacity = statistics.median(loopback) / 8e9  # GB/s over all streams
ring_bound = capacity / ranks  # each rank of a ring sends busbw: n x busbw crosses loopback

def get(config, size, key):
    return summary.get((config, size), {}).get(key, float("nan"))

print()
print(f"{ranks} ranks, allreduce float32 sum, out of place; busbw in GB/s, medians of {reps} runs")
head = f"{'':18}" + "".join(f"{s // MiB:>7} MiB" for s in bw_sizes)
head += f"{'8 B time':>12}{'#wrong':>8}"
print(head)
for config in configs:
    cells = "".join(f"{get(config, s, 'busbw'):>11.3f}" for s in bw_sizes)
    wrong = sum(v["wrong"] for (c, _), v in summary.items() if c == config)
    print(f"{labels[config]:18}{cells}{get(config, 8, 'time_us'):>9.1f} us{wrong:>8}")
print(f"loopback TCP ({ranks} iperf3 pairs at once): {capacity * 8:.1f} Gbit/s = {capacity:.2f} GB/s in total; "
      f"a {ranks}-rank tcp ring is bound near {ring_bound:.2f} GB/s busbw")
for config in ("holmes-auto", "holmes-tcp"):
    path = os.path.join(tmp, f"{config}.transports")
    if os.path.exists(path) and os.path.getsize(path):
        print(f"{labels[config]}: rank 0's peers:", open(path).read().strip())

S = 16 * MiB
def bw(config):
    return get(config, S, "busbw")
def lat(config):
    return get(config, 8, "time_us")
ratios = [
    ("busbw 16 MiB Holmes(shm) / Gloo", bw("holmes-auto") / bw("gloo-tcp"), ">=", 2.0),
    ("busbw 16 MiB Holmes(shm) / OMPI vader", bw("holmes-auto") / bw("ompi-vader"), ">=", 1.2),
    ("busbw 16 MiB Holmes(tcp) / Gloo", bw("holmes-tcp") / bw("gloo-tcp"), ">=", 1.0),
    ("busbw 16 MiB Holmes(tcp) / OMPI tcp", bw("holmes-tcp") / bw("ompi-tcp"), ">=", 1.2),
    ("busbw 16 MiB Holmes(tcp) / loopback ring bound", bw("holmes-tcp") / ring_bound, "", None),
    ("8 B time Holmes(shm) / Gloo", lat("holmes-auto") / lat("gloo-tcp"), "<=", 1.0),
    ("8 B time Holmes(shm) / OMPI vader", lat("holmes-auto") / lat("ompi-vader"), "<=", 1.0),
    ("8 B time Holmes(tcp) / Gloo", lat("holmes-tcp") / lat("gloo-tcp"), "<=", 1.0),
    ("8 B time Holmes(tcp) / OMPI tcp", lat("holmes-tcp") / lat("ompi-tcp"), "<=", 1.0),
]
def verdict(value, cmp, target):
    if target is None:
        return ""
    return "met" if (value >= target if cmp == ">=" else value <= target) else "MISSED"
print()
print(f"{'ratio (issue 4 targets)':48}{'value':>8}  {'target':>8}")
for name, value, cmp, target in ratios:
    goal = f"{cmp} {target:.1f}" if target is not None else ""
    print(f"{name:48}{value:>8.2f}  {goal:>8}  {verdict(value, cmp, target)}")

with open(out, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["config", "size", "runs", "busbw_median", "busbw_min", "busbw_max",
                "busbw_inplace_median", "time_us_median", "wrong"])
    for (config, size), v in summary.items():
        w.writerow([config, size, v["runs"], f"{v['busbw']:.6f}", f"{v['busbw_min']:.6f}",
                    f"{v['busbw_max']:.6f}", f"{v['busbw_inplace']:.6f}", f"{v['time_us']:.3f}",
                    v["wrong"]])
    w.writerow(["loopback-tcp-iperf3", "", len(loopback), f"{capacity:.6f}",
                f"{min(loopback) / 8e9:.6f}", f"{max(loopback) / 8e9:.6f}", "", "", ""])
with open(stem + "-ratios.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["ratio", "value", "target", "verdict"])
    for name, value, cmp, target in ratios:
        w.writerow([name, f"{value:.4f}", f"{cmp}{target}" if target is not None else "",
                    verdict(value, cmp, target)])
with open(stem + "-runs.csv", "w", newline="") as f:
    fields = ["config", "kind", "rep"] + [k for k in runs[0] if k not in ("config", "kind", "rep")]
    w = csv.DictWriter(f, fieldnames=fields)
    w.writeheader()
    w.writerows(runs)
print()
print(f"wrote {out}, {stem}-ratios.csv, {stem}-runs.csv")
total_wrong = sum(v["wrong"] for v in summary.values())
sys.exit(3 if total_wrong else 0)
EOF
if ((analysis == 3)); then
  die "some results were wrong: see the #wrong column"
elif ((analysis != 0)); then
  keep_tmp=1
  die "summarising the runs failed (exit status $analysis)"
fi
printf 'compare-local: done in %ds (seconds per configuration, all runs: %s)\n' \
  $((SECONDS - started)) "$(sort "$tmp/durations" | awk '{t[$1] += $2} END {
    for (c in t) printf "%s %d, ", c, t[c]}' | sed 's/, $//')"
