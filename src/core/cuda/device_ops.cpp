#include "core/cuda/device_ops.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/cuda/memory.hpp"
#include "core/dtype.hpp"
#include "core/status.hpp"

#if defined(HOLMES_HAVE_CUDA)
#include "core/cuda/cuda_api.hpp"
#include "core/cuda/reduce_kernels.hpp"
#endif

namespace holmes {
namespace {

std::size_t checked_bytes(std::size_t count, hm_dtype_t dtype, const char* operation) {
  const std::size_t size = dtype_size(dtype);
  require(count <= std::numeric_limits<std::size_t>::max() / size,
          "{}: {} elements of {} do not fit in memory", operation, count, dtype_name(dtype));
  return count * size;
}

// A reduction's arguments that need no device: a device to run on, a known op and dtype, a count
// whose bytes fit. Returns the bytes.
std::size_t checked_reduction(hm_dtype_t dtype, hm_op_t op, std::size_t count,
                              const char* operation) {
  require_cuda_device(operation);
  require(op_valid(op), "{}: unknown reduction op {}", operation, static_cast<int>(op));
  require(dtype_valid(dtype), "{}: unknown dtype {}", operation, static_cast<int>(dtype));
  return checked_bytes(count, dtype, operation);
}

#if defined(HOLMES_HAVE_CUDA)

const void* address_of(const void* p) { return p; }  // fmt prints void pointers in hex

// [p, p + bytes) must lie inside the allocation the driver reports for p (when it reports one).
void require_in_allocation(const cuda::PointerInfo& info, const void* p, std::size_t bytes,
                           const char* operation, const char* name) {
  if (info.range_bytes == 0) return;
  const auto start = reinterpret_cast<std::uintptr_t>(p);
  const bool inside = start >= info.range_start && start - info.range_start <= info.range_bytes &&
                      bytes <= info.range_bytes - (start - info.range_start);
  require(inside, "{}: {} bytes at {} ({}) run past the end of its {}-byte allocation", operation,
          bytes, name, address_of(p), info.range_bytes);
}

void require_aligned(const void* p, std::size_t alignment, const char* operation,
                     const char* name) {
  require(reinterpret_cast<std::uintptr_t>(p) % alignment == 0,
          "{}: {} ({}) is not aligned to its {}-byte elements", operation, name, address_of(p),
          alignment);
}

// A pointer that must be device memory; returns what the driver knows about it.
cuda::PointerInfo device_operand(const void* p, std::size_t bytes, const char* operation,
                                 const char* name) {
  require(p != nullptr, "{}: {} is null", operation, name);
  const cuda::PointerInfo info = cuda::pointer_info(p);
  require(info.type == cuda::PointerType::kDevice && info.device >= 0,
          "{}: {} ({}) is not device memory", operation, name, address_of(p));
  require_in_allocation(info, p, bytes, operation, name);
  return info;
}

// A pointer that must be host memory (ordinary, page-locked or managed).
void host_operand(const void* p, const char* operation, const char* name) {
  require(p != nullptr, "{}: {} is null", operation, name);
  require(cuda::pointer_info(p).type != cuda::PointerType::kDevice,
          "{}: {} ({}) is device memory, not host memory", operation, name, address_of(p));
}

// Whether kernels on `device` (current) may read memory on `peer`: the two GPUs can reach each
// other (NVLink or PCIe), and peer access is then enabled, if nothing had done so yet (a peer's
// buffer mapped through CUDA IPC enables it lazily; another GPU's buffer of this process may not).
bool peer_readable(int device, int peer) {
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, device, peer) != cudaSuccess || can == 0) {
    cudaGetLastError();
    return false;
  }
  const cudaError_t enabled = cudaDeviceEnablePeerAccess(peer, 0);
  if (enabled == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
  return enabled == cudaSuccess || enabled == cudaErrorPeerAccessAlreadyEnabled;
}

// An input of a kernel running on `stream.device`: it must be able to read `bytes` there.
void kernel_input(const void* p, std::size_t bytes, const cuda::ThreadStream& stream,
                  const char* operation, const char* name) {
  require(p != nullptr, "{}: {} is null", operation, name);
  const cuda::PointerInfo info = cuda::pointer_info(p);
  switch (info.type) {
    case cuda::PointerType::kDevice:
      require(info.device == stream.device || peer_readable(stream.device, info.device),
              "{}: {} ({}) is on CUDA device {}, which device {} (dst's) cannot read", operation,
              name, address_of(p), info.device, stream.device);
      require_in_allocation(info, p, bytes, operation, name);
      return;
    case cuda::PointerType::kManaged:
      require_in_allocation(info, p, bytes, operation, name);
      return;
    case cuda::PointerType::kPageLockedHost:
      require(stream.host_pointer_usable,
              "{}: {} ({}) is page-locked host memory that CUDA device {} cannot address at the "
              "same pointer",
              operation, name, address_of(p), stream.device);
      return;
    case cuda::PointerType::kUnregisteredHost:
      require(stream.pageable_access,
              "{}: {} ({}) is pageable host memory, which CUDA device {} cannot read; use "
              "page-locked memory (PinnedBuffer) or device memory",
              operation, name, address_of(p), stream.device);
      return;
  }
}

// Partly overlapping operands would race between threads (the same pointer is fine).
void require_no_partial_overlap(const void* dst, const void* src, std::size_t bytes,
                                const char* operation, const char* name) {
  const auto d = reinterpret_cast<std::uintptr_t>(dst);
  const auto s = reinterpret_cast<std::uintptr_t>(src);
  const bool overlap = d != s && d < s + bytes && s < d + bytes;
  require(!overlap, "{}: dst ({}) and {} ({}) partly overlap", operation, address_of(dst), name,
          address_of(src));
}

// A synchronous copy on the calling thread's stream of `device`.
void copy_on(int device, void* dst, const void* src, std::size_t bytes, const char* operation) {
  cuda::DeviceGuard guard(device);
  cuda::ThreadStream& stream = cuda::thread_stream(device);
  cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream.stream), operation);
  cuda::synchronize(stream, operation);
}

#endif  // HOLMES_HAVE_CUDA

}  // namespace

void copy_device_to_host(void* host, const void* device, std::size_t bytes) {
  constexpr const char* kOperation = "copy_device_to_host";
  require_cuda_device(kOperation);
#if defined(HOLMES_HAVE_CUDA)
  if (bytes == 0) return;
  const cuda::PointerInfo source = device_operand(device, bytes, kOperation, "the source");
  host_operand(host, kOperation, "the destination");
  copy_on(source.device, host, device, bytes, kOperation);
#endif
}

void copy_host_to_device(void* device, const void* host, std::size_t bytes) {
  constexpr const char* kOperation = "copy_host_to_device";
  require_cuda_device(kOperation);
#if defined(HOLMES_HAVE_CUDA)
  if (bytes == 0) return;
  const cuda::PointerInfo destination =
      device_operand(device, bytes, kOperation, "the destination");
  host_operand(host, kOperation, "the source");
  copy_on(destination.device, device, host, bytes, kOperation);
#endif
}

void copy_device_to_device(void* dst, const void* src, std::size_t bytes) {
  constexpr const char* kOperation = "copy_device_to_device";
  require_cuda_device(kOperation);
#if defined(HOLMES_HAVE_CUDA)
  if (bytes == 0) return;
  const cuda::PointerInfo destination = device_operand(dst, bytes, kOperation, "the destination");
  device_operand(src, bytes, kOperation, "the source");
  require_no_partial_overlap(dst, src, bytes, kOperation, "the source");
  copy_on(destination.device, dst, src, bytes, kOperation);
#endif
}

void copy_device_to_device_many(std::span<const DeviceCopy> copies) {
  constexpr const char* kOperation = "copy_device_to_device_many";
  require_cuda_device(kOperation);
#if defined(HOLMES_HAVE_CUDA)
  // Checked before anything is enqueued, so that a bad copy leaves none half done.
  std::vector<int> devices;
  for (const DeviceCopy& c : copies) {
    if (c.bytes == 0) continue;
    const cuda::PointerInfo destination =
        device_operand(c.dst, c.bytes, kOperation, "a destination");
    device_operand(c.src, c.bytes, kOperation, "a source");
    require_no_partial_overlap(c.dst, c.src, c.bytes, kOperation, "its source");
    devices.push_back(destination.device);
  }
  std::size_t next = 0;
  for (const DeviceCopy& c : copies) {
    if (c.bytes == 0) continue;
    const int device = devices[next++];
    cuda::DeviceGuard guard(device);
    cuda::ThreadStream& stream = cuda::thread_stream(device);
    cuda::check(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDefault, stream.stream),
                kOperation);
  }
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  for (const int device : devices) {
    cuda::DeviceGuard guard(device);
    cuda::synchronize(cuda::thread_stream(device), kOperation);
  }
#else
  (void)copies;
#endif
}

void device_reduce(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
                   std::size_t count) {
  constexpr const char* kOperation = "device_reduce";
  const std::size_t bytes = checked_reduction(dtype, op, count, kOperation);
#if defined(HOLMES_HAVE_CUDA)
  if (count == 0) return;
  const std::size_t alignment = dtype_size(dtype);
  const cuda::PointerInfo target = device_operand(dst, bytes, kOperation, "dst");
  require_aligned(dst, alignment, kOperation, "dst");
  require_aligned(a, alignment, kOperation, "a");
  require_aligned(b, alignment, kOperation, "b");
  require_no_partial_overlap(dst, a, bytes, kOperation, "a");
  require_no_partial_overlap(dst, b, bytes, kOperation, "b");
  cuda::DeviceGuard guard(target.device);
  cuda::ThreadStream& stream = cuda::thread_stream(target.device);
  kernel_input(a, bytes, stream, kOperation, "a");
  kernel_input(b, bytes, stream, kOperation, "b");
  cuda::check(
      device_ops::launch_reduce(dtype, op, dst, a, b, count, stream.max_blocks, stream.stream),
      kOperation);
  cuda::synchronize(stream, kOperation);
#else
  (void)dst, (void)a, (void)b, (void)bytes;
#endif
}

void device_reduce_many(hm_dtype_t dtype, hm_op_t op, void* dst,
                        std::span<const void* const> inputs, std::size_t count) {
  constexpr const char* kOperation = "device_reduce_many";
  const std::size_t bytes = checked_reduction(dtype, op, count, kOperation);
  require(!inputs.empty(), "{}: no inputs", kOperation);
#if defined(HOLMES_HAVE_CUDA)
  if (count == 0) return;
  const std::size_t alignment = dtype_size(dtype);
  const cuda::PointerInfo target = device_operand(dst, bytes, kOperation, "dst");
  require_aligned(dst, alignment, kOperation, "dst");
  cuda::DeviceGuard guard(target.device);
  cuda::ThreadStream& stream = cuda::thread_stream(target.device);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = "input " + std::to_string(i);
    require_aligned(inputs[i], alignment, kOperation, name.c_str());
    // Only the first input may be dst: a later one would be overwritten before it is read.
    require(i == 0 || inputs[i] != dst, "{}: {} is dst (only input 0 may be)", kOperation, name);
    require_no_partial_overlap(dst, inputs[i], bytes, kOperation, name.c_str());
    kernel_input(inputs[i], bytes, stream, kOperation, name.c_str());
  }
  cuda::check(device_ops::launch_reduce_many(dtype, op, dst, inputs.data(), inputs.size(), count,
                                             stream.max_blocks, stream.stream),
              kOperation);
  cuda::synchronize(stream, kOperation);
#else
  (void)dst, (void)bytes;
#endif
}

void device_finalize_average(hm_dtype_t dtype, void* data, std::size_t count, int nranks) {
  constexpr const char* kOperation = "device_finalize_average";
  require_cuda_device(kOperation);
  require(nranks > 0, "{}: average over {} ranks", kOperation, nranks);
  require(dtype_valid(dtype), "{}: unknown dtype {}", kOperation, static_cast<int>(dtype));
  const std::size_t bytes = checked_bytes(count, dtype, kOperation);
#if defined(HOLMES_HAVE_CUDA)
  if (count == 0) return;
  const cuda::PointerInfo target = device_operand(data, bytes, kOperation, "data");
  require_aligned(data, dtype_size(dtype), kOperation, "data");
  cuda::DeviceGuard guard(target.device);
  cuda::ThreadStream& stream = cuda::thread_stream(target.device);
  cuda::check(
      device_ops::launch_divide(dtype, data, count, nranks, stream.max_blocks, stream.stream),
      kOperation);
  cuda::synchronize(stream, kOperation);
#else
  (void)data, (void)bytes;
#endif
}

}  // namespace holmes
