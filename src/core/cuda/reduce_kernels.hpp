// Launching the reduction kernels (reduce_kernels.cu). Only in builds with CUDA; the rest of the
// library calls device_reduce() and device_finalize_average() (device_ops.hpp), which validate
// the arguments, pick the device and stream, and wait for the result.
#pragma once

#include <cuda_runtime_api.h>
#include <holmes/holmes.h>

#include <cstddef>

namespace holmes::device_ops {

// Enqueues dst[i] = a[i] op b[i] (AVG as SUM) on `stream` with at most `max_blocks` blocks.
// The caller has checked dtype, op, and that every pointer is device-accessible and aligned to
// the element size. Returns the launch error, if any.
cudaError_t launch_reduce(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
                          std::size_t count, int max_blocks, cudaStream_t stream);

// Enqueues dst[i] = in[0][i] op in[1][i] op ... in[n-1][i] (AVG as SUM) in that order, with the
// bits of n - 1 launch_reduce calls (dst = in0 op in1, then dst = dst op in2, ...) but each
// input read once: one kernel per kMaxReduceInputs inputs (element_ops.hpp). n >= 1; dst may
// equal in[0] only. The caller has checked the arguments as for launch_reduce.
cudaError_t launch_reduce_many(hm_dtype_t dtype, hm_op_t op, void* dst, const void* const* inputs,
                               std::size_t n, std::size_t count, int max_blocks,
                               cudaStream_t stream);

// Enqueues data[i] /= nranks with the semantics of finalize_average(); nranks > 0.
cudaError_t launch_divide(hm_dtype_t dtype, void* data, std::size_t count, int nranks,
                          int max_blocks, cudaStream_t stream);

}  // namespace holmes::device_ops
