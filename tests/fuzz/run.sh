#!/usr/bin/env bash
# Runs every libFuzzer target of a fuzz build for a bounded time (make fuzz).
#   tests/fuzz/run.sh BUILD_DIR SECONDS [TARGET...]
# Each target starts from its committed seeds (tests/fuzz/corpus/<target>/) and grows a working
# corpus in BUILD_DIR/fuzz-corpus/<target>/ (kept between runs, never committed). A crash, a
# sanitizer report or an escaped exception leaves its input in BUILD_DIR/fuzz-artifacts/ and
# makes this script fail. Prints executions and coverage per target.
set -uo pipefail

build=${1:?usage: run.sh BUILD_DIR SECONDS [TARGET...]}
seconds=${2:?usage: run.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(frame_header store_request store_reply topology_file model_file)

mkdir -p "$build/fuzz-artifacts"
failed=()
for target in "${targets[@]}"; do
  binary="$build/bin/holmes-fuzz-$target"
  [ -x "$binary" ] || { echo "fuzz: $binary is missing (make fuzz builds it)" >&2; exit 2; }
  work="$build/fuzz-corpus/$target"
  mkdir -p "$work"
  dict=()
  case $target in topology_file|model_file) dict=(-dict="$here/yaml.dict") ;; esac
  log="$build/fuzz-artifacts/$target.log"
  # -rss_limit_mb: a decoder that allocates gigabytes for a small input is a finding too.
  "$binary" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=2048 -timeout=10 \
    -max_len=8192 "${dict[@]}" -artifact_prefix="$build/fuzz-artifacts/$target-" \
    "$work" "$here/corpus/$target" >"$log" 2>&1
  status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  printf 'fuzz %-14s %4ss  %10s executions  %-10s  %s\n' "$target" "$seconds" "${runs:-?}" \
    "${cov:-}" "$([ $status -eq 0 ] && echo clean || echo "FAILED (see $log)")"
  [ $status -eq 0 ] || failed+=("$target")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in: ${failed[*]}" >&2
  exit 1
fi
