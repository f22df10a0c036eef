// The CUDA implementation of DeviceMemory (collectives/device_memory.hpp) over src/core/cuda.
#pragma once

#include <memory>

#include "collectives/device_memory.hpp"

namespace holmes::detail {

// nullptr when this build has no CUDA or the machine has no usable device.
std::unique_ptr<DeviceMemory> make_cuda_device_memory();

}  // namespace holmes::detail
