#!/bin/bash
# The settings registry seen from outside: holmes-run --print-settings lists every setting with
# its value and source, names a bad value, and the README's table of settings is exactly the
# registry's (holmes-run --print-settings --markdown), so the two cannot drift.
# Usage: settings_test.sh BIN_DIR SOURCE_DIR
source "$(dirname "$0")/lib.sh"
BIN=$1
SRC=$2
RUN=$BIN/holmes-run
CLEAN=(env -u HOLMES_SOCKETS -u HOLMES_RANK -u RANK -u SLURM_PROCID -u OMPI_COMM_WORLD_RANK
       -u PMI_RANK -u HOLMES_TOKEN -u HOLMES_ALGO -u HOLMES_TOPOLOGY)

echo "== every setting, its value and its source"
"${CLEAN[@]}" HOLMES_SOCKETS=4 SLURM_PROCID=3 HOLMES_TOKEN=s3cret "$RUN" --print-settings \
  >"$WORK/dump"
expect_contains "$WORK/dump" "HOLMES_SOCKETS"
grep -E '^HOLMES_SOCKETS +4 +# environment$' "$WORK/dump" >/dev/null || fail "HOLMES_SOCKETS line"
grep -E '^HOLMES_RANK +3 +# environment: SLURM_PROCID$' "$WORK/dump" >/dev/null ||
  fail "HOLMES_RANK line"
grep -E '^HOLMES_CHUNK_BYTES +524288 +# default$' "$WORK/dump" >/dev/null ||
  fail "HOLMES_CHUNK_BYTES line"
expect_not_contains "$WORK/dump" "s3cret"
lines=$(grep -c '^HOLMES_' "$WORK/dump")
rows=$("$RUN" --print-settings --markdown | grep -c '^| `HOLMES_')
[ "$lines" = "$rows" ] || fail "the dump lists $lines settings, the registry $rows"

echo "== --topology shows as the ranks' HOLMES_TOPOLOGY"
"${CLEAN[@]}" "$RUN" --print-settings --topology "$SRC/README.md" >"$WORK/topo"
expect_contains "$WORK/topo" "environment: holmes-run --topology"

echo "== a bad value is named, with the value"
code=0
"${CLEAN[@]}" HOLMES_SOCKETS=99 "$RUN" --print-settings >"$WORK/bad" 2>"$WORK/bad.err" || code=$?
[ "$code" = 1 ] || fail "exit code $code for HOLMES_SOCKETS=99"
expect_contains "$WORK/bad.err" "HOLMES_SOCKETS: 99 is outside [1, 16]"

echo "== the README's table is the registry's"
"$RUN" --print-settings --markdown >"$WORK/registry.md"
sed -n '/^<!-- settings table: begin/,/^<!-- settings table: end/p' "$SRC/README.md" |
  sed '1d;$d' >"$WORK/readme.md"
[ -s "$WORK/readme.md" ] || fail "README.md has no settings table between its markers"
if ! diff -u "$WORK/readme.md" "$WORK/registry.md"; then
  fail "README.md's settings table differs from the registry: run scripts/update-readme-settings.sh"
fi
echo "PASS"
