#include "core/cuda/stream_kernels.hpp"

namespace holmes::device_ops {
namespace {

__global__ void wait_ticket(const volatile std::uint32_t* ticket, std::uint32_t value) {
  // Cyclic comparison, as CU_STREAM_WAIT_VALUE_GEQ: the tickets may wrap.
  while (static_cast<std::int32_t>(*ticket - value) < 0) __nanosleep(4000);
}

}  // namespace

cudaError_t launch_wait_ticket(const std::uint32_t* ticket, std::uint32_t value,
                               cudaStream_t stream) {
  wait_ticket<<<1, 1, 0, stream>>>(ticket, value);
  return cudaGetLastError();
}

}  // namespace holmes::device_ops
