#include "collectives/device_memory.hpp"

#include "core/dtype.hpp"
#include "core/status.hpp"

namespace holmes {

void DeviceMemory::copy_many(std::span<const DeviceCopy> copies) {
  for (const DeviceCopy& c : copies) copy(c.dst, c.src, c.bytes);
}

void DeviceMemory::reduce_many(hm_dtype_t dtype, hm_op_t op, void* dst,
                               std::span<const void* const> inputs, std::size_t count) {
  reduce_left_to_right(
      dst, inputs,
      [&](void* out, const void* a, const void* b) { reduce(dtype, op, out, a, b, count); },
      [&](void* out, const void* src) { copy(out, src, count * dtype_size(dtype)); });
}

std::unique_ptr<DeviceMemory::StreamPoint> DeviceMemory::mark(void* stream) {
  (void)stream;
  fail(HM_ERR_UNSUPPORTED, "this device memory has no streams to order calls on");
}

std::unique_ptr<DeviceMemory::StreamGate> DeviceMemory::make_gate() {
  fail(HM_ERR_UNSUPPORTED, "this device memory has no streams to order calls on");
}

DeviceMemory::SharedMemory DeviceMemory::allocate_shared(std::size_t bytes) {
  (void)bytes;
  fail(HM_ERR_UNSUPPORTED, "this device memory cannot be shared with other processes");
}

std::shared_ptr<std::byte> DeviceMemory::open_shared(const std::string& handle, std::size_t bytes) {
  (void)handle, (void)bytes;
  fail(HM_ERR_UNSUPPORTED, "this device memory cannot be shared with other processes");
}

}  // namespace holmes
