#!/usr/bin/env bash
# The torch example (train.py) on the emulated two islands of `make demo`'s topology, as root:
# one network namespace per host of examples/topologies/emulated-two-islands.yaml (an IB and a
# RoCE island of two hosts, 2 ranks each), every link held by tc to the file's rates / 100
# (bench/emulate/cluster.sh), so Holmes and torch's gloo get the same links. Ranks arrive as a
# launcher with an interleaved hostfile starts them (rank r on island r % 2), as in make demo.
# Runs, each checked step by step against the single-process reference:
#   holmes  backend holmes, the planner's placement (DP inside islands, stages across)
#   gloo    backend gloo, the naive placement (Megatron's rank order, even split)
# and prints both mean step times and the speedup. Removes every namespace it made.
#
# Usage: examples/torch/islands.sh [-B BUILD] [-s STEPS] [-t SECONDS]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${HOLMES_BUILD:-$root/build}"
steps=12
run_timeout=300
while getopts "B:s:t:h" opt; do
  case $opt in
    B) build="$OPTARG" ;;
    s) steps="$OPTARG" ;;
    t) run_timeout="$OPTARG" ;;
    *)
      awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"
      exit 2
      ;;
  esac
done
build="$(realpath "$build")"
topology="$root/examples/topologies/emulated-two-islands.yaml"
((EUID == 0)) || { echo "islands.sh: needs root (network namespaces, tc)" >&2; exit 2; }
if [[ -z ${CLUSTER_STATE:-} ]]; then
  exec "$root/bench/emulate/cluster.sh" -B "$build" --ranks 8 run "$topology" -- \
    "${BASH_SOURCE[0]}" -B "$build" -s "$steps" -t "$run_timeout"
fi

declare -a host_name=() host_addr=() host_ns=()
while IFS=$'\t' read -r kind a b _ _ e _ _; do
  case $kind in
    host) host_name[a]=$b; host_addr[a]=$e ;;
    ns) host_ns[a]=$b ;;
  esac
done <"$CLUSTER_STATE"
ranks=8
# Rank r: island r % 2 (hosts 0, 1 are emu-ib-*, 2, 3 emu-roce-*), host (r / 2) % 2 of it.
host_of() { echo $(((($1 % 2) * 2) + (($1 / 2) % 2))); }
tmp="$(mktemp -d)"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
extension="$(ls "$build"/lib/python/_holmes_torch*.so | head -1)"
train=(--steps "$steps" --width 256 --layers 8 --micro-batch 16 --global-batch 256 --pp 2)

/usr/bin/python3 "$here/train.py" "${train[@]}" --reference --losses-out "$tmp/reference.txt"

run() {  # run BACKEND PLACEMENT
  local backend=$1 placement=$2 r k port=$((30000 + RANDOM % 20000)) status=0
  pids=()
  for ((r = 0; r < ranks; r++)); do
    k=$(host_of $r)
    ip netns exec "${host_ns[k]}" env RANK=$r WORLD_SIZE=$ranks LOCAL_RANK=$((r / 4)) \
      MASTER_ADDR="${host_addr[0]}" MASTER_PORT=$port GLOO_SOCKET_IFNAME=isl OMP_NUM_THREADS=1 \
      HOLMES_HOST="${host_name[k]}" HOLMES_TOPOLOGY="$topology" HOLMES_SHAPING=0 \
      HOLMES_ADDR="${host_addr[k]}" HOLMES_LIBRARY="$build/lib/libholmes.so" \
      HOLMES_TORCH_EXTENSION="$extension" PYTHONPATH="$root/bindings/python" \
      timeout -k 5 "$run_timeout" /usr/bin/python3 "$here/train.py" "${train[@]}" \
      --backend "$backend" --placement "$placement" --compare-with "$tmp/reference.txt" \
      --summary "$tmp/$backend.json" >"$tmp/$backend.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || status=$?; done
  sed -e "s/^/[$backend rank 0] /" "$tmp/$backend.rank0.log"
  if ((status != 0)); then
    for ((r = 1; r < ranks; r++)); do tail -n 5 "$tmp/$backend.rank$r.log" | sed "s/^/[rank $r] /"; done
    echo "islands.sh: the $backend run failed (status $status)" >&2
    exit 1
  fi
}

echo "== backend holmes, the planner's placement"
run holmes holmes
echo "== backend gloo, the naive placement"
run gloo naive
/usr/bin/python3 - "$tmp/holmes.json" "$tmp/gloo.json" <<'EOF'
import json, sys
h, g = (json.load(open(p)) for p in sys.argv[1:3])
print(f"mean step: holmes (planned) {h['mean_step_ms']:.1f} ms, gloo (naive) "
      f"{g['mean_step_ms']:.1f} ms: speedup {g['mean_step_ms'] / h['mean_step_ms']:.2f}x "
      f"(the planner predicted {h['predicted_naive_step_s'] / h['predicted_step_s']:.2f}x "
      "of its own naive placement)")
EOF
