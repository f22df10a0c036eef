#!/bin/sh
# One rank of the demo's emulated cluster (examples/topologies/emulated-two-islands.yaml): two
# islands (ib, roce) of two hosts with two GPUs each. Ranks arrive as a launcher with an
# interleaved hostfile would start them: rank r on island ib when r is even, roce when odd, host
# (r / 2) % 2 of it. A rank states only its host (HOLMES_HOST); its island, fabric and links come
# from the topology file, and the shaping layer holds its links to the file's rates / 100.
r=${HOLMES_RANK:?HOLMES_RANK is not set: run under holmes-run}
if [ $((r % 2)) -eq 0 ]; then island=ib; else island=roce; fi
export HOLMES_HOST="emu-${island}-$(((r / 2) % 2))"
export HOLMES_TOPOLOGY="${HOLMES_TOPOLOGY:-$(dirname "$0")/../topologies/emulated-two-islands.yaml}"
exec "$@"
