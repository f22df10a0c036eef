// holmes-cuda-bench: how fast the device kernels run next to a plain device-to-device copy on
// the same GPU, through the same synchronous API the collectives use (launch + wait included).
// Usage: holmes-cuda-bench [MiB per buffer, default 256]. Prints one line per operation.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "core/cuda/memory.hpp"
#include "core/dtype.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// Seconds per call: the best of five rounds of `iterations` calls, after a warm-up call.
double seconds_per_call(const std::function<void()>& call, int iterations) {
  call();
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    const auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) call();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::min(best, seconds / iterations);
  }
  return best;
}

void report(const char* name, std::size_t bytes, double traffic_factor, double seconds,
            double copy_rate) {
  const double rate = bytes * traffic_factor / seconds / 1e9;
  std::printf("  %-34s %10.1f us  %8.1f GB/s memory traffic", name, seconds * 1e6, rate);
  if (copy_rate > 0) std::printf("  (%3.0f%% of the d2d copy)", 100.0 * rate / copy_rate);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace holmes;
  const std::size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256;
  std::string why;
  if (mib == 0 || !cuda_device_available(&why)) {
    std::fprintf(stderr, "holmes-cuda-bench: %s\n",
                 mib == 0 ? "size must be > 0 MiB" : why.c_str());
    return 2;
  }
  const std::size_t bytes = mib << 20;
  try {
    DeviceBuffer a(bytes);
    DeviceBuffer b(bytes);
    DeviceBuffer dst(bytes);
    {
      // Zeros: finite in every format, so that no NaN fix-up path skews the timing.
      std::vector<std::byte> zeros(bytes);
      copy_host_to_device(a.data(), zeros.data(), bytes);
      copy_host_to_device(b.data(), zeros.data(), bytes);
    }
    PinnedBuffer staging(bytes, a.device());
    const int iterations =
        static_cast<int>(std::max<std::size_t>(3, (std::size_t{4} << 30) / bytes));

    std::printf("device %d, %zu MiB per buffer, best of 5 x %d synchronous calls\n", a.device(),
                mib, iterations);
    const double copy =
        seconds_per_call([&] { copy_device_to_device(dst.data(), a.data(), bytes); }, iterations);
    const double copy_rate = 2.0 * bytes / copy / 1e9;
    report("copy device->device (reference)", bytes, 2.0, copy, 0);
    for (hm_dtype_t dtype : {HM_FLOAT32, HM_BFLOAT16, HM_FLOAT16, HM_FLOAT64, HM_INT32}) {
      const std::size_t count = bytes / dtype_size(dtype);
      const std::string name = std::string("device_reduce ") + dtype_name(dtype) + " sum";
      const double t = seconds_per_call(
          [&] { device_reduce(dtype, HM_SUM, dst.data(), a.data(), b.data(), count); }, iterations);
      report(name.c_str(), bytes, 3.0, t, copy_rate);
    }
    const double avg = seconds_per_call(
        [&] { device_finalize_average(HM_BFLOAT16, dst.data(), bytes / 2, 8); }, iterations);
    report("device_finalize_average bfloat16", bytes, 2.0, avg, copy_rate);
    const double d2h =
        seconds_per_call([&] { copy_device_to_host(staging.data(), a.data(), bytes); }, iterations);
    report("copy device->host (page-locked)", bytes, 1.0, d2h, 0);
    const double h2d =
        seconds_per_call([&] { copy_host_to_device(a.data(), staging.data(), bytes); }, iterations);
    report("copy host->device (page-locked)", bytes, 1.0, h2d, 0);
    // Latency of a small reduction: launch, run and wait, what a pipelined collective pays per
    // chunk.
    const double small = seconds_per_call(
        [&] { device_reduce(HM_FLOAT32, HM_SUM, dst.data(), a.data(), b.data(), 16384); }, 2000);
    report("device_reduce float32 64 KiB", 65536, 3.0, small, 0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "holmes-cuda-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
