// Pinned host buffers that device transfers are staged through, reused across chunks and
// operations of a communicator (pinned allocations are slow: they must not happen per chunk).
// A buffer returns to the pool when its last holder lets go, on whatever thread that is (sends
// release theirs on the transport's thread when they complete).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "collectives/device_memory.hpp"
#include "core/clock.hpp"

namespace holmes {

class StagingPool {
 public:
  // At most `limit_bytes` are handed out at once; acquire() waits for returns beyond that.
  StagingPool(DeviceMemory& device, std::size_t limit_bytes = std::size_t{64} << 20);

  // A buffer of at least `bytes`. Throws HM_ERR_TIMEOUT if none comes back before the deadline.
  std::shared_ptr<std::byte> acquire(std::size_t bytes, const Deadline& deadline);

  std::size_t bytes_in_use() const;

 private:
  struct State {
    State(DeviceMemory& d, std::size_t l) : device(d), limit(l) {}
    DeviceMemory& device;
    std::size_t limit;
    mutable std::mutex mutex;
    std::condition_variable returned;
    std::vector<std::pair<std::size_t, std::shared_ptr<std::byte>>> idle;
    std::size_t in_use = 0;
  };
  std::shared_ptr<State> state_;
};

}  // namespace holmes
