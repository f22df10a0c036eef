// The reduction kernels: one grid-stride kernel per (element type, operation), moving 16 bytes
// per load where the pointers allow. The arithmetic lives in element_ops.hpp, shared with the
// host-side tests that hold it to the CPU kernels bit for bit.
#include "core/cuda/reduce_kernels.hpp"

#include <algorithm>
#include <cstdint>

#include "core/cuda/element_ops.hpp"

namespace holmes::device_ops {
namespace {

constexpr int kThreadsPerBlock = 256;

__device__ __forceinline__ std::size_t global_thread() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::size_t global_threads() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

template <typename T, typename Op>
__global__ void __launch_bounds__(kThreadsPerBlock)
    binary_kernel(T* dst, const T* a, const T* b, Split split, Op op) {
  binary_range(dst, a, b, split, op, global_thread(), global_threads());
}

template <typename T, typename Op>
__global__ void __launch_bounds__(kThreadsPerBlock)
    many_kernel(T* dst, ReduceInputs<T> in, Split split, Op op) {
  many_range(dst, in, split, op, global_thread(), global_threads());
}

template <typename T, typename Op>
__global__ void __launch_bounds__(kThreadsPerBlock) unary_kernel(T* data, Split split, Op op) {
  unary_range(data, split, op, global_thread(), global_threads());
}

// Enough blocks for one unit of work per thread, at most max_blocks (a few per SM: the loop
// strides over the rest, which keeps the launch cheap for huge counts).
template <typename T>
int blocks_for(const Split& split, int max_blocks) {
  const std::size_t scalars = split.count - split.vectors * Pack<T>::kSize;
  const std::size_t work = std::max(split.vectors, scalars);
  const std::size_t wanted = (work + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<int>(std::clamp<std::size_t>(wanted, 1, static_cast<std::size_t>(max_blocks)));
}

template <typename T, typename Op>
cudaError_t launch_binary(void* dst, const void* a, const void* b, std::size_t count, Op op,
                          int max_blocks, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const Split split = split_range<T>(count, {dst, a, b});
  binary_kernel<T, Op><<<blocks_for<T>(split, max_blocks), kThreadsPerBlock, 0, stream>>>(
      static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), split, op);
  return cudaGetLastError();
}

template <typename T, typename Op>
cudaError_t launch_unary(void* data, std::size_t count, Op op, int max_blocks,
                         cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const Split split = split_range<T>(count, {data});
  unary_kernel<T, Op><<<blocks_for<T>(split, max_blocks), kThreadsPerBlock, 0, stream>>>(
      static_cast<T*>(data), split, op);
  return cudaGetLastError();
}

// The passes of an n-way reduction (reduce_passes), each one kernel reading its inputs once.
template <typename T, typename Op>
cudaError_t launch_many(void* dst, const void* const* inputs, std::size_t n, std::size_t count,
                        Op op, int max_blocks, cudaStream_t stream) {
  if (count == 0 || n == 0) return cudaSuccess;
  cudaError_t error = cudaSuccess;
  reduce_passes(dst, inputs, n, [&](const void* const* pass, int k) {
    if (error != cudaSuccess) return;
    ReduceInputs<T> in{};
    const void* pointers[kMaxReduceInputs + 1] = {dst};
    for (int j = 0; j < k; ++j) {
      in.at[j] = static_cast<const T*>(pass[j]);
      pointers[j + 1] = pass[j];
    }
    in.count = k;
    const Split split = split_range<T>(count, pointers, static_cast<std::size_t>(k) + 1);
    many_kernel<T, Op><<<blocks_for<T>(split, max_blocks), kThreadsPerBlock, 0, stream>>>(
        static_cast<T*>(dst), in, split, op);
    error = cudaGetLastError();
  });
  return error;
}

}  // namespace

cudaError_t launch_reduce(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
                          std::size_t count, int max_blocks, cudaStream_t stream) {
  return with_element_op(dtype, op, cudaErrorInvalidValue, [&](auto tag, auto element_op) {
    using T = decltype(tag);
    return launch_binary<T>(dst, a, b, count, element_op, max_blocks, stream);
  });
}

cudaError_t launch_reduce_many(hm_dtype_t dtype, hm_op_t op, void* dst, const void* const* inputs,
                               std::size_t n, std::size_t count, int max_blocks,
                               cudaStream_t stream) {
  return with_element_op(dtype, op, cudaErrorInvalidValue, [&](auto tag, auto element_op) {
    using T = decltype(tag);
    return launch_many<T>(dst, inputs, n, count, element_op, max_blocks, stream);
  });
}

cudaError_t launch_divide(hm_dtype_t dtype, void* data, std::size_t count, int nranks,
                          int max_blocks, cudaStream_t stream) {
  return with_divide_op(dtype, nranks, cudaErrorInvalidValue, [&](auto tag, auto element_op) {
    using T = decltype(tag);
    return launch_unary<T>(data, count, element_op, max_blocks, stream);
  });
}

}  // namespace holmes::device_ops
