// Element-wise operations of the CUDA reduction kernels, written once for the device and the
// host: the kernels (reduce_kernels.cu) run them on the GPU, and tests/cuda run the very same
// code on the CPU against holmes::reduce(), so that their bitwise agreement with the CPU kernels
// of src/core/reduce.cpp is checked on machines without a GPU too.
//
// Agreement has to be bitwise because ranks that reduce on different devices (a GPU on one
// rank, the CPU on another) must end with identical results. Integer and non-NaN float results
// follow from IEEE arithmetic: the GPU adds, multiplies and divides float32/float64 with
// round-to-nearest-even and keeps subnormals (no fast-math, no flush-to-zero), like the CPU.
// NaNs need care: a GPU returns a canonical NaN from arithmetic on NaNs, while x86-64 SSE returns
// the first source operand's NaN (quieted), or the "default NaN" 0xffc00000 for an invalid
// operation such as inf - inf. The float operations below reproduce the x86 result, with the
// operand order that GCC emits for reduce.cpp (b + a: b's NaN wins); the test
// cuda.ElementOps.* checks this against the library's real CPU kernel, so a compiler that orders
// them differently is caught. Half-precision conversions repeat dtype.hpp bit for bit (CUDA's
// __half/__nv_bfloat16 conversions canonicalise NaN payloads, so they are not used).
#pragma once

#include <holmes/holmes.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#if defined(__CUDACC__)
#define HOLMES_HD __host__ __device__ __forceinline__
#else
#define HOLMES_HD inline
#endif
#if defined(__CUDA_ARCH__)
#define HOLMES_UNROLL _Pragma("unroll")
#elif defined(__CUDACC__)
#define HOLMES_UNROLL  // nvcc's host pass: the loops only run on the device
#else
#define HOLMES_UNROLL _Pragma("GCC unroll 16")
#endif

namespace holmes::device_ops {

// ---- bit patterns ---------------------------------------------------------------------------

HOLMES_HD std::uint32_t bits_of(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

HOLMES_HD float float_from_bits(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

HOLMES_HD std::uint64_t bits_of(double value) {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint64_t>(__double_as_longlong(value));
#else
  std::uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

HOLMES_HD double double_from_bits(std::uint64_t bits) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(bits));
#else
  double value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

// ---- x86-64 NaN results ---------------------------------------------------------------------

HOLMES_HD bool is_nan(float value) { return (bits_of(value) & 0x7fffffffu) > 0x7f800000u; }
HOLMES_HD bool is_nan(double value) {
  return (bits_of(value) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
}

// The NaN x86 SSE returns when an operation on (first, second) has a NaN result.
HOLMES_HD float x86_nan_result(float first, float second) {
  if (is_nan(first)) return float_from_bits(bits_of(first) | 0x00400000u);  // quieted
  if (is_nan(second)) return float_from_bits(bits_of(second) | 0x00400000u);
  return float_from_bits(0xffc00000u);  // default NaN of an invalid operation
}
HOLMES_HD double x86_nan_result(double first, double second) {
  if (is_nan(first)) return double_from_bits(bits_of(first) | 0x0008000000000000ull);
  if (is_nan(second)) return double_from_bits(bits_of(second) | 0x0008000000000000ull);
  return double_from_bits(0xfff8000000000000ull);
}

// ---- the four operations ---------------------------------------------------------------------

// Integers add and multiply in their unsigned type (at least unsigned int) so that overflow
// wraps, as in reduce.cpp; floats fix up NaN results as described at the top.
template <typename T>
struct Sum {
  HOLMES_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      const T r = a + b;
      return is_nan(r) ? x86_nan_result(b, a) : r;
    }
  }
};

template <typename T>
struct Prod {
  HOLMES_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      using U =
          std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      const T r = a * b;
      return is_nan(r) ? x86_nan_result(b, a) : r;
    }
  }
};

// Comparisons select one operand unchanged, so NaN and signed-zero cases agree as written.
template <typename T>
struct Min {
  HOLMES_HD T operator()(T a, T b) const { return b < a ? b : a; }
};

template <typename T>
struct Max {
  HOLMES_HD T operator()(T a, T b) const { return a < b ? b : a; }
};

// ---- float16 and bfloat16 (copies of dtype.hpp's conversions) -------------------------------

HOLMES_HD float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;  // exact
    return float_from_bits(bits_of(magnitude) | sign);
  }
  if (exponent == 31) return float_from_bits(sign | 0x7f800000u | (mantissa << 13));
  return float_from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

HOLMES_HD std::uint16_t float_to_half(float value) {
  const std::uint32_t bits = bits_of(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  const int exponent = static_cast<int>(magnitude >> 23) - 127;
  if (exponent > 15) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (magnitude <= 0x33000000u) return sign;
  const std::uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  const int dropped = exponent >= -14 ? 13 : 13 + (-14 - exponent);
  std::uint32_t kept = significand >> dropped;
  const std::uint32_t remainder = significand & ((1u << dropped) - 1);
  const std::uint32_t halfway = 1u << (dropped - 1);
  if (remainder > halfway || (remainder == halfway && (kept & 1u))) ++kept;
  if (exponent >= -14) {
    const auto biased = static_cast<std::uint32_t>(exponent + 15);
    return static_cast<std::uint16_t>(sign | (((biased - 1) << 10) + kept));
  }
  return static_cast<std::uint16_t>(sign | kept);
}

HOLMES_HD float bfloat16_to_float(std::uint16_t b) {
  return float_from_bits(static_cast<std::uint32_t>(b) << 16);
}

HOLMES_HD std::uint16_t float_to_bfloat16(float value) {
  const std::uint32_t bits = bits_of(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

// Selects the conversions of one half-precision format.
struct Float16Format {
  static HOLMES_HD float widen(std::uint16_t h) { return half_to_float(h); }
  static HOLMES_HD std::uint16_t narrow(float f) { return float_to_half(f); }
};
struct Bfloat16Format {
  static HOLMES_HD float widen(std::uint16_t h) { return bfloat16_to_float(h); }
  static HOLMES_HD std::uint16_t narrow(float f) { return float_to_bfloat16(f); }
};

// A float32 operation on half-precision storage: widen both, compute, round once.
template <typename Format, template <typename> class Op>
struct HalfOp {
  HOLMES_HD std::uint16_t operator()(std::uint16_t a, std::uint16_t b) const {
    return Format::narrow(Op<float>{}(Format::widen(a), Format::widen(b)));
  }
};

// ---- averaging -------------------------------------------------------------------------------

// x / nranks as reduce.cpp's divide_typed: floats in their own precision; integers truncating
// toward zero in a type that holds nranks. reduce.cpp divides every integer in 64 bits; types
// of up to 32 bits divide in 32 bits here, with the same quotient (x and a positive int nranks
// both fit, and truncation is exact in either width) for a fraction of the cost on a GPU.
template <typename T>
struct DivideBy {
  using Wide = std::conditional_t<
      std::is_floating_point_v<T>, T,
      std::conditional_t<(sizeof(T) <= 4),
                         std::conditional_t<std::is_signed_v<T>, std::int32_t, std::uint32_t>,
                         std::conditional_t<std::is_signed_v<T>, std::int64_t, std::uint64_t>>>;
  Wide divisor;
  HOLMES_HD T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      const T r = x / divisor;
      return is_nan(r) ? x86_nan_result(x, divisor) : r;
    } else {
      return static_cast<T>(static_cast<Wide>(x) / divisor);
    }
  }
};

template <typename Format>
struct HalfDivideBy {
  float divisor;
  HOLMES_HD std::uint16_t operator()(std::uint16_t x) const {
    return Format::narrow(DivideBy<float>{divisor}(Format::widen(x)));
  }
};

// ---- choosing the operation --------------------------------------------------------------

// Calls typed(T{}) for a dtype stored and computed as T, or half(Format{}) for float16 and
// bfloat16 (stored as 16 bits, computed in float32), and returns what it returns; `unknown` for a
// dtype it does not know.
template <typename R, typename Typed, typename Half>
R with_dtype(hm_dtype_t dtype, R unknown, Typed&& typed, Half&& half) {
  switch (dtype) {
    case HM_INT8:
      return typed(std::int8_t{});
    case HM_UINT8:
      return typed(std::uint8_t{});
    case HM_INT32:
      return typed(std::int32_t{});
    case HM_UINT32:
      return typed(std::uint32_t{});
    case HM_INT64:
      return typed(std::int64_t{});
    case HM_UINT64:
      return typed(std::uint64_t{});
    case HM_FLOAT16:
      return half(Float16Format{});
    case HM_BFLOAT16:
      return half(Bfloat16Format{});
    case HM_FLOAT32:
      return typed(float{});
    case HM_FLOAT64:
      return typed(double{});
    default:
      return unknown;
  }
}

// Calls f(T{}, element_op) with the storage type and element operation the kernels use for
// dtype x op (AVG reduces as SUM) and returns what f returns; `unknown` for a dtype or op it does
// not know. The kernels' launchers and the CPU tests of this file choose through it alike.
template <typename R, typename F>
R with_element_op(hm_dtype_t dtype, hm_op_t op, R unknown, F&& f) {
  const auto typed = [&](auto tag) -> R {
    using T = decltype(tag);
    switch (op) {
      case HM_SUM:
      case HM_AVG:
        return f(T{}, Sum<T>{});
      case HM_PROD:
        return f(T{}, Prod<T>{});
      case HM_MIN:
        return f(T{}, Min<T>{});
      case HM_MAX:
        return f(T{}, Max<T>{});
      default:
        return unknown;
    }
  };
  const auto half = [&](auto format) -> R {
    using Format = decltype(format);
    using H = std::uint16_t;
    switch (op) {
      case HM_SUM:
      case HM_AVG:
        return f(H{}, HalfOp<Format, Sum>{});
      case HM_PROD:
        return f(H{}, HalfOp<Format, Prod>{});
      case HM_MIN:
        return f(H{}, HalfOp<Format, Min>{});
      case HM_MAX:
        return f(H{}, HalfOp<Format, Max>{});
      default:
        return unknown;
    }
  };
  return with_dtype(dtype, unknown, typed, half);
}

// The same for the average's division by `nranks`: f(T{}, element_op) with DivideBy or
// HalfDivideBy.
template <typename R, typename F>
R with_divide_op(hm_dtype_t dtype, int nranks, R unknown, F&& f) {
  return with_dtype(
      dtype, unknown,
      [&](auto tag) -> R {
        using T = decltype(tag);
        return f(T{}, DivideBy<T>{static_cast<typename DivideBy<T>::Wide>(nranks)});
      },
      [&](auto format) -> R {
        using Format = decltype(format);
        return f(std::uint16_t{}, HalfDivideBy<Format>{static_cast<float>(nranks)});
      });
}

// ---- splitting a range between threads -------------------------------------------------------

// Elements [0, head) and [head + vectors * kPerPack, count) are handled one at a time, the rest
// 16 bytes at a time (vectors of packs), when all pointers share their alignment modulo 16.
struct Split {
  std::size_t head = 0;
  std::size_t vectors = 0;
  std::size_t count = 0;
};

inline constexpr std::size_t kPackBytes = 16;

template <typename T>
struct alignas(kPackBytes) Pack {
  static constexpr std::size_t kSize = kPackBytes / sizeof(T);
  T v[kSize];
};

// `pointers` (at least one) are the element pointers of one operation; each is aligned to
// sizeof(T).
template <typename T>
Split split_range(std::size_t count, const void* const* pointers, std::size_t n) {
  Split split;
  split.count = count;
  const auto misalignment = reinterpret_cast<std::uintptr_t>(pointers[0]) % kPackBytes;
  for (std::size_t i = 0; i < n; ++i) {
    if (reinterpret_cast<std::uintptr_t>(pointers[i]) % kPackBytes != misalignment) {
      split.head = count;  // no common alignment: everything element by element
      return split;
    }
  }
  const std::size_t to_aligned = ((kPackBytes - misalignment) % kPackBytes) / sizeof(T);
  split.head = to_aligned < count ? to_aligned : count;
  split.vectors = (count - split.head) / Pack<T>::kSize;
  return split;
}
template <typename T>
Split split_range(std::size_t count, std::initializer_list<const void*> pointers) {
  return split_range<T>(count, pointers.begin(), pointers.size());
}

template <typename T>
HOLMES_HD Pack<T> load_pack(const T* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const Pack<T>*>(p);
#else
  Pack<T> pack;
  std::memcpy(&pack, p, sizeof pack);
  return pack;
#endif
}

template <typename T>
HOLMES_HD void store_pack(T* p, const Pack<T>& pack) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<Pack<T>*>(p) = pack;
#else
  std::memcpy(p, &pack, sizeof pack);
#endif
}

// Maps the i-th element handled one at a time to its index.
HOLMES_HD std::size_t scalar_index(const Split& split, std::size_t i, std::size_t vector_end) {
  return i < split.head ? i : vector_end + (i - split.head);
}

// dst[i] = op(a[i], b[i]) for this thread's share of the range (thread `thread` of `threads`,
// grid-stride). dst may equal a or b: each element is read before it is written.
template <typename T, typename Op>
HOLMES_HD void binary_range(T* dst, const T* a, const T* b, const Split& split, Op op,
                            std::size_t thread, std::size_t threads) {
  constexpr std::size_t kPer = Pack<T>::kSize;
  const std::size_t vector_end = split.head + split.vectors * kPer;
  for (std::size_t v = thread; v < split.vectors; v += threads) {
    const std::size_t at = split.head + v * kPer;
    const Pack<T> pa = load_pack(a + at);
    const Pack<T> pb = load_pack(b + at);
    Pack<T> out;
    HOLMES_UNROLL
    for (std::size_t k = 0; k < kPer; ++k) out.v[k] = op(pa.v[k], pb.v[k]);
    store_pack(dst + at, out);
  }
  const std::size_t scalars = split.count - split.vectors * kPer;
  for (std::size_t i = thread; i < scalars; i += threads) {
    const std::size_t at = scalar_index(split, i, vector_end);
    dst[at] = op(a[at], b[at]);
  }
}

// The inputs of one n-way reduction, by value (a kernel's parameter): at most kMaxReduceInputs;
// more take several passes, each after the first starting from its result.
inline constexpr int kMaxReduceInputs = 8;
template <typename T>
struct ReduceInputs {
  const T* at[kMaxReduceInputs];
  int count;
};

// dst[i] = op(...op(op(in[0][i], in[1][i]), in[2][i])..., in[n-1][i]) for this thread's share of
// the range: in the inputs' order, each op's result held as T, so the bits are those of n - 1
// binary_range passes (dst = in0 op in1, then dst = dst op in2, ...) while each input is read
// once and dst written once. dst may equal in[0]; n >= 1.
template <typename T, typename Op>
HOLMES_HD void many_range(T* dst, const ReduceInputs<T>& in, const Split& split, Op op,
                          std::size_t thread, std::size_t threads) {
  constexpr std::size_t kPer = Pack<T>::kSize;
  const std::size_t vector_end = split.head + split.vectors * kPer;
  for (std::size_t v = thread; v < split.vectors; v += threads) {
    const std::size_t at = split.head + v * kPer;
    Pack<T> acc = load_pack(in.at[0] + at);
    for (int j = 1; j < in.count; ++j) {
      const Pack<T> next = load_pack(in.at[j] + at);
      HOLMES_UNROLL
      for (std::size_t k = 0; k < kPer; ++k) acc.v[k] = op(acc.v[k], next.v[k]);
    }
    store_pack(dst + at, acc);
  }
  const std::size_t scalars = split.count - split.vectors * kPer;
  for (std::size_t i = thread; i < scalars; i += threads) {
    const std::size_t at = scalar_index(split, i, vector_end);
    T acc = in.at[0][at];
    for (int j = 1; j < in.count; ++j) acc = op(acc, in.at[j][at]);
    dst[at] = acc;
  }
}

// The passes of an n-way reduction of `n` >= 1 inputs into dst: the first over up to
// kMaxReduceInputs inputs, each later one over dst and up to kMaxReduceInputs - 1 more inputs,
// so that the order stays in[0], in[1], ... Calls pass(const void* const* inputs, int count)
// for each, in order.
template <typename Pass>
void reduce_passes(const void* dst, const void* const* inputs, std::size_t n, Pass&& pass) {
  std::size_t next = n < static_cast<std::size_t>(kMaxReduceInputs) ? n : kMaxReduceInputs;
  pass(inputs, static_cast<int>(next));
  while (next < n) {
    const void* group[kMaxReduceInputs];
    group[0] = dst;
    int k = 1;
    while (k < kMaxReduceInputs && next < n) group[k++] = inputs[next++];
    pass(static_cast<const void* const*>(group), k);
  }
}

// data[i] = op(data[i]) for this thread's share of the range.
template <typename T, typename Op>
HOLMES_HD void unary_range(T* data, const Split& split, Op op, std::size_t thread,
                           std::size_t threads) {
  constexpr std::size_t kPer = Pack<T>::kSize;
  const std::size_t vector_end = split.head + split.vectors * kPer;
  for (std::size_t v = thread; v < split.vectors; v += threads) {
    const std::size_t at = split.head + v * kPer;
    Pack<T> pack = load_pack(data + at);
    HOLMES_UNROLL
    for (std::size_t k = 0; k < kPer; ++k) pack.v[k] = op(pack.v[k]);
    store_pack(data + at, pack);
  }
  const std::size_t scalars = split.count - split.vectors * kPer;
  for (std::size_t i = thread; i < scalars; i += threads) {
    const std::size_t at = scalar_index(split, i, vector_end);
    data[at] = op(data[at]);
  }
}

}  // namespace holmes::device_ops
