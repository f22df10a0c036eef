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
# And through the installed CMake package: find_package(holmes) and holmes::holmes.
mkdir -p "$WORK/cmake-user"
cat >"$WORK/cmake-user/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(user LANGUAGES C CXX)
find_package(holmes REQUIRED)
add_executable(user_check user.c)
target_link_libraries(user_check PRIVATE holmes::holmes)
CMAKE
cp "$SRC/examples/c/allreduce_check.c" "$WORK/cmake-user/user.c"
echo 'target_link_libraries(user_check PRIVATE m)' >>"$WORK/cmake-user/CMakeLists.txt"
cmake -S "$WORK/cmake-user" -B "$WORK/cmake-user/build" -DCMAKE_PREFIX_PATH="$PREFIX" >/dev/null
cmake --build "$WORK/cmake-user/build" >/dev/null
"$PREFIX/bin/holmes-run" -n 2 --timeout 300 -- "$WORK/cmake-user/build/user_check" >"$WORK/out-cmake"
[ "$(grep -c ': OK' "$WORK/out-cmake")" = 50 ] || { cat "$WORK/out-cmake"; fail "CMake consumer"; }
echo "find_package(holmes): OK"
"$PREFIX/bin/holmes-run" -n 4 --timeout 300 -- "$WORK/check" >"$WORK/out"
[ "$(grep -c ': OK' "$WORK/out")" = 50 ] || { cat "$WORK/out"; fail "expected 50 OK lines"; }
echo "C API through pkg-config: 10 dtypes x 5 ops on 4 ranks OK"
# The Python package, installed beside the library: it finds the installed libholmes (and, when
# the torch backend was built, its compiled module) without HOLMES_LIBRARY or a build tree.
py="$PREFIX/lib/python3/dist-packages"
[ -f "$py/holmes/__init__.py" ] || fail "install is missing the Python package ($py/holmes)"
unset HOLMES_LIBRARY HOLMES_TORCH_EXTENSION
cd "$WORK"  # nowhere near a build tree
PYTHONPATH="$py" "$PREFIX/bin/holmes-run" -n 2 --timeout 300 -- /usr/bin/python3 -c '
import numpy as np, holmes
with holmes.init() as w:
    assert holmes.library_path().startswith("'"$PREFIX"'"), holmes.library_path()
    assert int(w.allreduce(np.ones(3, np.int32))[0]) == 2
' || fail "the installed Python package"
echo "installed Python package: OK"
if ls "$BUILD"/lib/python/_holmes_torch*.so >/dev/null 2>&1; then
  ls "$py"/holmes/_holmes_torch*.so >/dev/null 2>&1 || fail "install is missing holmes/_holmes_torch"
  PYTHONPATH="$py" "$PREFIX/bin/holmes-run" -n 2 --torch --timeout 300 -- /usr/bin/python3 -c '
import torch, torch.distributed as dist, holmes.torch
assert holmes.torch.extension_path().startswith("'"$PREFIX"'"), holmes.torch.extension_path()
dist.init_process_group("holmes")
x = torch.ones(5); dist.all_reduce(x); assert x.tolist() == [2.0] * 5, x
dist.destroy_process_group()
' || fail "the installed torch backend"
  echo "installed torch backend: OK"
fi
