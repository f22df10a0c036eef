#include "core/cuda/device_buffer.hpp"

#include <string>
#include <utility>

#include "core/cuda/memory.hpp"
#include "core/status.hpp"

#if defined(HOLMES_HAVE_CUDA)
#include "core/cuda/cuda_api.hpp"
#endif

namespace holmes {

DeviceBuffer::DeviceBuffer(std::size_t bytes, int device) {
  std::string why;
  if (!cuda_device_available(&why)) {
    fail(HM_ERR_UNSUPPORTED, "cannot allocate device memory: {}", why);
  }
#if defined(HOLMES_HAVE_CUDA)
  if (device < 0) cuda::check(cudaGetDevice(&device), "reading the current CUDA device");
  require(device < cuda::probe().device_count, "CUDA device {} does not exist ({} visible)", device,
          cuda::probe().device_count);
  if (bytes == 0) {
    device_ = device;
    return;
  }
  cuda::DeviceGuard guard(device);
  cuda::ThreadStream& stream = cuda::thread_stream(device);
  const std::string what = fmt::format("allocating {} bytes on CUDA device {}", bytes, device);
  if (stream.memory_pools) {
    cuda::check(cudaMallocAsync(&data_, bytes, stream.stream), what);
    from_pool_ = true;
    try {
      // Usable from any stream and thread once the allocation has happened.
      cuda::synchronize(stream, what);
    } catch (...) {
      release();
      throw;
    }
  } else {
    cuda::check(cudaMalloc(&data_, bytes), what);
  }
  size_ = bytes;
  device_ = device;
#endif
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      device_(std::exchange(other.device_, -1)),
      from_pool_(std::exchange(other.from_pool_, false)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    device_ = std::exchange(other.device_, -1);
    from_pool_ = std::exchange(other.from_pool_, false);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::release() noexcept {
#if defined(HOLMES_HAVE_CUDA)
  if (data_ != nullptr) {
    // Errors are ignored: at process exit the CUDA runtime may already be unloading.
    try {
      cuda::DeviceGuard guard(device_);
      if (from_pool_) {
        cudaFreeAsync(data_, cuda::thread_stream(device_).stream);
      } else {
        cudaFree(data_);
      }
    } catch (...) {
    }
    cudaGetLastError();
  }
#endif
  data_ = nullptr;
  size_ = 0;
  device_ = -1;
  from_pool_ = false;
}

}  // namespace holmes
