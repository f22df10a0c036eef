#!/bin/sh
# Runs a command as one rank of an emulated cluster described through the environment, as ranks
# in network namespaces would describe theirs: three hosts of two ranks each (h0, h1, h2) and two
# islands, A over RoCE (ranks 0-3, hosts h0 and h1) and B over InfiniBand (ranks 4-5, host h2).
# LAYOUT_FABRIC=ethernet makes both islands Ethernet: shm on each host and tcp everywhere else.
r=${HOLMES_RANK:?HOLMES_RANK is not set}
export HOLMES_HOST="h$((r / 2))"
if [ "$r" -lt 4 ]; then
  export HOLMES_ISLAND=A HOLMES_FABRIC="${LAYOUT_FABRIC:-roce}"
else
  export HOLMES_ISLAND=B HOLMES_FABRIC="${LAYOUT_FABRIC:-ib}"
fi
exec "$@"
