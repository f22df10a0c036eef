#include "collectives/device_memory.hpp"

#include "core/status.hpp"

namespace holmes {

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
