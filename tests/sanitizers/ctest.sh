#!/usr/bin/env bash
# Runs the suite (ctest -LE long) of a sanitizer build: make test-asan / make test-tsan.
#   tests/sanitizers/ctest.sh address|thread BUILD_DIR JOBS [extra ctest arguments...]
# Every report stops the process that made it (halt_on_error), so a report fails its test.
# Suppressions (with the reason for each) are in this folder; EXCLUDED below lists the tests
# that cannot run under a sanitizer at all, and why.
set -euo pipefail

kind=${1:?usage: ctest.sh address|thread BUILD_DIR JOBS [ctest args...]}
build=${2:?usage: ctest.sh address|thread BUILD_DIR JOBS [ctest args...]}
jobs=${3:-2}
shift 3 || shift $#
here=$(cd "$(dirname "$0")" && pwd)

# Tests that load the library into a program the sanitizer runtime is not linked into: the
# python interpreter (ctypes) and the C program the pkg-config test compiles against the
# installed library. Their code paths are the C API's, which the mp and integration tests cover.
EXCLUDED='^python\.|^integration\.c_api_pkgconfig|_NOT_BUILT'

common="halt_on_error=1:abort_on_error=0:print_stacktrace=1"
case $kind in
  address)
    export ASAN_OPTIONS="$common:detect_leaks=1:detect_stack_use_after_return=0:strict_string_checks=1:check_initialization_order=1:suppressions=$here/asan.supp"
    export LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="$common:suppressions=$here/ubsan.supp"
    ;;
  thread)
    export TSAN_OPTIONS="$common:second_deadlock_stack=1:suppressions=$here/tsan.supp"
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
echo "sanitizers ($kind): ctest finished in $(( $(date +%s) - start )) s, status $status"
exit $status
