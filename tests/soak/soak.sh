#!/usr/bin/env bash
# make soak: the soak (holmes-soak) for SECONDS on each transport this build has, at 3 and 4
# ranks, each with its own seed.
#   tests/soak/soak.sh BUILD_DIR SECONDS [SEED]
set -uo pipefail
build=${1:?usage: soak.sh BUILD_DIR SECONDS [SEED]}
seconds=${2:?usage: soak.sh BUILD_DIR SECONDS [SEED]}
seed=${3:-$(date +%s)}
bin="$build/bin"
[ -x "$bin/holmes-soak" ] || { echo "soak: $bin/holmes-soak is missing" >&2; exit 2; }

transports=(tcp)
# shm is built on Linux; ucx only where the build found it (holmes-run --help does not say, so
# ask a one-rank job).
for kind in shm ucx; do
  if HOLMES_TRANSPORT=$kind "$bin/holmes-run" -n 2 --timeout 60 -- "$bin/holmes-soak" \
       --seconds 0 >/dev/null 2>&1; then
    transports+=("$kind")
  fi
done

failed=0
for kind in "${transports[@]}"; do
  for np in 3 4; do
    echo "== soak: $kind, $np ranks, ${seconds} s, seed $seed"
    HOLMES_TIMEOUT_MS=120000 HOLMES_TRANSPORT=$kind \
      "$bin/holmes-run" -n "$np" --timeout $((seconds + 300)) -- "$bin/holmes-soak" \
      --seconds "$seconds" --seed "$seed" || failed=1
    seed=$((seed + 1))
  done
done
exit $failed
