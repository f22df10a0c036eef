#!/bin/sh
# Runs a command as one rank of an emulated cluster of two islands (ib, roce) of two hosts with
# two ranks each, as a launcher with an interleaved hostfile would start them: rank r runs on
# island (r even: ib, odd: roce), host (r / 2) % 2 of it. So a host's ranks are not
# consecutive and every other rank is on the other island: the planner must regroup them.
#   islands.sh env CMD...   the ranks state host, island and fabric (HOLMES_HOST/ISLAND/FABRIC)
#   islands.sh file CMD...  the ranks state only their host; islands come from the topology file
#                           examples/topologies/emulated-two-islands.yaml (HOLMES_TOPOLOGY)
#   islands.sh grouped CMD... as env, but numbered island by island, host by host (ranks 0-3 on
#                           ib, 4-7 on roce; two per host), as a block-wise hostfile starts them
r=${HOLMES_RANK:?HOLMES_RANK is not set}
mode=$1
shift
if [ "$mode" = grouped ]; then
  if [ "$r" -lt 4 ]; then island=ib; else island=roce; fi
  export HOLMES_HOST="emu-${island}-$(((r / 2) % 2))"
  export HOLMES_ISLAND=$island HOLMES_FABRIC=$island
  exec "$@"
fi
if [ $((r % 2)) -eq 0 ]; then island=ib; else island=roce; fi
export HOLMES_HOST="emu-${island}-$(((r / 2) % 2))"
case "$mode" in
  env) export HOLMES_ISLAND=$island HOLMES_FABRIC=$island ;;
  file) export HOLMES_TOPOLOGY="$(dirname "$0")/../../examples/topologies/emulated-two-islands.yaml" ;;
  *) echo "islands.sh: mode must be env, file or grouped, got '$mode'" >&2; exit 2 ;;
esac
exec "$@"
