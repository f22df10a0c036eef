// Google Benchmark: the reduction kernels and the float16/bfloat16 conversions on each
// instruction set, against a plain memcpy of the same bytes, so that the numbers say how far each
// kernel is from the memory bound on this machine.
//   build/bin/holmes-micro-bench --benchmark_filter=Reduce --benchmark_min_time=0.2
// Every benchmark reports bytes_per_second (of its float32-or-wider side: the destination of a
// reduction, the float32 array of a conversion), memcpy_GB/s (a memcpy of those bytes timed just
// before it, so both see the same load on a shared machine) and x_memcpy, the ratio of the two
// (printed with a "/s" that Google Benchmark adds to every rate; it is a plain ratio). Both are
// per CPU second of the benchmark's thread, as Google Benchmark measures by default.
// Benchmarks named .../isa:0 run the portable kernels, .../isa:1 the AVX2 ones (skipped, with an
// error, on a CPU without AVX2 + F16C). HOLMES_REDUCE_ISA does not change them; the context line
// "reduce_isa" says what the library would choose.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/reduce.hpp"

namespace {

using holmes::ReduceIsa;

constexpr std::size_t kBytes = 4u << 20;  // larger than L2, the size of a collective's chunks

// This thread's CPU time: what Google Benchmark divides by too, so that both figures leave out
// the time other processes on a shared machine take.
double thread_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

// Bytes per CPU second of memcpy between two buffers of `bytes`, over at least 20 ms.
double memcpy_bytes_per_second(std::size_t bytes) {
  std::vector<std::byte> from(bytes, std::byte{1});
  std::vector<std::byte> to(bytes, std::byte{2});
  std::memcpy(to.data(), from.data(), bytes);  // fault the pages in first
  const double start = thread_cpu_seconds();
  std::size_t copies = 0;
  double elapsed = 0;
  do {
    std::memcpy(to.data(), from.data(), bytes);
    benchmark::DoNotOptimize(to.data());
    benchmark::ClobberMemory();
    ++copies;
    elapsed = thread_cpu_seconds() - start;
  } while (elapsed < 0.02);
  return static_cast<double>(copies * bytes) / elapsed;
}

// Sets bytes_per_second and the memcpy comparison for `bytes` per iteration.
void report(benchmark::State& state, std::size_t bytes, double memcpy_rate) {
  const auto total = static_cast<double>(state.iterations()) * static_cast<double>(bytes);
  state.SetBytesProcessed(static_cast<std::int64_t>(total));
  state.counters["memcpy_GB/s"] = memcpy_rate / 1e9;
  // A rate counter divides by the elapsed time: the seconds memcpy would have needed for the
  // same bytes, per second taken, is the kernel's speed as a fraction of memcpy's.
  state.counters["x_memcpy"] = benchmark::Counter(total / memcpy_rate, benchmark::Counter::kIsRate);
}

bool runnable(benchmark::State& state, ReduceIsa isa) {
  if (holmes::reduce_isa_supported(isa)) return true;
  state.SkipWithError("this CPU cannot run these kernels");
  return false;
}

// Values that keep every op in the normal range (no overflow, no subnormals, no NaN): numbers in
// [0.5, 2) for the float types, arbitrary bits for the integers.
std::vector<std::byte> inputs(hm_dtype_t dtype, std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> moderate(0.5f, 2.0f);
  const std::size_t size = holmes::dtype_size(dtype);
  std::vector<std::byte> out(count * size);
  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t bits = rng();
    const float value = moderate(rng);
    switch (dtype) {
      case HM_FLOAT16:
        bits = holmes::float_to_half(value);
        break;
      case HM_BFLOAT16:
        bits = holmes::float_to_bfloat16(value);
        break;
      case HM_FLOAT32:
        std::memcpy(&bits, &value, sizeof value);
        break;
      case HM_FLOAT64: {
        const double wide = value;
        std::memcpy(&bits, &wide, sizeof wide);
        break;
      }
      default:
        break;
    }
    std::memcpy(out.data() + i * size, &bits, size);
  }
  return out;
}

std::string label(ReduceIsa isa, hm_dtype_t dtype, const char* what) {
  return std::string(holmes::reduce_isa_name(isa)) + " " + holmes::dtype_name(dtype) + " " + what;
}

void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<std::byte> a(bytes, std::byte{1});
  std::vector<std::byte> b(bytes, std::byte{2});
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_Memcpy)->Arg(kBytes);

// dst = a op b over kBytes of dst; bytes_per_second counts dst's bytes (the kernel also reads
// twice as many).
void BM_Reduce(benchmark::State& state) {
  const auto isa = static_cast<ReduceIsa>(state.range(0));
  const auto dtype = static_cast<hm_dtype_t>(state.range(1));
  const auto op = static_cast<hm_op_t>(state.range(2));
  if (!runnable(state, isa)) return;
  const std::size_t count = kBytes / holmes::dtype_size(dtype);
  const std::vector<std::byte> a = inputs(dtype, count, 1);
  const std::vector<std::byte> b = inputs(dtype, count, 2);
  std::vector<std::byte> dst(kBytes);
  holmes::reduce(isa, dtype, op, dst.data(), a.data(), b.data(), count);  // fault dst in
  const double memcpy_rate = memcpy_bytes_per_second(kBytes);
  for (auto _ : state) {
    holmes::reduce(isa, dtype, op, dst.data(), a.data(), b.data(), count);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  report(state, kBytes, memcpy_rate);
  state.SetLabel(label(isa, dtype, holmes::op_name(op)));
}
BENCHMARK(BM_Reduce)
    ->ArgNames({"isa", "dtype", "op"})
    ->ArgsProduct({{static_cast<int>(ReduceIsa::kPortable), static_cast<int>(ReduceIsa::kAvx2)},
                   {HM_INT8, HM_UINT8, HM_INT32, HM_UINT32, HM_INT64, HM_UINT64, HM_FLOAT16,
                    HM_BFLOAT16, HM_FLOAT32, HM_FLOAT64},
                   {HM_SUM, HM_PROD, HM_MIN, HM_MAX}});

// finalize_average in place over kBytes.
void BM_FinalizeAverage(benchmark::State& state) {
  const auto isa = static_cast<ReduceIsa>(state.range(0));
  const auto dtype = static_cast<hm_dtype_t>(state.range(1));
  if (!runnable(state, isa)) return;
  const std::size_t count = kBytes / holmes::dtype_size(dtype);
  const std::vector<std::byte> original = inputs(dtype, count, 3);
  std::vector<std::byte> data = original;
  const double memcpy_rate = memcpy_bytes_per_second(kBytes);
  for (auto _ : state) {
    // Dividing by 1 keeps the values (and their speed) the same from one iteration to the next.
    holmes::finalize_average(isa, dtype, data.data(), count, 1);
    benchmark::DoNotOptimize(data.data());
    benchmark::ClobberMemory();
  }
  report(state, kBytes, memcpy_rate);
  state.SetLabel(label(isa, dtype, "average"));
}
BENCHMARK(BM_FinalizeAverage)
    ->ArgNames({"isa", "dtype"})
    ->ArgsProduct({{static_cast<int>(ReduceIsa::kPortable), static_cast<int>(ReduceIsa::kAvx2)},
                   {HM_FLOAT16, HM_BFLOAT16, HM_FLOAT32, HM_FLOAT64}});

// float16/bfloat16 -> float32 into kBytes of floats.
void BM_Widen(benchmark::State& state) {
  const auto isa = static_cast<ReduceIsa>(state.range(0));
  const auto dtype = static_cast<hm_dtype_t>(state.range(1));
  if (!runnable(state, isa)) return;
  const std::size_t count = kBytes / sizeof(float);
  const std::vector<std::byte> raw = inputs(dtype, count, 4);
  std::vector<std::uint16_t> in(count);
  std::memcpy(in.data(), raw.data(), raw.size());
  std::vector<float> out(count);
  const double memcpy_rate = memcpy_bytes_per_second(kBytes);
  for (auto _ : state) {
    holmes::widen_to_float(isa, dtype, in, out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  report(state, kBytes, memcpy_rate);
  state.SetLabel(label(isa, dtype, "to float32"));
}
BENCHMARK(BM_Widen)
    ->ArgNames({"isa", "dtype"})
    ->ArgsProduct({{static_cast<int>(ReduceIsa::kPortable), static_cast<int>(ReduceIsa::kAvx2)},
                   {HM_FLOAT16, HM_BFLOAT16}});

// float32 -> float16/bfloat16 from kBytes of floats.
void BM_Narrow(benchmark::State& state) {
  const auto isa = static_cast<ReduceIsa>(state.range(0));
  const auto dtype = static_cast<hm_dtype_t>(state.range(1));
  if (!runnable(state, isa)) return;
  const std::size_t count = kBytes / sizeof(float);
  const std::vector<std::byte> raw = inputs(HM_FLOAT32, count, 5);
  std::vector<float> in(count);
  std::memcpy(in.data(), raw.data(), raw.size());
  std::vector<std::uint16_t> out(count);
  const double memcpy_rate = memcpy_bytes_per_second(kBytes);
  for (auto _ : state) {
    holmes::narrow_from_float(isa, dtype, in, out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  report(state, kBytes, memcpy_rate);
  state.SetLabel(label(isa, dtype, "from float32"));
}
BENCHMARK(BM_Narrow)
    ->ArgNames({"isa", "dtype"})
    ->ArgsProduct({{static_cast<int>(ReduceIsa::kPortable), static_cast<int>(ReduceIsa::kAvx2)},
                   {HM_FLOAT16, HM_BFLOAT16}});

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  try {
    benchmark::AddCustomContext("reduce_isa", holmes::reduce_isa_name());
  } catch (const std::exception& e) {  // a bad HOLMES_REDUCE_ISA
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
