#include "communicator/cuda_device.hpp"

namespace holmes::detail {

// Wired to src/core/cuda once that layer is in the build (HOLMES_CUDA_DEVICE_MEMORY).
std::unique_ptr<DeviceMemory> make_cuda_device_memory() { return nullptr; }

}  // namespace holmes::detail
