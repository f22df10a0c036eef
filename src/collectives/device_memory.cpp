#include "collectives/device_memory.hpp"

#include "core/dtype.hpp"
#include "core/status.hpp"

namespace holmes {

void DeviceMemory::copy_many(std::span<const DeviceCopy> copies) {
  for (const DeviceCopy& c : copies) copy(c.dst, c.src, c.bytes);
}

void DeviceMemory::reduce_many(hm_dtype_t dtype, hm_op_t op, void* dst,
                               std::span<const void* const> inputs, std::size_t count) {
  require(!inputs.empty(), "reduce_many: no inputs");
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    require(inputs[i] != dst, "reduce_many: input {} is dst (only input 0 may be)", i);
  }
  if (inputs.size() == 1) {
    copy(dst, inputs[0], count * dtype_size(dtype));
    return;
  }
  reduce(dtype, op, dst, inputs[0], inputs[1], count);
  for (std::size_t i = 2; i < inputs.size(); ++i) reduce(dtype, op, dst, dst, inputs[i], count);
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
