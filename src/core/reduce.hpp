// Element-wise reduction kernels. Collectives call reduce() on every received chunk; AVG is a
// SUM during the collective and finalize_average() divides once at the end, so every rank can
// end with bitwise identical results.
#pragma once

#include <holmes/holmes.h>

#include <cstddef>

namespace holmes {

// dst[i] = a[i] op b[i] for i < count. dst may be the same pointer as a or b (not a partial
// overlap). AVG reduces as SUM. Integer SUM and PROD wrap around; float16 and bfloat16 are
// computed in float32 and rounded to nearest even once per element and step.
void reduce(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
            std::size_t count);

// data[i] /= nranks: float types divide in their compute precision and round once; integer
// types truncate toward zero.
void finalize_average(hm_dtype_t dtype, void* data, std::size_t count, int nranks);

}  // namespace holmes
