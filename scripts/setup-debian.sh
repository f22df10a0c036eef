#!/usr/bin/env bash
# Installs the Debian packages that building and testing Holmes needs.
# Idempotent: when everything is present it prints nothing and touches nothing.
# Needs root (or sudo) only when something is missing.
set -euo pipefail

PACKAGES=(
  # toolchain
  g++ cmake ninja-build pkg-config make
  # libraries the runtime links
  libboost-dev        # Boost.Asio: the tcp transport and the store server
  libssl-dev          # OpenSSL: HMAC-SHA256 challenge-response and random nonces
  libspdlog-dev libfmt-dev
  nlohmann-json3-dev  # plans, results and tool output as JSON
  libcli11-dev        # command lines of the tools
  libyaml-cpp-dev     # topology files
  libhwloc-dev        # PCI/NUMA locality of NICs and GPUs in discovery
  libucx-dev ucx-utils  # the ucx transport (UCP), and ucx_info for diagnosis
  libibverbs-dev      # the verbs transport (builds without a device; fails cleanly at run time)
  # tests and micro-benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  openmpi-bin         # mpirun: the launcher tests start ranks with it
  libgloo-dev libopenmpi-dev iperf3  # peers and loopback capacity of bench/compare-local.sh
  # the Python bindings' tests, and plots of the benchmark and simulator scripts
  python3 python3-numpy python3-pytest python3-matplotlib
  # the torch.distributed backend (bindings/torch) and its tests: torch 1.13 (CPU), its C++
  # headers and CMake package, pybind11 for the extension module
  python3-torch libtorch-dev pybind11-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
