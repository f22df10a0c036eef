#!/usr/bin/env bash
# Install into a fresh prefix, build the C example against it with pkg-config as a user would
# (C99, pedantic, warnings as errors), and run it on 4 ranks with the installed holmes-run.
# usage: c_api_pkgconfig_test.sh BUILD_DIR SOURCE_DIR
source "$(dirname "$0")/lib.sh"
BUILD=$1
SRC=$2
PREFIX="$WORK/prefix"
cmake --install "$BUILD" --prefix "$PREFIX" >/dev/null
for f in include/holmes/holmes.h include/holmes/holmes.hpp lib/libholmes.so lib/libholmes.a \
         lib/pkgconfig/holmes.pc lib/cmake/holmes/holmesConfig.cmake bin/holmes-run \
         bin/holmes-store bin/holmes-bench; do
  [ -e "$PREFIX/$f" ] || fail "install is missing $f"
done
export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig"
flags=$(pkg-config --cflags --libs holmes)
echo "pkg-config --cflags --libs holmes: $flags"
cc -std=c99 -Wall -Wextra -pedantic -Werror "$SRC/examples/c/allreduce_check.c" -o "$WORK/check" \
  $flags -lm -Wl,-rpath,"$PREFIX/lib"
# The header is also valid C++.
echo '#include <holmes/holmes.h>
int main() { hm_config_t c = HM_CONFIG_INITIALIZER; return c.size == sizeof c ? 0 : 1; }' \
  >"$WORK/cxx.cpp"
c++ -std=c++11 -Wall -Wextra -pedantic -Werror "$WORK/cxx.cpp" -o "$WORK/cxx" $flags \
  -Wl,-rpath,"$PREFIX/lib"
"$WORK/cxx"
"$PREFIX/bin/holmes-run" -n 4 --timeout 300 -- "$WORK/check" >"$WORK/out"
[ "$(grep -c ': OK' "$WORK/out")" = 50 ] || { cat "$WORK/out"; fail "expected 50 OK lines"; }
echo "C API through pkg-config: 10 dtypes x 5 ops on 4 ranks OK"
