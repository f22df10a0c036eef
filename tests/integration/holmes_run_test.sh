#!/usr/bin/env bash
# holmes-run: sets each rank's variables, prefixes output, stops the job when a rank fails
# (naming it), forwards SIGTERM, and enforces --timeout.
# usage: holmes_run_test.sh BIN_DIR
source "$(dirname "$0")/lib.sh"
BIN=$1
RUN="$BIN/holmes-run"

echo "== variables and output prefixes"
"$RUN" -n 3 --token abc -- sh -c 'echo "r=$HOLMES_RANK n=$HOLMES_WORLD_SIZE t=$HOLMES_TOKEN s=$HOLMES_STORE_SERVE"; echo err >&2' \
  >"$WORK/out" 2>"$WORK/err"
for r in 0 1 2; do
  expect_contains "$WORK/out" "[rank $r] r=$r n=3 t=abc s=0"
  expect_contains "$WORK/err" "[rank $r] err"
done
"$RUN" -n 1 -- sh -c 'echo "$HOLMES_STORE"' >"$WORK/store"
grep -qE '^\[rank 0\] 127\.0\.0\.1:[0-9]+$' "$WORK/store" || fail "HOLMES_STORE not host:port"
"$RUN" -n 2 -- sh -c 'printf "no newline at the end"' >"$WORK/partial"
expect_contains "$WORK/partial" "[rank 1] no newline at the end"
# Without --token every job gets its own random token.
"$RUN" -n 1 -- sh -c 'echo "$HOLMES_TOKEN"' >"$WORK/t1"
"$RUN" -n 1 -- sh -c 'echo "$HOLMES_TOKEN"' >"$WORK/t2"
[ "$(wc -c <"$WORK/t1")" -gt 20 ] || fail "no random token"
cmp -s "$WORK/t1" "$WORK/t2" && fail "two jobs got the same token"

echo "== a failing rank stops the others and is named"
start=$(date +%s)
set +e
"$RUN" -n 4 --grace 2 -- sh -c 'if [ "$HOLMES_RANK" = 2 ]; then sleep 0.2; exit 7; fi; exec sleep 60' \
  >"$WORK/out" 2>"$WORK/err"
code=$?
set -e
[ "$code" = 7 ] || fail "exit code $code, expected the failing rank's 7"
expect_contains "$WORK/err" "rank 2 exited with status 7"
[ $(( $(date +%s) - start )) -lt 20 ] || fail "the other ranks were not stopped promptly"

echo "== a rank killed by a signal"
set +e
"$RUN" -n 2 -- sh -c 'if [ "$HOLMES_RANK" = 1 ]; then kill -9 $$; fi; exec sleep 60' 2>"$WORK/err"
code=$?
set -e
[ "$code" = 137 ] || fail "exit code $code, expected 137"
expect_contains "$WORK/err" "rank 1 was killed by signal 9"

echo "== SIGTERM is forwarded to every rank"
"$RUN" -n 3 -- sh -c 'trap "echo got-term; exit 0" TERM; sleep 60 & wait' >"$WORK/out" 2>"$WORK/err" &
pid=$!
sleep 1
kill -TERM "$pid"
set +e
wait "$pid"
code=$?
set -e
[ "$code" != 0 ] || fail "an interrupted job must not report success"
for r in 0 1 2; do expect_contains "$WORK/out" "[rank $r] got-term"; done

echo "== --timeout stops a job that runs too long"
set +e
"$RUN" -n 2 --timeout 1 --grace 1 -- sleep 60 2>"$WORK/err"
code=$?
set -e
[ "$code" = 124 ] || fail "exit code $code, expected 124"
expect_contains "$WORK/err" "ran past --timeout"

echo "== a program that cannot start"
set +e
"$RUN" -n 2 -- /nonexistent/program 2>"$WORK/err"
code=$?
set -e
[ "$code" = 127 ] || fail "exit code $code, expected 127"
expect_contains "$WORK/err" "cannot execute"

echo "holmes-run: all checks passed"
