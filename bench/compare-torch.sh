#!/usr/bin/env bash
# torch.distributed on backend holmes beside backend gloo and beside Holmes's own C API, on this
# machine, in one run: RANKS local ranks, allreduce float32 sum, 1 MiB .. 64 MiB (x4), busbw of
#   holmes-capi    holmes-bench (the C API, the transport and algorithm Holmes picks)
#   torch-holmes   bench/peers/torch_allreduce.py --backend holmes (import holmes.torch)
#   torch-gloo     bench/peers/torch_allreduce.py --backend gloo (torch's own)
# Every run is repeated REPS times, interleaved, and the median busbw kept (this machine is
# noisy). Prints one table (in-place busbw: torch reduces in place; its out-of-place column adds
# torch's own input copy) and the ratios torch-holmes/torch-gloo and torch-holmes/holmes-capi.
#
# Usage: bench/compare-torch.sh [-B BUILD] [-n RANKS] [-r REPS] [-t SECONDS] [-e MAXBYTES]
#   -B BUILD    build directory (default: $HOLMES_BUILD or <repo>/build)
#   -n RANKS    local ranks (default 4)
#   -r REPS     repetitions of every run (default 3)
#   -t SECONDS  limit of each run (default 300)
#   -e MAX      largest size (default 64M)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${HOLMES_BUILD:-$root/build}"
ranks=4
reps=3
run_timeout=300
max=64M
while getopts "B:n:r:t:e:h" opt; do
  case $opt in
    B) build="$OPTARG" ;;
    n) ranks="$OPTARG" ;;
    r) reps="$OPTARG" ;;
    t) run_timeout="$OPTARG" ;;
    e) max="$OPTARG" ;;
    *)
      awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"
      exit 2
      ;;
  esac
done
bin="$build/bin"
python=/usr/bin/python3
extension="$(ls "$build"/lib/python/_holmes_torch*.so 2>/dev/null | head -1)"
[[ -x $bin/holmes-run && -x $bin/holmes-bench ]] || {
  echo "compare-torch: build $build first (make build)" >&2
  exit 2
}
[[ -n $extension ]] || {
  echo "compare-torch: $build has no torch backend (python3-torch, libtorch-dev; HOLMES_WITH_TORCH)" >&2
  exit 2
}
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
sweep=(-b 1M -e "$max" -f 4 -n 5 -w 2)
export HOLMES_LIBRARY="$build/lib/libholmes.so" HOLMES_TORCH_EXTENSION="$extension"
export PYTHONPATH="$root/bindings/python${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1
export TORCH_TIMEOUT_S=$run_timeout HOLMES_TIMEOUT_MS=$((run_timeout * 1000))

run() {  # run NAME REP
  local name=$1 rep=$2 csv="$tmp/$1.$2.csv"
  case $name in
    holmes-capi)
      timeout -k 5 "$run_timeout" "$bin/holmes-run" -n "$ranks" -- "$bin/holmes-bench" allreduce \
        "${sweep[@]}" --check --csv "$csv" >"$tmp/$name.log" 2>&1 ;;
    torch-holmes | torch-gloo)
      timeout -k 5 "$run_timeout" "$bin/holmes-run" -n "$ranks" --torch -- "$python" \
        "$root/bench/peers/torch_allreduce.py" allreduce "${sweep[@]}" -c \
        --backend "${name#torch-}" --csv "$csv" >"$tmp/$name.log" 2>&1 ;;
  esac || {
    echo "compare-torch: $name failed:" >&2
    tail -n 20 "$tmp/$name.log" >&2
    exit 1
  }
}

echo "compare-torch: $ranks ranks, allreduce float32 1M..$max, $reps interleaved rounds," \
  "build $build, commit $(git -C "$root" rev-parse --short HEAD), $(date -u '+%F %H:%M') UTC," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for ((rep = 0; rep < reps; rep++)); do
  for name in holmes-capi torch-holmes torch-gloo; do
    run "$name" "$rep"
  done
done

"$python" - "$tmp" "$reps" "$ranks" <<'EOF'
import csv, statistics, sys
tmp, reps, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
names = ("holmes-capi", "torch-holmes", "torch-gloo")
busbw = {}  # (name, size, column) -> [values]
for name in names:
    for rep in range(reps):
        with open(f"{tmp}/{name}.{rep}.csv") as f:
            for row in csv.DictReader(f):
                if row.get("wrong", "0") not in ("0", "-1") or \
                        row.get("wrong_inplace", "0") not in ("0", "-1"):
                    sys.exit(f"{name}: wrong elements at {row['size']} B")
                for col in ("busbw", "busbw_inplace"):
                    busbw.setdefault((name, int(row["size"]), col), []).append(float(row[col]))
sizes = sorted({k[1] for k in busbw})
med = {k: statistics.median(v) for k, v in busbw.items()}
print(f"# {ranks} ranks, allreduce float32 sum, busbw GB/s (median of {reps}; in place, "
      "out of place in parentheses)")
print(f"{'size':>10} " + " ".join(f"{n:>20}" for n in names) +
      f" {'holmes/gloo':>12} {'holmes/capi':>12}")
for s in sizes:
    cells = " ".join(f"{med[(n, s, 'busbw_inplace')]:>10.3f} ({med[(n, s, 'busbw')]:>6.3f})"
                     for n in names)
    th, tg, capi = (med[(n, s, "busbw_inplace")] for n in names[1:] + names[:1])
    print(f"{s:>10} {cells} {th / tg:>12.2f} {th / capi:>12.2f}")
EOF
