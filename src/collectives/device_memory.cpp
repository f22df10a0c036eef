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

}  // namespace holmes
