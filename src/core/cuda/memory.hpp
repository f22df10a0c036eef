// Where a buffer lives, and what this process can do with GPU memory. Always built: without
// CUDA in the build (or without a usable device) every pointer is host memory and the device
// operations refuse with HM_ERR_UNSUPPORTED, so the rest of the library calls these
// unconditionally. This header also brings in the buffers and device operations:
//   pinned_buffer.hpp  PinnedBuffer, PinnedPool: page-locked host memory for staging
//   device_buffer.hpp  DeviceBuffer: device scratch memory
//   device_ops.hpp     copies between host and device, device_reduce, device_finalize_average
#pragma once

#include <string>

#include "core/cuda/device_buffer.hpp"
#include "core/cuda/device_ops.hpp"
#include "core/cuda/pinned_buffer.hpp"

namespace holmes {

enum class MemoryKind {
  kHost,    // the CPU can address it: use it directly
  kDevice,  // GPU memory: stage it through host memory, reduce it with device_reduce()
};

// kDevice for memory allocated on a GPU (cudaMalloc, cudaMallocAsync, cuMemCreate mappings);
// kHost for everything else, which includes:
//  - page-locked host memory (cudaMallocHost, cudaHostRegister);
//  - managed memory (cudaMallocManaged): it is addressable from the CPU, so the host path is
//    correct for it without any staging (the driver migrates pages on touch); a caller who wants
//    it treated as device memory can prefetch and pass a cudaMalloc buffer instead;
//  - any pointer when the build has no CUDA or the process no usable device.
// Never throws and creates no CUDA context (it asks the driver, not the runtime). When no device
// is usable, that is decided once per process and the call costs a load and a branch.
MemoryKind memory_kind(const void* p) noexcept;

// The device ordinal a kDevice pointer belongs to; -1 for anything else.
int memory_device(const void* p) noexcept;

// Whether this build includes CUDA support.
bool cuda_built() noexcept;

// Whether device buffers can be used in this process. When not, *why (if given) says why:
// "built without CUDA", "no CUDA driver, or one older than the CUDA 13.0 runtime (error 35
// cudaErrorInsufficientDriver: ...)", "no device (...)". Decided once per process.
bool cuda_device_available(std::string* why = nullptr);
// Throws HM_ERR_UNSUPPORTED, "<operation>: no usable CUDA device: <why>", where it is not.
void require_cuda_device(const char* operation);

}  // namespace holmes
