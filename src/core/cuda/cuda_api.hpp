// The CUDA runtime and driver as src/core/cuda uses them: the once-per-process probe, pointer
// queries that create no CUDA context, CUDA errors as holmes::Error, a current-device guard and
// the per-thread streams. Compiled only in builds with CUDA (HOLMES_HAVE_CUDA); the rest of the
// library uses memory.hpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace holmes::cuda {

// Whether this process can use a CUDA device, decided by the first call (cudaGetDeviceCount
// and the driver entry points below). The answer is kept for the process's lifetime: the driver
// and the visible devices do not change under a running process.
struct Probe {
  bool available = false;
  int device_count = 0;
  std::string why_not;  // set when !available
};
const Probe& probe();

// Throws holmes::Error for a failed CUDA call: HM_ERR_OUT_OF_MEMORY when memory ran out, else
// HM_ERR_TRANSPORT ("a device error"), naming `what` and CUDA's error name and text.
[[noreturn]] void fail_cuda(cudaError_t error, std::string_view what);
inline void check(cudaError_t error, std::string_view what) {
  if (error != cudaSuccess) fail_cuda(error, what);
}

enum class PointerType { kUnregisteredHost, kPageLockedHost, kDevice, kManaged };

struct PointerInfo {
  PointerType type = PointerType::kUnregisteredHost;
  int device = -1;  // the device it was allocated on (or registered with); -1 if none
  // The allocation [range_start, range_start + range_bytes) containing the pointer, for device
  // and managed memory; range_bytes is 0 where the driver does not say.
  std::uintptr_t range_start = 0;
  std::size_t range_bytes = 0;
};

// What the driver knows about `p` (cuPointerGetAttributes, which unlike the runtime's
// cudaPointerGetAttributes needs no current context, so asking never creates one). Any failure
// reads as unregistered host memory. Requires probe().available.
PointerInfo pointer_info(const void* p) noexcept;

// Whether `device` has an active primary context (the process has used it).
bool device_in_use(int device) noexcept;

// Makes `device` the calling thread's current device, and restores the previous one on
// destruction, except when the previous device is not in use by this process: restoring it
// would create a context there (cudaSetDevice initialises one), which costs that GPU hundreds
// of MiB for nothing.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

// The calling thread's own stream on one device, with what the kernels need to know about that
// device. Created on first use by each thread, destroyed when the thread exits. The stream is
// non-blocking: it does not wait for work on the legacy default stream, so the caller must have
// finished writing its buffers (synchronised its own stream) before handing them over, as with
// any host-synchronous API.
struct ThreadStream {
  int device = -1;
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;    // blocking-sync event: waiting on it sleeps instead of spinning
  int max_blocks = 1;            // blocks for a full device: 8 blocks of 256 threads per SM
  bool pageable_access = false;  // kernels may read pageable host memory (HMM, ATS)
  bool host_pointer_usable = false;  // page-locked memory has the same address on the device
  bool memory_pools = false;         // cudaMallocAsync works
};

// The calling thread's stream on `device`, which must be current (see DeviceGuard).
ThreadStream& thread_stream(int device);

// Enqueues on `stream` a wait until the 32-bit word at `word` (memory the device can read) is at
// least `value`, compared cyclically (cuStreamWaitValue32, CU_STREAM_WAIT_VALUE_GEQ). The GPU
// waits, not a CPU core. False where the driver has no stream memory operations.
bool stream_wait_geq(cudaStream_t stream, const void* word, std::uint32_t value);

// Waits for everything enqueued on the stream so far. The wait sleeps on a blocking-sync event
// and has no timeout: the work is a copy or a kernel of bounded size that ends or fails (a
// faulting or hung device surfaces as an error from the driver); giving up earlier would leave
// the device writing into buffers the caller then reuses. Throws like check() on failure.
void synchronize(ThreadStream& stream, std::string_view what);

}  // namespace holmes::cuda
