// The AVX2 + F16C reduction kernels (reduce_avx2.cpp), bitwise equal to the portable kernels of
// reduce.cpp for every input. Internal to reduce.cpp's dispatch: their code needs AVX2 and F16C,
// so nothing may call them unless reduce_isa_supported(ReduceIsa::kAvx2); dtype and op must
// already be validated. Built on x86-64 only (HOLMES_HAVE_AVX2_KERNELS).
#pragma once

#include <holmes/holmes.h>

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__)
#define HOLMES_HAVE_AVX2_KERNELS 1
#else
#define HOLMES_HAVE_AVX2_KERNELS 0
#endif

#if HOLMES_HAVE_AVX2_KERNELS
namespace holmes::avx2 {

void reduce(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
            std::size_t count);

// The float dtypes only (float16, bfloat16, float32, float64); integers are the caller's.
void finalize_average(hm_dtype_t dtype, void* data, std::size_t count, int nranks);

void half_to_float(const std::uint16_t* in, float* out, std::size_t count);
void float_to_half(const float* in, std::uint16_t* out, std::size_t count);
void bfloat16_to_float(const std::uint16_t* in, float* out, std::size_t count);
void float_to_bfloat16(const float* in, std::uint16_t* out, std::size_t count);

}  // namespace holmes::avx2
#endif
