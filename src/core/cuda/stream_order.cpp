#include "core/cuda/stream_order.hpp"

#include <atomic>
#include <string>

#include "core/cuda/memory.hpp"
#include "core/status.hpp"

#if defined(HOLMES_HAVE_CUDA)
#include "core/cuda/cuda_api.hpp"
#include "core/cuda/stream_kernels.hpp"
#endif

namespace holmes {

#if defined(HOLMES_HAVE_CUDA)

CudaStreamPoint::CudaStreamPoint(void* stream) {
  require_cuda_device("ordering a call on a CUDA stream");
  cudaEvent_t event = nullptr;
  cuda::check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
              "creating the event that marks a call on its stream");
  const cudaError_t error = cudaEventRecord(event, static_cast<cudaStream_t>(stream));
  if (error != cudaSuccess) {
    cudaEventDestroy(event);
    cuda::fail_cuda(error, "marking a call on its stream (is the stream on the current device?)");
  }
  event_ = event;
}

CudaStreamPoint::~CudaStreamPoint() {
  cudaEventDestroy(static_cast<cudaEvent_t>(event_));
  cudaGetLastError();
}

bool CudaStreamPoint::reached() const {
  const cudaError_t state = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (state == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  cuda::check(state, "waiting for the work enqueued on the stream before the call");
  return true;
}

CudaStreamGate::CudaStreamGate() {
  require_cuda_device("holding a CUDA stream for a call");
  void* word = nullptr;
  cuda::check(
      cudaHostAlloc(&word, sizeof(std::uint32_t), cudaHostAllocMapped | cudaHostAllocPortable),
      "allocating the ticket streams wait on");
  word_ = static_cast<std::uint32_t*>(word);
  std::atomic_ref<std::uint32_t>(*word_).store(0, std::memory_order_release);
}

CudaStreamGate::~CudaStreamGate() {
  cudaFreeHost(word_);
  cudaGetLastError();
}

void CudaStreamGate::hold(void* stream, std::uint32_t ticket) {
  void* device_word = nullptr;
  cuda::check(cudaHostGetDevicePointer(&device_word, word_, 0),
              "mapping the ticket streams wait on");
  const auto s = static_cast<cudaStream_t>(stream);
  if (cuda::stream_wait_geq(s, device_word, ticket)) return;
  // No stream memory operations: a one-thread kernel that sleeps between reads of the ticket.
  cuda::check(
      device_ops::launch_wait_ticket(static_cast<const std::uint32_t*>(device_word), ticket, s),
      "enqueueing the wait for a call on its stream");
}

void CudaStreamGate::open(std::uint32_t ticket) {
  std::atomic_ref<std::uint32_t>(*word_).store(ticket, std::memory_order_release);
}

#else

CudaStreamPoint::CudaStreamPoint(void* stream) {
  (void)stream;
  require_cuda_device("ordering a call on a CUDA stream");
}
CudaStreamPoint::~CudaStreamPoint() = default;
bool CudaStreamPoint::reached() const { return true; }

CudaStreamGate::CudaStreamGate() { require_cuda_device("holding a CUDA stream for a call"); }
CudaStreamGate::~CudaStreamGate() = default;
void CudaStreamGate::hold(void* stream, std::uint32_t ticket) {
  (void)stream;
  (void)ticket;
}
void CudaStreamGate::open(std::uint32_t ticket) { (void)ticket; }

#endif

}  // namespace holmes
