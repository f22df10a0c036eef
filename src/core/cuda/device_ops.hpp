// Operations on device memory: synchronous copies and the reduction kernels that collectives
// apply to chunks living on a GPU. Each returns when the device has finished. They run on the
// calling thread's own CUDA stream on the device that owns the memory, so the caller must have
// finished writing its buffers first (synchronised its own stream), as with any host-synchronous
// API.
//
// Without CUDA in the build or without a usable device, every operation throws
// HM_ERR_UNSUPPORTED with a message naming the reason (see cuda_device_available()).
// Misuse throws HM_ERR_INVALID_ARGUMENT before anything touches the device: a pointer of the
// wrong kind, a range running past the end of its allocation, a pointer not aligned to its
// element size; a device fault would otherwise kill the process's CUDA context.
#pragma once

#include <holmes/holmes.h>

#include <cstddef>
#include <span>

namespace holmes {

// `bytes` from device memory to host memory (ordinary or page-locked).
void copy_device_to_host(void* host, const void* device, std::size_t bytes);
// `bytes` from host memory (ordinary or page-locked) to device memory.
void copy_host_to_device(void* device, const void* host, std::size_t bytes);
// `bytes` between two device buffers (on the same device or on peer devices).
void copy_device_to_device(void* dst, const void* src, std::size_t bytes);

// One copy of a batch (copy_device_to_device_many).
struct DeviceCopy {
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
};
// The copies of `copies` (device to device, as copy_device_to_device; no two destinations
// overlapping), each enqueued on the calling thread's stream of its destination's device, and one
// wait for all of them at the end instead of one per copy.
void copy_device_to_device_many(std::span<const DeviceCopy> copies);

// device_reduce: dst[i] = a[i] op b[i] for i < count, on the device that owns dst, with the
// exact results of holmes::reduce() (reduce.hpp) bit for bit, so that ranks reducing on
// different devices agree. dst is device memory; a and b are device memory on the same device
// or on a GPU it can reach (peer access, enabled here if need be; a peer process's buffer mapped
// through CUDA IPC), page-locked host memory, or managed memory (or any host memory where the
// device can read pageable memory). dst may be the same pointer as a or b. AVG reduces as SUM.
void device_reduce(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
                   std::size_t count);

// device_reduce_many: dst[i] = in[0][i] op in[1][i] op ... op in[n-1][i], in that order, with the
// bits of device_reduce applied pairwise left to right (dst = in0 op in1, then dst op in2, ...),
// but each input read once (a kernel per 8 inputs) and one wait at the end. Inputs as
// device_reduce's a and b; at least one; dst may be the same pointer as inputs[0] only.
void device_reduce_many(hm_dtype_t dtype, hm_op_t op, void* dst,
                        std::span<const void* const> inputs, std::size_t count);

// data[i] /= nranks on the device, with the exact results of holmes::finalize_average().
void device_finalize_average(hm_dtype_t dtype, void* data, std::size_t count, int nranks);

}  // namespace holmes
