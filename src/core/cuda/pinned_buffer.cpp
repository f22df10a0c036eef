#include "core/cuda/pinned_buffer.hpp"

#include <algorithm>
#include <new>
#include <optional>
#include <utility>

#include "core/log.hpp"
#include "core/status.hpp"

#if defined(HOLMES_HAVE_CUDA)
#include "core/cuda/cuda_api.hpp"
#endif

namespace holmes {
namespace {

#if defined(HOLMES_HAVE_CUDA)
// Page-locked memory usable from every device (portable), or nullptr when that fails.
std::byte* allocate_page_locked(std::size_t bytes, int device) {
  if (!cuda::probe().available) return nullptr;
  try {
    std::optional<cuda::DeviceGuard> guard;
    if (device >= 0) guard.emplace(device);
    void* p = nullptr;
    const cudaError_t error = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (error == cudaSuccess) return static_cast<std::byte*>(p);
    cudaGetLastError();
    HM_LOG_WARN("page-locking {} bytes failed (CUDA error {} {}); staging through ordinary memory",
                bytes, static_cast<int>(error), cudaGetErrorName(error));
  } catch (const Error& e) {
    HM_LOG_WARN("page-locking {} bytes failed ({}); staging through ordinary memory", bytes,
                e.what());
  }
  return nullptr;
}

void free_page_locked(std::byte* p) noexcept {
  cudaFreeHost(p);
  cudaGetLastError();  // at process exit the runtime may be gone already
}
#else
std::byte* allocate_page_locked(std::size_t, int) { return nullptr; }
void free_page_locked(std::byte*) noexcept {}
#endif

}  // namespace

PinnedBuffer::PinnedBuffer(std::size_t bytes, int device) : size_(bytes) {
  if (bytes == 0) return;
  data_ = allocate_page_locked(bytes, device);
  if (data_ != nullptr) {
    page_locked_ = true;
    return;
  }
  data_ =
      static_cast<std::byte*>(::operator new (bytes, std::align_val_t{kAlignment}, std::nothrow));
  if (data_ == nullptr) {
    size_ = 0;
    fail(HM_ERR_OUT_OF_MEMORY, "cannot allocate a {}-byte staging buffer", bytes);
  }
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      page_locked_(std::exchange(other.page_locked_, false)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    page_locked_ = std::exchange(other.page_locked_, false);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() { release(); }

void PinnedBuffer::release() noexcept {
  if (data_ == nullptr) return;
  if (page_locked_) {
    free_page_locked(data_);
  } else {
    ::operator delete (data_, std::align_val_t{kAlignment});
  }
  data_ = nullptr;
  size_ = 0;
  page_locked_ = false;
}

PinnedPool::PinnedPool(std::size_t max_cached_bytes, int device)
    : max_cached_bytes_(max_cached_bytes), device_(device) {}

PinnedBuffer PinnedPool::acquire(std::size_t bytes) {
  {
    std::lock_guard lock(mutex_);
    auto best = cached_.end();
    for (auto it = cached_.begin(); it != cached_.end(); ++it) {
      if (it->size() >= bytes && (best == cached_.end() || it->size() < best->size())) best = it;
    }
    if (best != cached_.end()) {
      PinnedBuffer buffer = std::move(*best);
      cached_.erase(best);
      cached_bytes_ -= buffer.size();
      return buffer;
    }
  }
  return PinnedBuffer(bytes, device_);  // allocated outside the lock: it can take milliseconds
}

void PinnedPool::release(PinnedBuffer buffer) {
  if (buffer.size() == 0 || buffer.size() > max_cached_bytes_) return;  // freed here
  std::vector<PinnedBuffer> dropped;                                    // freed after unlocking
  {
    std::lock_guard lock(mutex_);
    while (cached_bytes_ + buffer.size() > max_cached_bytes_) {
      cached_bytes_ -= cached_.front().size();
      dropped.push_back(std::move(cached_.front()));
      cached_.erase(cached_.begin());
    }
    cached_bytes_ += buffer.size();
    cached_.push_back(std::move(buffer));
  }
}

std::size_t PinnedPool::cached_bytes() const {
  std::lock_guard lock(mutex_);
  return cached_bytes_;
}

}  // namespace holmes
