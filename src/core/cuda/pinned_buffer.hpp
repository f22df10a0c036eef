// Host memory for staging device buffers: page-locked when a CUDA device is usable (copies to
// and from the GPU then run by DMA at full speed, and kernels can read it directly), ordinary
// page-aligned memory otherwise, so that code staging through it runs unchanged without a GPU.
#pragma once

#include <cstddef>
#include <mutex>
#include <span>
#include <vector>

namespace holmes {

class PinnedBuffer {
 public:
  static constexpr std::size_t kAlignment = 4096;  // a page: what cudaMallocHost gives too

  PinnedBuffer() noexcept = default;
  // `bytes` of host memory, page-locked when a device is usable. Page-locking happens with
  // `device` current (-1: the calling thread's current device), which creates that device's
  // CUDA context if the process has none there yet, so pass the device whose buffers this
  // stages. Falls back to ordinary memory if page-locking fails. Throws HM_ERR_OUT_OF_MEMORY
  // when even that fails.
  explicit PinnedBuffer(std::size_t bytes, int device = -1);
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::span<std::byte> span() const noexcept { return {data_, size_}; }
  bool page_locked() const noexcept { return page_locked_; }

 private:
  void release() noexcept;

  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool page_locked_ = false;
};

// A few staging buffers kept by one owner (say, a communicator) for reuse, because
// page-locking costs milliseconds per hundred MiB. Thread-safe.
class PinnedPool {
 public:
  // Keeps at most `max_cached_bytes` of released buffers, allocated with `device` current.
  explicit PinnedPool(std::size_t max_cached_bytes = std::size_t{256} << 20, int device = -1);

  // The smallest cached buffer of at least `bytes`, or a new one of exactly `bytes`. The
  // buffer's size() may exceed `bytes`.
  PinnedBuffer acquire(std::size_t bytes);
  // Takes a buffer back for reuse; drops it (and older ones) when the cache would grow too big.
  void release(PinnedBuffer buffer);

  std::size_t cached_bytes() const;

 private:
  const std::size_t max_cached_bytes_;
  const int device_;
  mutable std::mutex mutex_;
  std::vector<PinnedBuffer> cached_;  // oldest first
  std::size_t cached_bytes_ = 0;
};

}  // namespace holmes
