#!/bin/sh
# Runs a command as one rank of the shaping test's cluster (two-hosts.yaml): ranks 0 and 1 on
# host shape-0, ranks 2 and 3 on shape-1. HOLMES_SHAPING passes through (0: shaping off).
r=${HOLMES_RANK:?HOLMES_RANK is not set}
export HOLMES_HOST="shape-$((r / 2))"
export HOLMES_TOPOLOGY="$(dirname "$0")/two-hosts.yaml"
exec "$@"
