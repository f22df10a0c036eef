// Google Benchmark: the reduction kernels against a plain memcpy of the same bytes, so that the
// numbers say how far each kernel is from the memory bound on this machine.
//   build/bin/holmes-micro-bench --benchmark_filter=Reduce
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "core/dtype.hpp"
#include "core/reduce.hpp"

namespace {

constexpr std::size_t kBytes = 4u << 20;  // larger than L2, the size of a collective's chunks

void BM_Memcpy(benchmark::State& state) {
  std::vector<std::byte> a(kBytes, std::byte{1});
  std::vector<std::byte> b(kBytes);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), kBytes);
    benchmark::DoNotOptimize(b.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kBytes));
}
BENCHMARK(BM_Memcpy);

void BM_Reduce(benchmark::State& state) {
  const auto dtype = static_cast<hm_dtype_t>(state.range(0));
  const auto op = static_cast<hm_op_t>(state.range(1));
  const std::size_t count = kBytes / holmes::dtype_size(dtype);
  // Bytes of 0x01: small positive values in every dtype (no denormals, no overflow to inf).
  std::vector<std::byte> a(kBytes, std::byte{1});
  std::vector<std::byte> b(kBytes, std::byte{1});
  for (auto _ : state) {
    holmes::reduce(dtype, op, a.data(), a.data(), b.data(), count);
    benchmark::DoNotOptimize(a.data());
  }
  // Bytes of the destination per second: comparable with memcpy's figure.
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kBytes));
  state.SetLabel(std::string(holmes::dtype_name(dtype)) + " " + holmes::op_name(op));
}
BENCHMARK(BM_Reduce)->ArgsProduct({{HM_INT8, HM_INT32, HM_INT64, HM_FLOAT16, HM_BFLOAT16,
                                    HM_FLOAT32, HM_FLOAT64},
                                   {HM_SUM, HM_MAX}});

}  // namespace

BENCHMARK_MAIN();
