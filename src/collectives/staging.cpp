#include "collectives/staging.hpp"

#include <algorithm>

#include "core/status.hpp"

namespace holmes {
namespace {

// Sizes round up to powers of two from 64 KiB, so buffers are reused across similar chunks.
std::size_t size_class(std::size_t bytes) {
  std::size_t size = std::size_t{64} << 10;
  while (size < bytes) size *= 2;
  return size;
}

}  // namespace

StagingPool::StagingPool(DeviceMemory& device, std::size_t limit_bytes)
    : state_(std::make_shared<State>(device, limit_bytes)) {}

std::shared_ptr<std::byte> StagingPool::acquire(std::size_t bytes, const Deadline& deadline) {
  const std::size_t size = size_class(std::max<std::size_t>(bytes, 1));
  std::unique_lock lock(state_->mutex);
  // One buffer larger than the limit is still allowed when nothing else is out.
  const bool fits = state_->returned.wait_until(lock, deadline.at(), [&] {
    return state_->in_use == 0 || state_->in_use + size <= state_->limit;
  });
  if (!fits) {
    fail(HM_ERR_TIMEOUT, "no pinned staging buffer came back in time ({} bytes in use)",
         state_->in_use);
  }
  std::shared_ptr<std::byte> buffer;
  auto it = std::find_if(state_->idle.begin(), state_->idle.end(),
                         [&](const auto& entry) { return entry.first == size; });
  if (it != state_->idle.end()) {
    buffer = std::move(it->second);
    state_->idle.erase(it);
  } else {
    lock.unlock();
    buffer = state_->device.allocate_host(size);  // slow: outside the lock
    lock.lock();
  }
  state_->in_use += size;
  // Hand out an alias whose release puts the buffer back.
  auto state = state_;
  return std::shared_ptr<std::byte>(buffer.get(), [state, buffer, size](std::byte*) {
    {
      std::lock_guard guard(state->mutex);
      state->in_use -= size;
      state->idle.emplace_back(size, buffer);
    }
    state->returned.notify_all();
  });
}

std::size_t StagingPool::bytes_in_use() const {
  std::lock_guard lock(state_->mutex);
  return state_->in_use;
}

}  // namespace holmes
