#!/usr/bin/env bash
# The benchmarks' tables and plots: a short long-haul run (bench/emulate/long-haul.sh, loopback,
# no root: 2 collectives x 2 latencies at 1 MiB) writes a CSV with a row per case, whose numbers
# are a real run's, and draws it; bench/plot_table.py refuses what it cannot draw with an error
# that names the problem. The full runs that make docs/bench/'s plots: BENCHMARKS.md.
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
echo "bench plots: ok"
