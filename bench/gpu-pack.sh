#!/usr/bin/env bash
# Packs what bench/gpu-check.sh --prebuilt runs, from a CUDA build made on this machine, for a GPU
# machine that has the driver but not Holmes's build dependencies (yaml-cpp, spdlog, hwloc,
# OpenSSL ...): the executables, stripped, in OUT/bin, and every shared library they load that is
# not part of the C library in OUT/lib (the C library stays the target's own: glibc runs programs
# linked against an older version). The CUDA runtime is linked statically, so no libcudart.
#
# Usage: bench/gpu-pack.sh BUILD-DIR OUT-DIR
#   BUILD-DIR: configured with -DHOLMES_WITH_CUDA=ON and built with bench/gpu-check.sh's quick
#              target list (HOLMES_GPU_CHECK_QUICK=1 names it)
set -euo pipefail

build="${1:?usage: bench/gpu-pack.sh BUILD-DIR OUT-DIR}"
out="${2:?usage: bench/gpu-pack.sh BUILD-DIR OUT-DIR}"
programs=(holmes_cuda_memory holmes_cuda_element_ops holmes_cuda_device_reduce holmes_cuda_context
  holmes_cuda_stream_order holmes-cuda-bench holmes-cuda-stream-step holmes-run holmes-bench
  holmes_mp_device)

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for program in "${programs[@]}"; do
  [[ -x $build/bin/$program ]] || {
    echo "gpu-pack: $build/bin/$program is missing: build it first" >&2
    exit 1
  }
  strip -o "$out/bin/$program" "$build/bin/$program"
done

# The glibc family and the dynamic loader are the target's; everything else travels.
glibc='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libresolv|libutil)\.so'
for program in "${programs[@]}"; do
  ldd "$build/bin/$program" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
  if [[ ! $name =~ $glibc ]]; then cp -L "$path" "$out/lib/$name"; fi
done
du -sh "$out/bin" "$out/lib"
