#include "transports/shm/config.hpp"

#include "core/env.hpp"
#include "transports/shm/layout.hpp"

namespace holmes::shm {
namespace {

std::uint64_t floor_power_of_two(std::uint64_t v) {
  std::uint64_t p = 1;
  while (p * 2 <= v) p *= 2;
  return p;
}

}  // namespace

ShmTuning ShmTuning::from_env() {
  ShmTuning tuning;
  if (auto bytes = env_int("HOLMES_SHM_RING_BYTES", static_cast<std::int64_t>(kMinRingBytes),
                           static_cast<std::int64_t>(kMaxRingBytes))) {
    tuning.ring_bytes = floor_power_of_two(static_cast<std::uint64_t>(*bytes));
  }
  if (auto cma = env_int("HOLMES_SHM_CMA", 0, 1)) tuning.cma = *cma == 1;
  if (auto min = env_int("HOLMES_SHM_CMA_MIN_BYTES", 1, std::int64_t{1} << 40)) {
    tuning.cma_min_bytes = static_cast<std::uint64_t>(*min);
  }
  if (auto park = env_int("HOLMES_SHM_PARK_US", 0, 1000000)) {
    tuning.park_grace = std::chrono::microseconds(*park);
  }
  if (auto poll = env_int("HOLMES_SHM_POLL", 0, 1)) tuning.caller_progress = *poll == 1;
  if (auto window = env_int("HOLMES_SHM_POLL_US", 0, 1000000)) {
    tuning.poll_window = std::chrono::microseconds(*window);
  }
  if (auto fused = env_int("HOLMES_SHM_FUSED_REDUCE", 0, 1)) tuning.fused_reduce = *fused == 1;
  return tuning;
}

}  // namespace holmes::shm
