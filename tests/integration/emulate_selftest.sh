#!/usr/bin/env bash
# The emulated-cluster scripts clean up after themselves (bench/emulate/selftest.sh: every mix up
# and down, SIGTERM and SIGINT mid-command, cleanup after kill -9). They need root and network
# namespaces; where the machine has neither this test is skipped (exit 77), as GPU tests are
# without a GPU.
# Usage: emulate_selftest.sh BUILD_DIR SOURCE_DIR
BUILD=$1
SRC=$2
if [ "$(id -u)" -ne 0 ]; then echo "skipped: needs root"; exit 77; fi
probe="hm-probe-$$"
if ! ip netns add "$probe" 2>/dev/null; then echo "skipped: no network namespaces here"; exit 77; fi
ip netns del "$probe"
exec "$SRC/bench/emulate/selftest.sh" -B "$BUILD"
