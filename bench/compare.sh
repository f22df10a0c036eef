#!/usr/bin/env bash
# Holmes beside Gloo, Open MPI and torch.distributed over the same emulated links: one mix (a
# topology file) at a time, allreduce float32 sum, one table of busbw per library and size with
# Holmes/peer ratios and the bound the slow tier sets, a CSV and a PNG plot.
#
# Usage: bench/compare.sh MIX [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [--ranks N]
#                         [--out DIR] [-B BUILD] [-t SECONDS] [--libs LIST] [--loopback]
#                         [--holmes-shaping] [--shape all|uplinks|none]
#   MIX               a name from bench/emulate/mixes (pure-ib, pure-roce, pure-ethernet,
#                     two-islands, three-islands) or a topology file
#   -b, -e, -f        sizes, as holmes-bench (default 1K, 64M, 4)
#   -n, -w            timed and untimed iterations per size (default 5, 1); every size also runs
#                     one checked allreduce first (#wrong must be 0)
#   --ranks N         N / hosts ranks per host instead of the file's gpus (default: the file's)
#   --out DIR         results (default bench/results/compare-<mix>): compare.csv (every library
#                     and size), busbw.png, each library's own CSV and log
#   -B BUILD          build with bin/holmes-bench, holmes-run, holmes-topo, gloo-allreduce-bench,
#                     mpi-allreduce-bench (default: $HOLMES_BUILD or <repo>/build)
#   -t SECONDS        limit of each library's run (default 300)
#   --libs LIST       comma-separated subset of holmes,gloo,mpi,torch (default: all)
#   --loopback        the no-root mode even as root (below)
#   --holmes-shaping  with namespaces: also let Holmes's shaping layer hold its links (adds the
#                     file's latencies, which tc cannot; Holmes then also paces itself to the
#                     file's rates and gets latencies the peers do not: off by default)
#   --shape           which links tc shapes (cluster.sh --shape; default all)
#   COMPARE_RANK0_LOG  (environment) Holmes's rank 0 log level in netns mode (default info; debug
#                     adds the hierarchical collectives' phase timelines)
#
# Two modes:
#   as root    bench/emulate/cluster.sh builds the mix (a network namespace per host, links
#              shaped with tc tbf to the file's rates / emulation_scale) and every library runs
#              its ranks inside the hosts' namespaces: Holmes (holmes-bench, its ranks started
#              here with HOLMES_HOST/HOLMES_ADDR/HOLMES_TOPOLOGY; shaping layer off unless
#              --holmes-shaping, so it gets the same links as the peers; it probes
#              them at start, HOLMES_COST_PROBE=1), Gloo
#              (gloo-allreduce-bench), Open MPI (mpi-allreduce-bench, mpirun in the first host's
#              namespace, reaching the others through bench/emulate/netns-rsh.sh) and
#              torch.distributed gloo (bench/peers/torch_allreduce.py, when /usr/bin/python3 has
#              torch). No kernel delay exists here (no netem): the links have no latency.
#   no root    Holmes only, on loopback, its links held to the file's rates and latencies by its
#   (or        shaping layer (holmes-run + bench/emulate/rank-host.sh setting HOLMES_HOST per
#   --loopback) rank). The peers cannot be shaped without root: they are skipped, and the
#              output says so.
# The bound: an allreduce of S bytes must send 2(G-1)/G x S out of each of G units (islands, or
# hosts with one island) through the slowest unit's links (the sum of its hosts' uplinks), so
# busbw <= 2(P-1)/P x S / that time; tbf's goodput is about 0.956 x the nominal rate it uses.
# Every run is bounded by `timeout`; a failing library is reported and the others still run
# (exit status 1 then, or when a result is wrong).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
python=/usr/bin/python3
original_args=("$@")

say() { printf 'compare: %s\n' "$*" >&2; }
die() {
  say "$*"
  exit 1
}
usage() {
  awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"
  exit 2
}

build="${HOLMES_BUILD:-$root/build}"
min_size=1K
max_size=64M
factor=4
iters=5
warmup=1
ranks_opt=""
out=""
run_timeout=300
libs="holmes,gloo,mpi,torch"
loopback=0
holmes_shaping=0
shape=all
mix=""
while (($# > 0)); do
  case $1 in
    -b) min_size="${2:?}"; shift 2 ;;
    -e) max_size="${2:?}"; shift 2 ;;
    -f) factor="${2:?}"; shift 2 ;;
    -n) iters="${2:?}"; shift 2 ;;
    -w) warmup="${2:?}"; shift 2 ;;
    --ranks) ranks_opt="${2:?}"; shift 2 ;;
    --out) out="${2:?}"; shift 2 ;;
    -B) build="${2:?}"; shift 2 ;;
    -t) run_timeout="${2:?}"; shift 2 ;;
    --libs) libs="${2:?}"; shift 2 ;;
    --loopback) loopback=1; shift ;;
    --holmes-shaping) holmes_shaping=1; shift ;;
    --shape) shape="${2:?}"; shift 2 ;;
    -h | --help) usage ;;
    -*) die "unknown option $1 (see --help)" ;;
    *)
      [[ -z $mix ]] || die "one MIX only ('$mix', then '$1')"
      mix=$1
      shift
      ;;
  esac
done
[[ -n $mix ]] || usage
if [[ -f $mix ]]; then
  mix_file="$(realpath "$mix")"
elif [[ -f $here/emulate/mixes/$mix.yaml ]]; then
  mix_file="$here/emulate/mixes/$mix.yaml"
else
  die "no mix '$mix': give a topology file or one of: $(cd "$here/emulate/mixes" &&
    ls -- *.yaml | sed 's/\.yaml$//' | tr '\n' ' ')"
fi
mix_name="$(basename "$mix_file" .yaml)"
[[ -n $out ]] || out="$root/bench/results/compare-$mix_name"
for v in iters warmup run_timeout; do
  [[ ${!v} =~ ^[1-9][0-9]*$ || ($v == warmup && ${!v} == 0) ]] || die "$v wants a number"
done
[[ -z $ranks_opt || $ranks_opt =~ ^[1-9][0-9]*$ ]] || die "--ranks wants a positive number"
declare -A want=()
IFS=, read -ra lib_list <<<"$libs"
for lib in "${lib_list[@]}"; do
  [[ $lib =~ ^(holmes|gloo|mpi|torch)$ ]] || die "--libs: unknown library '$lib'"
  want[$lib]=1
done

bin="$build/bin"
[[ -x $bin/holmes-topo ]] || die "$bin/holmes-topo is not built. Build with:
  cmake -S $root -B $build -G Ninja -DHOLMES_WITH_UCX=OFF -DHOLMES_WITH_VERBS=OFF
  ninja -C $build holmes-bench holmes-run holmes-topo gloo-allreduce-bench mpi-allreduce-bench"

mode=netns
((EUID == 0 && loopback == 0)) || mode=loopback

# As root, the first pass builds the cluster and runs this script again inside it.
if [[ $mode == netns && -z ${CLUSTER_STATE:-} ]]; then
  cluster_args=(-B "$build" --shape "$shape")
  [[ -n $ranks_opt ]] && cluster_args+=(--ranks "$ranks_opt")
  exec "$here/emulate/cluster.sh" "${cluster_args[@]}" run "$mix_file" -- \
    "${BASH_SOURCE[0]}" "${original_args[@]}"
fi

mkdir -p "$out"
out="$(realpath "$out")"
tmp="$(mktemp -d /tmp/holmes-compare-emu.XXXXXX)"
background=()
cleanup() {
  local pid
  for pid in "${background[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- the plan: hosts, ranks, bound ------------------------------------------------------------
if [[ $mode == netns ]]; then
  plan="$CLUSTER_STATE"
  grep -qxF "$(printf 'file\t%s' "$mix_file")" "$plan" ||
    die "CLUSTER_STATE=$plan is a cluster of another topology than $mix_file"
else
  plan="$tmp/plan"
  plan_args=()
  [[ -n $ranks_opt ]] && plan_args=(--ranks "$ranks_opt")
  "$bin/holmes-topo" --file "$mix_file" --json | "$python" "$here/emulate/topology_plan.py" \
    "${plan_args[@]}" >"$plan" || die "cannot plan $mix_file"
fi
declare -a host_name=() host_addr=() host_ns=() host_ranks=() rank_host=() rank_local=()
while IFS=$'\t' read -r kind a b c _ e f _; do
  case $kind in
    host) host_name[a]=$b; host_addr[a]=$e; host_ranks[a]=$f ;;
    ns) host_ns[a]=$b ;;
    rank) rank_host[a]=$b; rank_local[a]=$c ;;
  esac
done <"$plan"
ranks=${#rank_host[@]}
((ranks >= 2)) || die "the mix has $ranks ranks; an allreduce needs 2 or more"

# ---- what runs ----------------------------------------------------------------------------------
run_libs=()
skipped=() # "library: why"
need_bin() { [[ -x $bin/$1 ]] || { skipped+=("$2: $bin/$1 is not built"); return 1; }; }
for lib in holmes gloo mpi torch; do
  [[ -n ${want[$lib]:-} ]] || continue
  if [[ $mode == loopback && $lib != holmes ]]; then
    skipped+=("$lib: peers cannot be shaped without root (tc needs network namespaces)")
    continue
  fi
  case $lib in
    holmes) need_bin holmes-bench holmes || continue
      [[ $mode == netns ]] || need_bin holmes-run holmes || continue ;;
    gloo) need_bin gloo-allreduce-bench gloo || continue ;;
    mpi) need_bin mpi-allreduce-bench mpi || continue
      command -v mpirun >/dev/null || {
        skipped+=("mpi: mpirun not found (openmpi-bin)")
        continue
      } ;;
    torch)
      if ! "$python" -c 'import torch' 2>/dev/null; then
        skipped+=("torch: python3-torch is absent (/usr/bin/python3 cannot import torch)")
        continue
      fi ;;
  esac
  run_libs+=("$lib")
done

in_host() { # in_host K CMD...: CMD in host K's namespace (netns mode) or here (loopback)
  local k=$1
  shift
  if [[ $mode == netns ]]; then ip netns exec "${host_ns[k]}" "$@"; else "$@"; fi
}

sweep=(-b "$min_size" -e "$max_size" -f "$factor" -n "$iters" -w "$warmup")

# Starts every rank of a job with RANK_CMD_FN (prints rank r's command, one word per line) in
# its host's namespace, waits for all, stops the others as soon as one fails. Returns the first
# failing status.
run_ranks() {
  local name=$1 fn=$2 r k status=0
  local -a live=()
  local -A rank_of=()
  for ((r = 0; r < ranks; r++)); do
    k=${rank_host[r]}
    local -a cmd
    mapfile -t cmd < <("$fn" "$r" "$k")
    in_host "$k" timeout -k 5 "$run_timeout" "${cmd[@]}" >"$out/$name.rank$r.log" 2>&1 &
    live+=($!)
    rank_of[$!]=$r
    background+=($!)
  done
  local pid code other
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
  return "$status"
}

job_token=""
job_port=0
holmes_rank_cmd() { # netns mode
  local r=$1 k=$2
  local level=warn
  ((r == 0)) && level=${COMPARE_RANK0_LOG:-info} # rank 0 logs its peers' transports and shaped links
  printf '%s\n' env "HOLMES_RANK=$r" "HOLMES_WORLD_SIZE=$ranks" \
    "HOLMES_LOCAL_RANK=${rank_local[r]}" "HOLMES_STORE=${host_addr[0]}:$job_port" \
    "HOLMES_TOKEN=$job_token" "HOLMES_HOST=${host_name[k]}" "HOLMES_ADDR=${host_addr[k]}" \
    "HOLMES_TOPOLOGY=$mix_file" "HOLMES_TIMEOUT_MS=$((run_timeout * 1000))" \
    "HOLMES_LOG_LEVEL=$level"
  # tc holds the links at the file's rates / emulation_scale, which Holmes is not told: it
  # measures them when it starts (its cost model then predicts what the links do).
  ((holmes_shaping == 1)) || printf '%s\n' HOLMES_SHAPING=0 HOLMES_COST_PROBE=1
  printf '%s\n' "$bin/holmes-bench" allreduce "${sweep[@]}" --check
  ((r == 0)) && printf '%s\n' --csv "$out/holmes.csv"
  return 0
}

gloo_store=""
gloo_rank_cmd() {
  local r=$1 k=$2
  printf '%s\n' env "RANK=$r" "WORLD_SIZE=$ranks" "GLOO_STORE_DIR=$gloo_store" \
    "GLOO_HOSTNAME=${host_addr[k]}" "GLOO_TIMEOUT_S=$run_timeout" \
    "$bin/gloo-allreduce-bench" allreduce "${sweep[@]}" -c
  ((r == 0)) && printf '%s\n' --csv "$out/gloo.csv"
  return 0
}

torch_rank_cmd() {
  local r=$1 k=$2
  printf '%s\n' env "RANK=$r" "WORLD_SIZE=$ranks" "MASTER_ADDR=${host_addr[0]}" \
    "MASTER_PORT=$job_port" GLOO_SOCKET_IFNAME=isl "TORCH_TIMEOUT_S=$run_timeout" \
    "$python" "$root/bench/peers/torch_allreduce.py" allreduce "${sweep[@]}" -c
  ((r == 0)) && printf '%s\n' --csv "$out/torch.csv"
  return 0
}

# Runs a command in the background and waits for it, so that a signal to this script is handled
# at once (bash defers traps until a foreground command ends) and the command is stopped by the
# cleanup.
run_waited() {
  "$@" &
  local pid=$! status=0
  background+=("$pid")
  wait "$pid" || status=$?
  return "$status"
}

run_lib() {
  local lib=$1 status=0
  rm -f "$out/$lib.csv" "$out/$lib".rank*.log "$out/$lib.log"
  job_port=$((30000 + RANDOM % 20000))
  job_token="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
  case $lib in
    holmes)
      if [[ $mode == netns ]]; then
        run_ranks holmes holmes_rank_cmd || status=$?
      else
        # Every rank's links are held by the shaping layer (HOLMES_SHAPING=1: also at scale 1).
        HOLMES_SHAPING=1 HOLMES_LOG_LEVEL=info HOLMES_TIMEOUT_MS=$((run_timeout * 1000)) \
          EMULATE_RANK_HOSTS="$(for ((r = 0; r < ranks; r++)); do
            printf '%s ' "${host_name[rank_host[r]]}"; done)" \
          run_waited timeout -k 5 "$run_timeout" "$bin/holmes-run" -n "$ranks" \
          --topology "$mix_file" --timeout "$run_timeout" -- \
          "$here/emulate/rank-host.sh" "$bin/holmes-bench" allreduce \
          "${sweep[@]}" --check --csv "$out/holmes.csv" >"$out/holmes.log" 2>&1 || status=$?
      fi
      ;;
    gloo)
      gloo_store="$(mktemp -d "$tmp/gloo-store.XXXXXX")"
      run_ranks gloo gloo_rank_cmd || status=$?
      ;;
    torch) run_ranks torch torch_rank_cmd || status=$? ;;
    mpi)
      local hostfile="$tmp/hostfile" k
      : >"$hostfile"
      for k in "${!host_name[@]}"; do
        ((${host_ranks[k]} > 0)) && printf '%s slots=%s\n' "${host_addr[k]}" "${host_ranks[k]}" \
          >>"$hostfile"
      done
      # mpirun runs in the first host's namespace and reaches the others through netns-rsh.sh;
      # vader (shared memory) only between ranks of one host, tcp on the namespaces' addresses;
      # yield_when_idle: spinning ranks otherwise starve each other on 2 cores.
      run_waited in_host 0 timeout -k 5 "$run_timeout" mpirun --allow-run-as-root --oversubscribe \
        -np "$ranks" --hostfile "$hostfile" --map-by slot --bind-to none \
        --mca plm_rsh_agent "$here/emulate/netns-rsh.sh" --mca plm_rsh_no_tree_spawn 1 \
        --mca routed direct --mca pml ob1 --mca btl tcp,vader,self \
        --mca btl_tcp_if_include 10.77.0.0/16 --mca oob_tcp_if_include 10.77.0.0/16 \
        --mca mpi_yield_when_idle 1 -x CLUSTER_STATE \
        "$bin/mpi-allreduce-bench" allreduce "${sweep[@]}" -c --csv "$out/mpi.csv" \
        >"$out/mpi.log" 2>&1 || status=$?
      ;;
  esac
  return "$status"
}

# Bytes each host has sent on its links so far ("isl uplink" per host, from sysfs).
link_bytes() {
  local k dev
  for k in "${!host_name[@]}"; do
    for dev in isl uplink; do
      in_host "$k" cat "/sys/class/net/$dev/statistics/tx_bytes" 2>/dev/null || echo 0
    done
  done | tr '\n' ' '
}

say "mix $mix_name ($mix_file), $ranks ranks on ${#host_name[@]} hosts, mode $mode;" \
  "libraries: ${run_libs[*]:-none}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for line in "${skipped[@]}"; do say "skipped $line"; done
: >"$tmp/links"
failed=()
for lib in "${run_libs[@]}"; do
  begun=$SECONDS
  before=""
  [[ $mode == netns ]] && before="$(link_bytes)"
  status=0
  run_lib "$lib" || status=$?
  if [[ $mode == netns ]]; then
    printf '%s %s | %s\n' "$lib" "$before" "$(link_bytes)" >>"$tmp/links"
  fi
  if ((status != 0)) || [[ ! -s $out/$lib.csv ]]; then
    failed+=("$lib")
    say "$lib FAILED (status $status) after $((SECONDS - begun))s; last lines of its logs:"
    for f in "$out/$lib".log "$out/$lib".rank*.log; do
      [[ -f $f ]] || continue
      printf -- '--- %s\n' "$f" >&2
      tail -n 12 "$f" >&2
    done
    ((status == 124 || status == 137)) && say "$lib: timed out after ${run_timeout}s (-t)"
    continue
  fi
  say "$lib done in $((SECONDS - begun))s"
done

# ---- the table, the CSV, the plot ---------------------------------------------------------------
skipped_text="$(printf '%s\n' "${skipped[@]}")"
status=0
"$python" - "$plan" "$out" "$mix_name" "$mode" "$tmp/links" "$skipped_text" "${failed[*]}" \
  "$holmes_shaping" <<'EOF' || status=$?
import csv, os, sys

plan_path, out, mix, mode, links_path, skipped, failed, holmes_shaping = sys.argv[1:]
names = {"holmes": "Holmes", "gloo": "Gloo", "mpi": "Open MPI", "torch": "torch gloo"}
plan = [line.rstrip("\n").split("\t") for line in open(plan_path)]
topo = next(p for p in plan if p[0] == "topology")
hosts = [p for p in plan if p[0] == "host"]
bound = next((p for p in plan if p[0] == "bound"), None)
ranks = sum(1 for p in plan if p[0] == "rank")

results = {}
for lib in names:
    path = os.path.join(out, f"{lib}.csv")
    if os.path.exists(path) and lib not in failed.split():
        with open(path) as f:
            results[lib] = {int(r["size"]): r for r in csv.DictReader(f)}
sizes = sorted({s for rows in results.values() for s in rows})


def bound_busbw(size):
    if bound is None:
        return None
    units, kbit = int(bound[2]), float(bound[3])
    seconds = 2 * (units - 1) / units * size / (kbit * 1000 / 8)
    return size / seconds / 1e9 * 2 * (ranks - 1) / ranks


def fmt_size(size):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


print(f"# {mix} ({topo[1]}, emulation_scale {topo[2]}): {topo[3]} island(s), {topo[4]} hosts, "
      f"{ranks} ranks; allreduce float32 sum, busbw in GB/s (out of place)")
for h in hosts:
    up = f", uplink {float(h[8]) / 1e6:g} Gbit/s" if h[8] != "0" else ""
    print(f"#   {h[2]} ({h[4]}, {h[6]} rank(s)): island link {h[9]} "
          f"{float(h[7]) / 1e6:g} Gbit/s{up}")
if mode == "netns":
    shaping = ("Holmes's shaping layer on top (latencies for Holmes only)"
               if holmes_shaping == "1" else "no latency for anyone (no netem)")
    print(f"# mode: network namespaces, links shaped by tc tbf; {shaping}")
else:
    print("# mode: loopback, Holmes's links held to the file's rates and latencies by its "
          "shaping layer")
if bound is not None:
    print(f"# bound: 2(G-1)/G x S over the slowest of {bound[2]} {bound[1]} "
          f"({float(bound[3]) / 1e6:g} Gbit/s out of it)")
for line in filter(None, skipped.split("\n")):
    print(f"# skipped {line}")
for lib in failed.split():
    print(f"# {names[lib]}: FAILED (see its logs in {out})")

libs = [lib for lib in names if lib in results]
peers = [lib for lib in libs if lib != "holmes"]
head = ["size", "bound"] + [names[l] for l in libs]
if "holmes" in results:
    # The cost model's prediction for the algorithm it chose, against the measured time.
    head += ["algo", "pred/meas"] + [f"H/{names[p]}" for p in peers]
rows = []
wrong_total = 0
for size in sizes:
    b = bound_busbw(size)
    row = [fmt_size(size), f"{b:.4f}" if b else "-"]
    for lib in libs:
        r = results[lib].get(size)
        row.append(f"{float(r['busbw']):.4f}" if r else "-")
        if r:
            wrong_total += sum(max(0, int(r[k])) for k in ("wrong", "wrong_inplace") if k in r)
    if "holmes" in results:
        h = results["holmes"].get(size)
        row.append(h.get("algorithm", "?") if h else "-")
        pred = float(h.get("predicted_us") or 0) if h else 0
        row.append(f"{pred / float(h['time_us']):.2f}" if pred > 0 and float(h["time_us"]) > 0
                   else "-")
        for p in peers:
            r = results[p].get(size)
            ok = h and r and float(r["busbw"]) > 0
            row.append(f"{float(h['busbw']) / float(r['busbw']):.2f}" if ok else "-")
    rows.append(row)
widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)] if rows else []
if rows:
    print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
    for row in rows:
        print("  ".join(str(x).rjust(w) for x, w in zip(row, widths)))
print(f"# #wrong over all sizes and libraries (out of place and in place): {wrong_total}")

# Bytes through the emulated links per library (each host's isl + uplink transmit counters):
# shows that every library's traffic crossed the shaped links.
if mode == "netns" and os.path.exists(links_path):
    for line in open(links_path):
        lib, counters = line.split(" ", 1)
        before, after = (list(map(int, part.split())) for part in counters.split("|"))
        diff = [a - b for a, b in zip(after, before)]
        island = sum(diff[0::2]) / 1e6
        uplink = sum(diff[1::2]) / 1e6
        text = f"# {names[lib]}: {island:.0f} MB sent on island links"
        if any(h[8] != "0" for h in hosts):
            text += f", {uplink:.0f} MB on uplinks between islands"
        print(text + " (all hosts, whole run)")

with open(os.path.join(out, "compare.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["mix", "mode", "library", "size", "ranks", "time_us", "algbw", "busbw",
                "busbw_inplace", "wrong", "wrong_inplace", "algorithm", "predicted_us",
                "bound_busbw"])
    for lib in libs:
        for size in sizes:
            r = results[lib].get(size)
            if not r:
                continue
            b = bound_busbw(size)
            w.writerow([mix, mode, names[lib], size, ranks, r["time_us"], r["algbw"], r["busbw"],
                        r["busbw_inplace"], r["wrong"], r["wrong_inplace"],
                        r.get("algorithm", ""), r.get("predicted_us", ""),
                        f"{b:.6f}" if b else ""])
sys.exit(1 if failed.split() or wrong_total else 0)
EOF
if [[ -s $out/compare.csv ]]; then
  title="$mix_name: allreduce float32, $ranks ranks ($mode)"
  "$python" "$root/bench/plot_busbw.py" "$out/compare.csv" "$out/busbw.png" --title "$title" ||
    say "the plot failed (python3-matplotlib?)"
  say "wrote $out/compare.csv and $out/busbw.png"
fi
exit "$status"
