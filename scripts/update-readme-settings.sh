#!/bin/bash
# Regenerates the README's table of settings from the registry (src/core/setting_registry.cpp):
#   scripts/update-readme-settings.sh [BUILD_DIR]     (default: build)
# integration.settings fails while the two differ.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
TABLE=$(mktemp)
trap 'rm -f "$TABLE"' EXIT
"$BUILD/bin/holmes-run" --print-settings --markdown >"$TABLE"
awk -v table="$TABLE" '
  /^<!-- settings table: begin/ { print; while ((getline line < table) > 0) print line; skip = 1; next }
  /^<!-- settings table: end/ { skip = 0 }
  !skip { print }
' "$ROOT/README.md" >"$ROOT/README.md.new"
mv "$ROOT/README.md.new" "$ROOT/README.md"
