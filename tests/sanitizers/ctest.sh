#!/usr/bin/env bash
# Runs the suite (ctest -LE long) of a sanitizer build: make test-asan / make test-tsan.
#   tests/sanitizers/ctest.sh address|thread BUILD_DIR JOBS [extra ctest arguments...]
# Every report stops the process that made it (halt_on_error), so a report fails its test. And
# any report fails the run, even from a process whose failure a test expects (a tool given bad
# input, a rank of a job meant to fail) or whose exit status nobody reads: ASan, LSan and TSan
# write their reports to files (BUILD_DIR/sanitizer-reports/, found even when a test script sent
# the process's output elsewhere), and UBSan's reports (which GCC's UBSan runtime prints to
# stderr when it runs with ASan, whatever log_path says) are looked for in every test's output
# (Testing/Temporary/LastTest.log). Suppressions (with the reason for each) are in this folder;
# EXCLUDED below lists the tests that cannot run under a sanitizer at all, and why.
set -euo pipefail

kind=${1:?usage: ctest.sh address|thread BUILD_DIR JOBS [ctest args...]}
build=${2:?usage: ctest.sh address|thread BUILD_DIR JOBS [ctest args...]}
jobs=${3:-2}
shift 3 || shift $#
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$build" && pwd)

# Tests that load the library into a program the sanitizer runtime is not linked into: the
# python interpreter (ctypes, and the torch backend, an extension module torch loads) and the C
# program the pkg-config test compiles against the installed library. Their code paths are the
# C and C++ API's, which the mp and integration tests cover. (The sanitizer builds also leave the
# torch backend out: Makefile's SANITIZER_CMAKE.)
EXCLUDED='^python\.|^torch\.|^integration\.c_api_pkgconfig|_NOT_BUILT'

# SANITIZER_SCOPE=ci (what .ci/run runs next to make test): the whole suite but most of the
# collective matrix's repetitions, which are five sixths of its time under ASan. Kept: the matrix
# over tcp (mp.collectives.np3), over shm (mp.collectives.shm.np2) and across two islands with the
# hierarchical algorithm (mp.collectives.algo.hier.mixed.np6), the soaks (every algorithm each
# collective accepts, random dtypes, ops and sizes, over tcp and shm), and everything else: unit,
# store, fuzz replay, transports, mp.errors, mp.disagreement, mp.device.np1, mp.routing, mp.plan,
# mp.resources, integration, faults. Left out: the matrix at 1, 2, 4 and 8 ranks over tcp, at 4
# over shm, on the mixed layouts with automatic choice (mixed, mixed_ethernet: without UCX in
# these builds both are shm + tcp, whose drive the kept mp.routing.mixed and algo.hier.mixed
# runs reach), with rd, rhd, tree and shm forced, and mp.device at 3 and 4 ranks: the same code
# at other sizes, which the soaks and the kept runs reach too. `make test-asan` (scope full) runs
# them.
case ${SANITIZER_SCOPE:-full} in
  full) ;;
  ci) EXCLUDED="$EXCLUDED|^mp\.collectives\.(np[1248]|mixed[._]|shm\.np4|algo\.(rd|rhd|tree|shm)\.)|^mp\.device\.np[34]$" ;;
  *)
    echo "ctest.sh: unknown SANITIZER_SCOPE '$SANITIZER_SCOPE' (full or ci)" >&2
    exit 2
    ;;
esac

reports=$build/sanitizer-reports
rm -rf "$reports"
mkdir -p "$reports"
# log_path: one file per process that reports, named after the program and its pid.
common="halt_on_error=1:abort_on_error=0:print_stacktrace=1:log_exe_name=1"
case $kind in
  address)
    export ASAN_OPTIONS="$common:log_path=$reports/asan:detect_leaks=1:detect_stack_use_after_return=0:strict_string_checks=1:check_initialization_order=1:suppressions=$here/asan.supp"
    export LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="$common:log_path=$reports/ubsan:suppressions=$here/ubsan.supp"
    # hwloc's pci component calls libpciaccess, whose pci.ids name cache (pci_get_strings) is
    # never freed; hwloc then unloads the component and with it libpciaccess, so LeakSanitizer
    # finds that cache unreachable at exit (1016 bytes in 9 blocks, every program that runs
    # discovery). The frames are in an unloaded library by then, which no lsan.supp entry can
    # name. Without the component hwloc reads the same PCI locality from sysfs itself (its linux
    # backend): holmes-topo --json prints the same either way.
    export HWLOC_COMPONENTS=-pci
    ;;
  thread)
    export TSAN_OPTIONS="$common:log_path=$reports/tsan:second_deadlock_stack=1:suppressions=$here/tsan.supp"
    ;;
  *)
    echo "ctest.sh: unknown sanitizer '$kind' (address or thread)" >&2
    exit 2
    ;;
esac

cd "$build"
start=$(date +%s)
status=0
ctest --output-on-failure --timeout 1800 -j "$jobs" -LE long -E "$EXCLUDED" "$@" || status=$?
found=$(find "$reports" -type f -size +0 | sort)
if [ -n "$found" ]; then
  echo "sanitizers ($kind): reports from $(echo "$found" | wc -l) processes (in $reports):"
  for f in $found; do
    echo "==== $(basename "$f")"
    cat "$f"
  done
  status=1
fi
# UBSan's one-line reports, each with the test whose output it is in.
log=Testing/Temporary/LastTest.log
if [ -f "$log" ] && grep -Eq '[^ ]+:[0-9]+:[0-9]+: runtime error: ' "$log"; then
  echo "sanitizers ($kind): UBSan reports in the tests' output:"
  awk '/^[0-9]+\/[0-9]+ Test: / { test = $3 }
       /[^ ]+:[0-9]+:[0-9]+: runtime error: / { print test ": " $0 }' "$log"
  status=1
fi
echo "sanitizers ($kind): ctest finished in $(( $(date +%s) - start )) s, status $status"
exit $status
