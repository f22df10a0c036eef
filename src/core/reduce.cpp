#include "core/reduce.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

#include "core/dtype.hpp"
#include "core/reduce_avx2.hpp"
#include "core/status.hpp"

namespace holmes {
namespace {

// Integers add and multiply in their unsigned type so that overflow wraps instead of being
// undefined behaviour.
template <typename T>
struct Sum {
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};
template <typename T>
struct Prod {
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      // Promote to at least unsigned int: uint8 * uint8 would otherwise promote to signed int.
      using U =
          std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};
template <typename T>
struct Min {
  T operator()(T a, T b) const { return b < a ? b : a; }
};
template <typename T>
struct Max {
  T operator()(T a, T b) const { return a < b ? b : a; }
};

template <typename T, typename Op>
void apply(T* dst, const T* a, const T* b, std::size_t count, Op op) {
  for (std::size_t i = 0; i < count; ++i) dst[i] = op(a[i], b[i]);
}

template <typename T>
void reduce_typed(hm_op_t op, T* dst, const T* a, const T* b, std::size_t count) {
  switch (op) {
    case HM_SUM:
    case HM_AVG:
      return apply(dst, a, b, count, Sum<T>{});
    case HM_PROD:
      return apply(dst, a, b, count, Prod<T>{});
    case HM_MIN:
      return apply(dst, a, b, count, Min<T>{});
    case HM_MAX:
      return apply(dst, a, b, count, Max<T>{});
    default:
      fail(HM_ERR_INVALID_ARGUMENT, "unknown reduction op {}", static_cast<int>(op));
  }
}

// Half-precision types: widen a block to float32, reduce, narrow with one rounding.
template <float (*Widen)(std::uint16_t), std::uint16_t (*Narrow)(float)>
void reduce_half(hm_op_t op, std::uint16_t* dst, const std::uint16_t* a, const std::uint16_t* b,
                 std::size_t count) {
  constexpr std::size_t kBlock = 256;
  std::array<float, kBlock> fa;
  std::array<float, kBlock> fb;
  for (std::size_t start = 0; start < count; start += kBlock) {
    const std::size_t n = std::min(kBlock, count - start);
    for (std::size_t i = 0; i < n; ++i) {
      fa[i] = Widen(a[start + i]);
      fb[i] = Widen(b[start + i]);
    }
    reduce_typed<float>(op, fa.data(), fa.data(), fb.data(), n);
    for (std::size_t i = 0; i < n; ++i) dst[start + i] = Narrow(fa[i]);
  }
}

template <typename T>
void divide_typed(T* data, std::size_t count, int nranks) {
  // Divide in a type wide enough to hold nranks (int8 cannot hold 200 ranks).
  using Wide =
      std::conditional_t<std::is_floating_point_v<T>, T,
                         std::conditional_t<std::is_signed_v<T>, std::int64_t, std::uint64_t>>;
  const auto divisor = static_cast<Wide>(nranks);
  for (std::size_t i = 0; i < count; ++i) {
    data[i] = static_cast<T>(static_cast<Wide>(data[i]) / divisor);
  }
}

template <float (*Widen)(std::uint16_t), std::uint16_t (*Narrow)(float)>
void divide_half(std::uint16_t* data, std::size_t count, int nranks) {
  const auto divisor = static_cast<float>(nranks);
  for (std::size_t i = 0; i < count; ++i) data[i] = Narrow(Widen(data[i]) / divisor);
}

// The portable kernels: they define the results every other instruction set reproduces.
void reduce_portable(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
                     std::size_t count) {
  switch (dtype) {
    case HM_INT8:
      return reduce_typed(op, static_cast<std::int8_t*>(dst), static_cast<const std::int8_t*>(a),
                          static_cast<const std::int8_t*>(b), count);
    case HM_UINT8:
      return reduce_typed(op, static_cast<std::uint8_t*>(dst), static_cast<const std::uint8_t*>(a),
                          static_cast<const std::uint8_t*>(b), count);
    case HM_INT32:
      return reduce_typed(op, static_cast<std::int32_t*>(dst), static_cast<const std::int32_t*>(a),
                          static_cast<const std::int32_t*>(b), count);
    case HM_UINT32:
      return reduce_typed(op, static_cast<std::uint32_t*>(dst),
                          static_cast<const std::uint32_t*>(a),
                          static_cast<const std::uint32_t*>(b), count);
    case HM_INT64:
      return reduce_typed(op, static_cast<std::int64_t*>(dst), static_cast<const std::int64_t*>(a),
                          static_cast<const std::int64_t*>(b), count);
    case HM_UINT64:
      return reduce_typed(op, static_cast<std::uint64_t*>(dst),
                          static_cast<const std::uint64_t*>(a),
                          static_cast<const std::uint64_t*>(b), count);
    case HM_FLOAT16:
      return reduce_half<half_to_float, float_to_half>(op, static_cast<std::uint16_t*>(dst),
                                                       static_cast<const std::uint16_t*>(a),
                                                       static_cast<const std::uint16_t*>(b), count);
    case HM_BFLOAT16:
      return reduce_half<bfloat16_to_float, float_to_bfloat16>(
          op, static_cast<std::uint16_t*>(dst), static_cast<const std::uint16_t*>(a),
          static_cast<const std::uint16_t*>(b), count);
    case HM_FLOAT32:
      return reduce_typed(op, static_cast<float*>(dst), static_cast<const float*>(a),
                          static_cast<const float*>(b), count);
    case HM_FLOAT64:
      return reduce_typed(op, static_cast<double*>(dst), static_cast<const double*>(a),
                          static_cast<const double*>(b), count);
    default:
      fail(HM_ERR_INVALID_ARGUMENT, "unknown dtype {}", static_cast<int>(dtype));
  }
}

void finalize_average_portable(hm_dtype_t dtype, void* data, std::size_t count, int nranks) {
  switch (dtype) {
    case HM_INT8:
      return divide_typed(static_cast<std::int8_t*>(data), count, nranks);
    case HM_UINT8:
      return divide_typed(static_cast<std::uint8_t*>(data), count, nranks);
    case HM_INT32:
      return divide_typed(static_cast<std::int32_t*>(data), count, nranks);
    case HM_UINT32:
      return divide_typed(static_cast<std::uint32_t*>(data), count, nranks);
    case HM_INT64:
      return divide_typed(static_cast<std::int64_t*>(data), count, nranks);
    case HM_UINT64:
      return divide_typed(static_cast<std::uint64_t*>(data), count, nranks);
    case HM_FLOAT16:
      return divide_half<half_to_float, float_to_half>(static_cast<std::uint16_t*>(data), count,
                                                       nranks);
    case HM_BFLOAT16:
      return divide_half<bfloat16_to_float, float_to_bfloat16>(static_cast<std::uint16_t*>(data),
                                                               count, nranks);
    case HM_FLOAT32:
      return divide_typed(static_cast<float*>(data), count, nranks);
    case HM_FLOAT64:
      return divide_typed(static_cast<double*>(data), count, nranks);
    default:
      fail(HM_ERR_INVALID_ARGUMENT, "unknown dtype {}", static_cast<int>(dtype));
  }
}

void require_runnable(ReduceIsa isa) {
  if (!reduce_isa_supported(isa)) {
    fail(HM_ERR_UNSUPPORTED, "this CPU cannot run the {} reduction kernels", reduce_isa_name(isa));
  }
}

// Checked up front so that every dtype refuses a bad op, even with nothing to reduce.
void validate(hm_dtype_t dtype, hm_op_t op) {
  require(op_valid(op), "unknown reduction op {}", static_cast<int>(op));
  require(dtype_valid(dtype), "unknown dtype {}", static_cast<int>(dtype));
}

void reduce_on(ReduceIsa isa, hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
               std::size_t count) {
  validate(dtype, op);
#if HOLMES_HAVE_AVX2_KERNELS
  if (isa == ReduceIsa::kAvx2) return avx2::reduce(dtype, op, dst, a, b, count);
#endif
  reduce_portable(dtype, op, dst, a, b, count);
}

bool is_half(hm_dtype_t dtype) { return dtype == HM_FLOAT16 || dtype == HM_BFLOAT16; }
bool is_float(hm_dtype_t dtype) {
  return is_half(dtype) || dtype == HM_FLOAT32 || dtype == HM_FLOAT64;
}

void finalize_average_on(ReduceIsa isa, hm_dtype_t dtype, void* data, std::size_t count,
                         int nranks) {
  require(nranks > 0, "average over {} ranks", nranks);
  require(dtype_valid(dtype), "unknown dtype {}", static_cast<int>(dtype));
#if HOLMES_HAVE_AVX2_KERNELS
  // Integer division has no vector instruction; integers always take the portable loop.
  if (isa == ReduceIsa::kAvx2 && is_float(dtype)) {
    return avx2::finalize_average(dtype, data, count, nranks);
  }
#endif
  finalize_average_portable(dtype, data, count, nranks);
}

}  // namespace

void reduce(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
            std::size_t count) {
  reduce_on(reduce_isa(), dtype, op, dst, a, b, count);
}

void finalize_average(hm_dtype_t dtype, void* data, std::size_t count, int nranks) {
  finalize_average_on(reduce_isa(), dtype, data, count, nranks);
}

void reduce(ReduceIsa isa, hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
            std::size_t count) {
  require_runnable(isa);
  reduce_on(isa, dtype, op, dst, a, b, count);
}

void finalize_average(ReduceIsa isa, hm_dtype_t dtype, void* data, std::size_t count, int nranks) {
  require_runnable(isa);
  finalize_average_on(isa, dtype, data, count, nranks);
}

void widen_to_float(ReduceIsa isa, hm_dtype_t dtype, std::span<const std::uint16_t> in,
                    std::span<float> out) {
  require_runnable(isa);
  require(is_half(dtype), "{} is not a half-precision dtype", dtype_name(dtype));
  require(in.size() == out.size(), "converting {} elements into {}", in.size(), out.size());
  const bool bf16 = dtype == HM_BFLOAT16;
#if HOLMES_HAVE_AVX2_KERNELS
  if (isa == ReduceIsa::kAvx2) {
    return bf16 ? avx2::bfloat16_to_float(in.data(), out.data(), in.size())
                : avx2::half_to_float(in.data(), out.data(), in.size());
  }
#endif
  for (std::size_t i = 0; i < in.size(); ++i) {
    out[i] = bf16 ? bfloat16_to_float(in[i]) : half_to_float(in[i]);
  }
}

void narrow_from_float(ReduceIsa isa, hm_dtype_t dtype, std::span<const float> in,
                       std::span<std::uint16_t> out) {
  require_runnable(isa);
  require(is_half(dtype), "{} is not a half-precision dtype", dtype_name(dtype));
  require(in.size() == out.size(), "converting {} elements into {}", in.size(), out.size());
  const bool bf16 = dtype == HM_BFLOAT16;
#if HOLMES_HAVE_AVX2_KERNELS
  if (isa == ReduceIsa::kAvx2) {
    return bf16 ? avx2::float_to_bfloat16(in.data(), out.data(), in.size())
                : avx2::float_to_half(in.data(), out.data(), in.size());
  }
#endif
  for (std::size_t i = 0; i < in.size(); ++i) {
    out[i] = bf16 ? float_to_bfloat16(in[i]) : float_to_half(in[i]);
  }
}

}  // namespace holmes
