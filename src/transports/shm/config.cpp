#include "transports/shm/config.hpp"

#include "core/status.hpp"
#include "transports/shm/layout.hpp"

namespace holmes::shm {

const ShmTuning& checked_shm_tuning(const ShmTuning& tuning) {
  require(tuning.ring_bytes >= kMinRingBytes && tuning.ring_bytes <= kMaxRingBytes &&
              (tuning.ring_bytes & (tuning.ring_bytes - 1)) == 0,
          "shm: ring size {} is not a power of two in [{}, {}]", tuning.ring_bytes, kMinRingBytes,
          kMaxRingBytes);
  return tuning;
}

}  // namespace holmes::shm
