# Helpers for the integration scripts: assertions that say what failed, and a free port.
set -euo pipefail

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# expect_contains FILE TEXT: the file holds TEXT.
expect_contains() {
  grep -qF -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; fail "expected '$2' in $1"; }
}

# expect_not_contains FILE TEXT
expect_not_contains() {
  if grep -qF -- "$2" "$1"; then cat "$1" >&2; fail "did not expect '$2' in $1"; fi
}

# A TCP port on 127.0.0.1 that nothing listens on right now.
free_port() {
  local port
  for _ in $(seq 1 100); do
    # Below the kernel's ephemeral range (32768+ here): a port some client connection holds
    # (or left in TIME_WAIT) would pass the check below and still refuse the listener.
    port=$(( 20000 + RANDOM % 12000 ))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return 0
    fi
  done
  fail "no free port found"
}

WORK=$(mktemp -d)
cleanup() {
  # Stop whatever this script started in the background.
  jobs -p | xargs -r kill -9 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
