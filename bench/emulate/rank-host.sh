#!/usr/bin/env bash
# One rank of an emulated cluster on loopback, without root: sets HOLMES_HOST (and
# HOLMES_LOCAL_RANK) from HOLMES_RANK, then runs the command. Holmes's shaping layer then holds
# the rank's links to the rates and latencies of the topology file (docs/topology.md,
# "Emulation: the shaping layer"); nothing else is shaped.
#
#   holmes-run -n 4 --topology bench/emulate/mixes/pure-ib.yaml -- \
#       bench/emulate/rank-host.sh holmes-bench allreduce -b 1K -e 16M -f 4 --check
#
# Ranks go host by host in the file's host order, `gpus` ranks per host (as Holmes lays out a
# job). EMULATE_RANK_HOSTS ("host0 host0 host1 ...", one word per rank; bench/compare.sh sets it)
# gives the map directly; without it the map comes from HOLMES_TOPOLOGY through holmes-topo
# (HOLMES_TOPO, or holmes-topo on PATH or in $HOLMES_BUILD/bin).
set -euo pipefail
rank="${HOLMES_RANK:?rank-host: HOLMES_RANK is not set (start ranks with holmes-run)}"
(($# > 0)) || {
  echo "rank-host: no command" >&2
  exit 2
}
if [[ -z ${EMULATE_RANK_HOSTS:-} ]]; then
  topology="${HOLMES_TOPOLOGY:?rank-host: set HOLMES_TOPOLOGY (holmes-run --topology FILE)}"
  topo="${HOLMES_TOPO:-$(command -v holmes-topo || echo "${HOLMES_BUILD:-build}/bin/holmes-topo")}"
  [[ -x $topo ]] || {
    echo "rank-host: holmes-topo not found (set HOLMES_TOPO or EMULATE_RANK_HOSTS)" >&2
    exit 2
  }
  EMULATE_RANK_HOSTS="$("$topo" --file "$topology" --json | /usr/bin/python3 -c '
import json, sys
print(" ".join(h["name"] for h in json.load(sys.stdin)["topology"]["hosts"]
               for _ in range(int(h["gpus"]))))')"
fi
read -ra hosts <<<"$EMULATE_RANK_HOSTS"
((rank < ${#hosts[@]})) || {
  echo "rank-host: rank $rank, but the map has ${#hosts[@]} ranks: $EMULATE_RANK_HOSTS" >&2
  exit 2
}
export HOLMES_HOST="${hosts[rank]}"
local_rank=0
for ((r = 0; r < rank; r++)); do
  if [[ ${hosts[r]} == "$HOLMES_HOST" ]]; then local_rank=$((local_rank + 1)); fi
done
export HOLMES_LOCAL_RANK=$local_rank
exec "$@"
