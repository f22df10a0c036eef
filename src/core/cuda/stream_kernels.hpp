// The kernel a CUDA stream waits with where the driver has no stream memory operations
// (stream_kernels.cu). Only in builds with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace holmes::device_ops {

// Enqueues on `stream` one thread that returns once *ticket is (cyclically) at least `value`,
// sleeping a few microseconds between reads. `ticket` is mapped page-locked host memory.
cudaError_t launch_wait_ticket(const std::uint32_t* ticket, std::uint32_t value,
                               cudaStream_t stream);

}  // namespace holmes::device_ops
