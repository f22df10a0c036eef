#!/usr/bin/env bash
# The benchmarks' tables and plots: a short long-haul run (bench/emulate/long-haul.sh, loopback,
# no root: 2 collectives x 2 latencies at 1 MiB) writes a CSV with a row per case, whose numbers
# are a real run's, and draws it; bench/plot_table.py refuses what it cannot draw with an error
# that names the problem; bench/model-check.py's short run (6 ranks, 2 sizes, one round) writes a
# row per run and size and draws them. The full runs that make docs/bench/'s plots: BENCHMARKS.md.
# Usage: bench_plots_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=$1
SRC=$2
tmp="$(mktemp -d /tmp/holmes-bench-plots.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

"$SRC/bench/emulate/long-haul.sh" -B "$BUILD" -s 1M -n 1 -w 0 -r 1 -L 30,2000 -R 0.5 \
  -c allreduce,reduce_scatter -t 120 -o "$tmp/out" >"$tmp/log" 2>&1 ||
  {
    cat "$tmp/log"
    fail "long-haul.sh -o failed"
  }
csv="$tmp/out/long-haul.csv"
[[ -s $csv ]] || fail "no $csv"
# One row per collective and latency, each a checked run (long-haul.sh stops on a wrong element):
# busbw above 0 and below 1.5 x the bound (1 MiB may profit from the shaper's burst, no more),
# the RTT twice the one-way latency, the bandwidth x RTT of 0.5 Gbit/s.
/usr/bin/python3 - "$csv" <<'EOF' || fail "$csv is not what the run measured"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
cases = sorted((r["collective"], int(r["one_way_us"])) for r in rows)
assert cases == [("allreduce", 30), ("allreduce", 2000), ("reduce_scatter", 30),
                 ("reduce_scatter", 2000)], cases
for r in rows:
    busbw, bound = float(r["busbw"]), float(r["bound_busbw"])
    assert 0 < busbw < 1.5 * bound, r
    assert abs(float(r["of_bound"]) - busbw / bound) < 0.002, r
    assert abs(float(r["rtt_ms"]) - 2 * int(r["one_way_us"]) / 1000) < 1e-9, r
    assert abs(bound - 3 * 0.5 / 8) < 1e-4, r
    assert int(r["bdp_kb"]) == round(0.5e9 / 8 * float(r["rtt_ms"]) / 1e6), r
    assert r["algorithm"] and r["build"] == "this" and r["rounds"] == "1", r
EOF
png="$tmp/out/long-haul.png"
[[ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" == 89504e470d0a1a0a ]] || fail "$png is no PNG"
grep -q 'wrote .*long-haul.csv' "$tmp/log" || fail "long-haul.sh did not say what it wrote"

# plot_table.py: what it cannot draw, it says, and draws nothing.
plot() { /usr/bin/python3 "$SRC/bench/plot_table.py" "$csv" "$tmp/bad.png" "$@" 2>&1; }
expect_error() {
  local want=$1
  shift
  local out
  if out="$(plot "$@")"; then fail "plot_table.py $* succeeded"; fi
  [[ $out == *"$want"* ]] || fail "plot_table.py $*: '$out' does not say '$want'"
  [[ ! -e $tmp/bad.png ]] || fail "plot_table.py $* drew anyway"
}
expect_error "lacks the columns ['nope']" --x rtt_ms --y of_bound --label "{nope}"
expect_error "lacks the columns ['busbw_x']" --x rtt_ms --y busbw_x
expect_error "collective in $csv is not a number: 'allreduce'" --x collective --y busbw
expect_error "has no rows to draw" --x rtt_ms --y busbw --where collective=alltoall
expect_error "--where wants COL=VALUE" --x rtt_ms --y busbw --where collective
plot --x collective --y busbw --bars --label "{one_way_us} us" >/dev/null ||
  fail "plot_table.py --bars failed"
[[ -s $tmp/bad.png ]] || fail "plot_table.py --bars drew nothing"
# model-check.py: every forced algorithm and auto, two sizes, one round; a row per run and size
# whose algorithm is the forced one (auto's is one of them), the fastest forced at 1.0.
"$SRC/bench/model-check.py" -B "$BUILD" -r 1 -s 4K -e 8K -n 2 -w 0 -t 120 -o "$tmp/mc" \
  >"$tmp/mc.log" 2>&1 || {
  cat "$tmp/mc.log"
  fail "model-check.py -o failed"
}
/usr/bin/python3 - "$tmp/mc/model-check.csv" <<'EOF' || fail "model-check.csv is not what ran"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
forced = ["ring", "rd", "rhd", "hier"]
assert sorted((r["run"], int(r["size"])) for r in rows) == sorted(
    (run, size) for run in forced + ["auto"] for size in (4096, 8192)), rows
for r in rows:
    assert r["algorithm"] == r["run"] or (r["run"] == "auto" and r["algorithm"] in forced), r
    time, predicted = float(r["time_us"]), float(r["predicted_us"])
    assert time > 0 and predicted > 0, r
    assert abs(float(r["predicted_over_time"]) - predicted / time) < 1e-3 * predicted / time, r
for size in ("4096", "8192"):
    fastest = min(float(r["over_fastest"]) for r in rows if r["size"] == size and r["run"] in forced)
    assert fastest == 1.0, (size, fastest)
EOF
for png in model-check.png model-check-model.png; do
  [[ "$(head -c 8 "$tmp/mc/$png" | od -An -tx1 | tr -d ' \n')" == 89504e470d0a1a0a ]] ||
    fail "$png is no PNG"
done
grep -q '^| 8 KiB | ' "$tmp/mc.log" || fail "model-check.py printed no row for 8 KiB"
out="$("$SRC/bench/model-check.py" -B "$tmp/nowhere" 2>&1)" && fail "model-check.py -B nowhere ran"
[[ $out == *"$tmp/nowhere/bin/holmes-run is missing"* ]] || fail "model-check.py said '$out'"
echo "bench plots: ok"
