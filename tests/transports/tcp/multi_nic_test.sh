#!/usr/bin/env bash
# tcp over several NICs between real hosts (network namespaces, bench/emulate/multi-nic.sh):
# three hosts, h0 and h1 with two NICs on two rails, h2 with one NIC on rail 0; one rank each,
# HOLMES_TCP_NICS=nic0,nic1 (h2: off), a ring allreduce of 16 MiB with every element checked.
# The ring sends h0 -> h1 -> h2 -> h0, so:
#   - the results are exact (holmes-bench --check; the script fails on any wrong element);
#   - h0 stripes to h1 over both rails: each of h0's NICs sent at least a quarter of h0's bytes;
#   - h1 reaches the one-NIC host over rail 0 only: h1's nic1 sent almost nothing (the
#     acknowledgements of what came in on it), under 5% of what its nic0 sent;
#   - every namespace is gone afterwards (multi-nic.sh's exit status says so).
# Counted by the kernel (each veth's tx_bytes), not by Holmes. Unshaped links: a few seconds.
# Needs root and network namespaces: exits 77 (skipped) without them.
#
# Usage: multi_nic_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=${1:?usage: multi_nic_test.sh BUILD_DIR SOURCE_DIR}
source_dir=${2:?usage: multi_nic_test.sh BUILD_DIR SOURCE_DIR}
if [ "$(id -u)" -ne 0 ]; then echo "skipped: needs root (network namespaces)"; exit 77; fi
if ! ip netns list >/dev/null 2>&1; then echo "skipped: no network namespaces"; exit 77; fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
timeout -k 10 240 "$source_dir/bench/emulate/multi-nic.sh" -B "$build" -H 3 -1 2 -x holmes-2nic \
  -r 1 -s 16M -n 2 -w 1 -R 0 -A ring -t 120 >"$log" 2>&1 || status=$?
if ((status != 0)); then
  cat "$log" >&2
  echo "FAIL: multi-nic.sh exited with status $status" >&2
  exit 1
fi
line=$(grep -m1 'holmes-2nic.1 done' "$log") || { cat "$log" >&2; echo "FAIL: no run line" >&2; exit 1; }
mb() { sed -nE "s/.* $1=([0-9]+).*/\1/p" <<<"$line"; }
h0n0=$(mb h0.nic0) h0n1=$(mb h0.nic1) h1n0=$(mb h1.nic0) h1n1=$(mb h1.nic1) h2n0=$(mb h2.nic0)
echo "MB sent: h0 nic0 $h0n0 nic1 $h0n1; h1 nic0 $h1n0 nic1 $h1n1; h2 nic0 $h2n0"
for v in "$h0n0" "$h0n1" "$h1n0" "$h1n1" "$h2n0"; do
  [[ $v =~ ^[0-9]+$ ]] || { echo "FAIL: cannot read the NIC counters from: $line" >&2; exit 1; }
done
total0=$((h0n0 + h0n1))
((total0 > 0 && 4 * h0n0 >= total0 && 4 * h0n1 >= total0)) ||
  { echo "FAIL: h0 did not stripe over both NICs (nic0 $h0n0 MB, nic1 $h0n1 MB)" >&2; exit 1; }
((h1n0 > 0 && 20 * h1n1 < h1n0)) ||
  { echo "FAIL: h1 sent $h1n1 MB on rail 1 to a host that has none ($h1n0 MB on rail 0)" >&2; exit 1; }
((h2n0 > 0)) || { echo "FAIL: the one-NIC host sent nothing" >&2; exit 1; }
echo "PASS"
