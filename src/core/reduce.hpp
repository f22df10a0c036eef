// Element-wise reduction kernels. Collectives call reduce() on every received chunk; AVG is a
// SUM during the collective and finalize_average() divides once at the end, so every rank can
// end with bitwise identical results.
//
// The kernels exist once in portable C++ (reduce.cpp), which defines the results, and once per
// vector instruction set (reduce_avx2.cpp), which reproduces them bitwise for every input, NaN
// payloads included; reduce_isa.hpp says which one runs (HOLMES_REDUCE_ISA).
#pragma once

#include <holmes/holmes.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/reduce_isa.hpp"

namespace holmes {

// dst[i] = a[i] op b[i] for i < count. dst may be the same pointer as a or b (not a partial
// overlap). AVG reduces as SUM. Integer SUM and PROD wrap around; float16 and bfloat16 are
// computed in float32 and rounded to nearest even once per element and step.
void reduce(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
            std::size_t count);

// data[i] /= nranks: float types divide in their compute precision and round once; integer
// types truncate toward zero.
void finalize_average(hm_dtype_t dtype, void* data, std::size_t count, int nranks);

// The same on a given instruction set (tests and benchmarks compare them); HM_ERR_UNSUPPORTED
// when this CPU cannot run it. The functions above use reduce_isa().
void reduce(ReduceIsa isa, hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
            std::size_t count);
void finalize_average(ReduceIsa isa, hm_dtype_t dtype, void* data, std::size_t count, int nranks);

// Bulk conversions between float16 or bfloat16 (`dtype`) and float32, element by element
// bitwise equal to half_to_float(), float_to_half(), bfloat16_to_float() and float_to_bfloat16()
// on every instruction set. `in` and `out` have the same length and do not overlap.
void widen_to_float(ReduceIsa isa, hm_dtype_t dtype, std::span<const std::uint16_t> in,
                    std::span<float> out);
void narrow_from_float(ReduceIsa isa, hm_dtype_t dtype, std::span<const float> in,
                       std::span<std::uint16_t> out);

}  // namespace holmes
