// Device memory owned by one object: scratch space for reductions and staging on the GPU.
#pragma once

#include <cstddef>

namespace holmes {

class DeviceBuffer {
 public:
  DeviceBuffer() noexcept = default;
  // `bytes` of memory on `device` (-1: the calling thread's current device), from the device's
  // stream-ordered pool where it has one, so that freeing it does not stall the whole device as
  // cudaFree does. Throws HM_ERR_UNSUPPORTED naming why when no device is usable,
  // HM_ERR_INVALID_ARGUMENT for a device that does not exist, HM_ERR_OUT_OF_MEMORY when the
  // device is full.
  explicit DeviceBuffer(std::size_t bytes, int device = -1);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // Frees the memory. Work on it must be finished, which it is when it was only used through
  // device_ops.hpp (every operation there returns when the device is done).
  ~DeviceBuffer();

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  int device() const noexcept { return device_; }

 private:
  void release() noexcept;

  void* data_ = nullptr;
  std::size_t size_ = 0;
  int device_ = -1;
  bool from_pool_ = false;
};

}  // namespace holmes
