// AVX2 + F16C versions of reduce.cpp's kernels, with bitwise the same results for every input:
//   - Integers: wrapping add and multiply and signed/unsigned compares, lane by lane, on GCC
//     vector types (the compiler picks the instructions; int8 and int64 products have none of
//     their own in AVX2 and are composed from wider or narrower ones, exactly).
//   - float32 and float64: the same IEEE operations lane by lane, no FMA and no reassociation.
//     Which NaN a sum or product returns is made explicit (zero_where_nan), since x86 returns
//     the NaN of whichever operand the compiler happens to place first.
//   - float16 and bfloat16: 8 lanes widened to float32, computed as above, rounded to nearest
//     even once. F16C's vcvtps2ph (round to nearest even) equals float_to_half() for all 2^32
//     floats, NaN payloads included (checked exhaustively once; tests/unit/test_dtype.cpp checks
//     every NaN and the rounding edges of every exponent on each build). vcvtph2ps quiets
//     signalling NaNs, which no reduction result shows (a NaN sum or product is quiet anyway; min
//     and max pass a NaN on to narrowing, which quiets it), and the bulk conversion undoes
//     (widen8_exact). bfloat16 is rounded with integer operations that repeat float_to_bfloat16()
//     lane by lane.
// A partial last step runs on zero-padded copies of the inputs, so every element, tails
// included, goes through the same vector code.
//
// Only the code after the target pragma below (an attribute push with Clang) may contain AVX2
// instructions. Everything defined
// there has internal linkage except the entry points of reduce_avx2.hpp, and it uses no inline
// function or template of a header (only intrinsics, which are always inlined, and memcpy), so
// the linker can never hand an AVX2 copy of a shared function to code running on an older CPU.
#include "core/reduce_avx2.hpp"

#if HOLMES_HAVE_AVX2_KERNELS

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,f16c")
#endif

namespace holmes::avx2 {
namespace {

constexpr std::size_t kVectorBytes = 32;

// ---- integers ---------------------------------------------------------------------------------

template <typename T>
struct IntVector {
  typedef T type __attribute__((vector_size(kVectorBytes)));
};

// Sum and product in the unsigned type, where overflow wraps; the low bits are the same as the
// scalar kernels' (which also compute in unsigned types).
template <typename T>
struct IntSum {
  using V = typename IntVector<T>::type;
  using U = typename IntVector<std::make_unsigned_t<T>>::type;
  static V apply(V a, V b) {
    return reinterpret_cast<V>(reinterpret_cast<U>(a) + reinterpret_cast<U>(b));
  }
};
template <typename T>
struct IntProd {
  using V = typename IntVector<T>::type;
  using U = typename IntVector<std::make_unsigned_t<T>>::type;
  static V apply(V a, V b) {
    return reinterpret_cast<V>(reinterpret_cast<U>(a) * reinterpret_cast<U>(b));
  }
};
template <typename T>
struct IntMin {
  using V = typename IntVector<T>::type;
  static V apply(V a, V b) { return b < a ? b : a; }
};
template <typename T>
struct IntMax {
  using V = typename IntVector<T>::type;
  static V apply(V a, V b) { return a < b ? b : a; }
};

// Two vectors of T per step.
template <typename T, typename Op>
struct IntStep {
  using V = typename IntVector<T>::type;
  static constexpr std::size_t kLanes = kVectorBytes / sizeof(T);
  static constexpr std::size_t kElements = 2 * kLanes;
  void operator()(T* dst, const T* a, const T* b) const {
    V a0, a1, b0, b1;
    std::memcpy(&a0, a, kVectorBytes);
    std::memcpy(&a1, a + kLanes, kVectorBytes);
    std::memcpy(&b0, b, kVectorBytes);
    std::memcpy(&b1, b + kLanes, kVectorBytes);
    const V r0 = Op::apply(a0, b0);
    const V r1 = Op::apply(a1, b1);
    std::memcpy(dst, &r0, kVectorBytes);
    std::memcpy(dst + kLanes, &r1, kVectorBytes);
  }
};

// ---- float32 and float64 ----------------------------------------------------------------------

struct Float32 {
  using T = float;
  using Reg = __m256;
  static constexpr std::size_t kLanes = 8;
  static Reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  static Reg broadcast(float v) { return _mm256_set1_ps(v); }
  static Reg add(Reg x, Reg y) { return _mm256_add_ps(x, y); }
  static Reg mul(Reg x, Reg y) { return _mm256_mul_ps(x, y); }
  static Reg div(Reg x, Reg y) { return _mm256_div_ps(x, y); }
  // x < y ? x : y and x > y ? x : y per lane: vminps and vmaxps return their second operand when
  // the comparison is false (a NaN, or zeros of either sign). GCC keeps the operand order of
  // these two intrinsics unless -ffinite-math-only and -fno-signed-zeros.
  static Reg min(Reg x, Reg y) { return _mm256_min_ps(x, y); }
  static Reg max(Reg x, Reg y) { return _mm256_max_ps(x, y); }
  static Reg is_nan(Reg x) { return _mm256_cmp_ps(x, x, _CMP_UNORD_Q); }
  static Reg and_not(Reg mask, Reg x) { return _mm256_andnot_ps(mask, x); }
};

struct Float64 {
  using T = double;
  using Reg = __m256d;
  static constexpr std::size_t kLanes = 4;
  static Reg load(const double* p) { return _mm256_loadu_pd(p); }
  static void store(double* p, Reg v) { _mm256_storeu_pd(p, v); }
  static Reg broadcast(double v) { return _mm256_set1_pd(v); }
  static Reg add(Reg x, Reg y) { return _mm256_add_pd(x, y); }
  static Reg mul(Reg x, Reg y) { return _mm256_mul_pd(x, y); }
  static Reg div(Reg x, Reg y) { return _mm256_div_pd(x, y); }
  static Reg min(Reg x, Reg y) { return _mm256_min_pd(x, y); }
  static Reg max(Reg x, Reg y) { return _mm256_max_pd(x, y); }
  static Reg is_nan(Reg x) { return _mm256_cmp_pd(x, x, _CMP_UNORD_Q); }
  static Reg and_not(Reg mask, Reg x) { return _mm256_andnot_pd(mask, x); }
};

// A NaN sum or product is b's NaN (quieted) if b is a NaN, else a's if a is one, else the
// default NaN of an invalid operation: what x86 gives for b + a, the order GCC emits for the
// scalar kernel (src/core/cuda/element_ops.hpp documents and reproduces it). The compiler may
// swap the operands of an addition, so a is replaced by +0 wherever b is a NaN: with a single
// NaN operand every order gives that NaN, quieted.
template <typename F>
typename F::Reg zero_where_nan(typename F::Reg b, typename F::Reg a) {
  return F::and_not(F::is_nan(b), a);
}

template <typename F>
struct FloatSum {
  static typename F::Reg apply(typename F::Reg a, typename F::Reg b) {
    return F::add(b, zero_where_nan<F>(b, a));
  }
};
template <typename F>
struct FloatProd {
  static typename F::Reg apply(typename F::Reg a, typename F::Reg b) {
    return F::mul(b, zero_where_nan<F>(b, a));
  }
};
// b < a ? b : a and a < b ? b : a exactly, that is min(b, a) and max(b, a) above: a NaN or a
// zero against a zero keeps a.
template <typename F>
struct FloatMin {
  static typename F::Reg apply(typename F::Reg a, typename F::Reg b) { return F::min(b, a); }
};
template <typename F>
struct FloatMax {
  static typename F::Reg apply(typename F::Reg a, typename F::Reg b) { return F::max(b, a); }
};

template <typename F, template <typename> class Op>
struct FloatStep {
  using T = typename F::T;
  static constexpr std::size_t kElements = 2 * F::kLanes;
  void operator()(T* dst, const T* a, const T* b) const {
    const auto a0 = F::load(a);
    const auto a1 = F::load(a + F::kLanes);
    const auto b0 = F::load(b);
    const auto b1 = F::load(b + F::kLanes);
    F::store(dst, Op<F>::apply(a0, b0));
    F::store(dst + F::kLanes, Op<F>::apply(a1, b1));
  }
};

// x / divisor; a NaN x comes back quieted, as from the scalar division (the divisor is a whole
// number, never a NaN, and division does not commute).
template <typename F>
struct FloatDivide {
  using T = typename F::T;
  static constexpr std::size_t kElements = 2 * F::kLanes;
  typename F::Reg divisor;
  void operator()(T* out, const T* in) const {
    const auto x0 = F::load(in);
    const auto x1 = F::load(in + F::kLanes);
    F::store(out, F::div(x0, divisor));
    F::store(out + F::kLanes, F::div(x1, divisor));
  }
};

// ---- float16 and bfloat16 ---------------------------------------------------------------------

// Each storage format widens 16 elements into two vectors of float32 and narrows them back.
// widen16/narrow16 may order the lanes as suits the instructions (the reductions work lane by
// lane), as long as narrow16 undoes widen16's order; the bulk conversions need memory order
// (widen8_exact, narrow16_in_order).

__m128i load_8_halves(const std::uint16_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

struct Float16Storage {
  // In order; exact except that signalling NaNs come back quieted (see the top of the file).
  static void widen16(const std::uint16_t* p, __m256& lo, __m256& hi) {
    lo = _mm256_cvtph_ps(load_8_halves(p));
    hi = _mm256_cvtph_ps(load_8_halves(p + 8));
  }

  static void narrow16(std::uint16_t* p, __m256 lo, __m256 hi) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8),
                     _mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT));
  }
  static void narrow16_in_order(std::uint16_t* p, __m256 lo, __m256 hi) { narrow16(p, lo, hi); }

  // Exactly half_to_float(): a signalling NaN keeps its quiet bit clear.
  static __m256 widen8_exact(const std::uint16_t* p) {
    const __m128i h = load_8_halves(p);
    const __m256i h32 = _mm256_cvtepu16_epi32(h);
    const __m256i exponent_all_ones_quiet_clear = _mm256_cmpeq_epi32(
        _mm256_and_si256(h32, _mm256_set1_epi32(0x7e00)), _mm256_set1_epi32(0x7c00));
    const __m256i payload_zero = _mm256_cmpeq_epi32(
        _mm256_and_si256(h32, _mm256_set1_epi32(0x01ff)), _mm256_setzero_si256());
    const __m256i signalling = _mm256_andnot_si256(payload_zero, exponent_all_ones_quiet_clear);
    const __m256i wrong_quiet_bit = _mm256_and_si256(signalling, _mm256_set1_epi32(0x00400000));
    const __m256i bits = _mm256_castps_si256(_mm256_cvtph_ps(h));
    return _mm256_castsi256_ps(_mm256_andnot_si256(wrong_quiet_bit, bits));
  }
};

struct Bfloat16Storage {
  // A bfloat16 is the upper half of its float32. Interleaving with zeros widens elements 0-3 and
  // 8-11 into lo, 4-7 and 12-15 into hi; narrow16's in-lane pack puts them back in order.
  static void widen16(const std::uint16_t* p, __m256& lo, __m256& hi) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), h));
    hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), h));
  }

  // float_to_bfloat16() on 8 lanes, each result in the low 16 bits of its 32-bit lane. A number
  // gets (bits + 0x7fff + kept lowest bit) >> 16; a NaN gets its quiet bit (bit 22) set and no
  // rounding added, which gives float_to_bfloat16()'s (bits >> 16) | 0x40 without a blend.
  static __m256i round(__m256 value) {
    const __m256i bits = _mm256_castps_si256(value);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(value, value, _CMP_UNORD_Q));
    const __m256i kept_lowest_bit =
        _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounding =
        _mm256_andnot_si256(nan, _mm256_add_epi32(kept_lowest_bit, _mm256_set1_epi32(0x7fff)));
    const __m256i quiet_bit = _mm256_and_si256(nan, _mm256_set1_epi32(0x00400000));
    return _mm256_srli_epi32(_mm256_add_epi32(_mm256_or_si256(bits, quiet_bit), rounding), 16);
  }

  // Every lane is at most 0xffff, so the saturating pack is exact. It packs within 128-bit
  // halves: lo's four then hi's four in each.
  static void narrow16(std::uint16_t* p, __m256 lo, __m256 hi) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_packus_epi32(round(lo), round(hi)));
  }
  static void narrow16_in_order(std::uint16_t* p, __m256 lo, __m256 hi) {
    // lo and hi hold elements 0-7 and 8-15: the pack gives 0-3 8-11 4-7 12-15, which the
    // permute puts back in order.
    const __m256i packed = _mm256_packus_epi32(round(lo), round(hi));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute4x64_epi64(packed, 0xd8));
  }

  static __m256 widen8_exact(const std::uint16_t* p) {
    const __m256i h32 = _mm256_cvtepu16_epi32(load_8_halves(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h32, 16));
  }
};

template <typename S, template <typename> class Op>
struct HalfStep {
  using T = std::uint16_t;
  static constexpr std::size_t kElements = 16;
  void operator()(std::uint16_t* dst, const std::uint16_t* a, const std::uint16_t* b) const {
    __m256 a0, a1, b0, b1;
    S::widen16(a, a0, a1);
    S::widen16(b, b0, b1);
    S::narrow16(dst, Op<Float32>::apply(a0, b0), Op<Float32>::apply(a1, b1));
  }
};

template <typename S>
struct HalfDivide {
  static constexpr std::size_t kElements = 16;
  __m256 divisor;
  void operator()(std::uint16_t* out, const std::uint16_t* in) const {
    __m256 x0, x1;
    S::widen16(in, x0, x1);
    S::narrow16(out, _mm256_div_ps(x0, divisor), _mm256_div_ps(x1, divisor));
  }
};

template <typename S>
struct HalfWiden {
  static constexpr std::size_t kElements = 8;
  void operator()(float* out, const std::uint16_t* in) const {
    _mm256_storeu_ps(out, S::widen8_exact(in));
  }
};

template <typename S>
struct HalfNarrow {
  static constexpr std::size_t kElements = 16;
  void operator()(std::uint16_t* out, const float* in) const {
    S::narrow16_in_order(out, _mm256_loadu_ps(in), _mm256_loadu_ps(in + 8));
  }
};

// ---- loops ------------------------------------------------------------------------------------

// dst[i] = op(a[i], b[i]) a step at a time. A step reads all its inputs before it writes, so dst
// may be a or b.
template <typename Step, typename T>
void binary_steps(T* dst, const T* a, const T* b, std::size_t count) {
  constexpr std::size_t kStep = Step::kElements;
  const Step step{};
  std::size_t i = 0;
  for (; i + kStep <= count; i += kStep) step(dst + i, a + i, b + i);
  if (i == count) return;
  const std::size_t tail_bytes = (count - i) * sizeof(T);
  T tail_a[kStep] = {};
  T tail_b[kStep] = {};
  T tail_dst[kStep];
  std::memcpy(tail_a, a + i, tail_bytes);
  std::memcpy(tail_b, b + i, tail_bytes);
  step(tail_dst, tail_a, tail_b);
  std::memcpy(dst + i, tail_dst, tail_bytes);
}

// out[i] = f(in[i]) a step at a time; out may be in (same element size).
template <typename Step, typename In, typename Out>
void unary_steps(const Step& step, Out* out, const In* in, std::size_t count) {
  constexpr std::size_t kStep = Step::kElements;
  std::size_t i = 0;
  for (; i + kStep <= count; i += kStep) step(out + i, in + i);
  if (i == count) return;
  In tail_in[kStep] = {};
  Out tail_out[kStep];
  std::memcpy(tail_in, in + i, (count - i) * sizeof(In));
  step(tail_out, tail_in);
  std::memcpy(out + i, tail_out, (count - i) * sizeof(Out));
}

// ---- dispatch over ops ------------------------------------------------------------------------

template <typename T>
void reduce_int(hm_op_t op, void* dst, const void* a, const void* b, std::size_t count) {
  auto* d = static_cast<T*>(dst);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  switch (op) {
    case HM_SUM:
    case HM_AVG:
      return binary_steps<IntStep<T, IntSum<T>>>(d, x, y, count);
    case HM_PROD:
      return binary_steps<IntStep<T, IntProd<T>>>(d, x, y, count);
    case HM_MIN:
      return binary_steps<IntStep<T, IntMin<T>>>(d, x, y, count);
    case HM_MAX:
      return binary_steps<IntStep<T, IntMax<T>>>(d, x, y, count);
    default:
      return;  // validated by the caller
  }
}

template <typename F>
void reduce_float(hm_op_t op, void* dst, const void* a, const void* b, std::size_t count) {
  using T = typename F::T;
  auto* d = static_cast<T*>(dst);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  switch (op) {
    case HM_SUM:
    case HM_AVG:
      return binary_steps<FloatStep<F, FloatSum>>(d, x, y, count);
    case HM_PROD:
      return binary_steps<FloatStep<F, FloatProd>>(d, x, y, count);
    case HM_MIN:
      return binary_steps<FloatStep<F, FloatMin>>(d, x, y, count);
    case HM_MAX:
      return binary_steps<FloatStep<F, FloatMax>>(d, x, y, count);
    default:
      return;
  }
}

template <typename S>
void reduce_half(hm_op_t op, void* dst, const void* a, const void* b, std::size_t count) {
  auto* d = static_cast<std::uint16_t*>(dst);
  const auto* x = static_cast<const std::uint16_t*>(a);
  const auto* y = static_cast<const std::uint16_t*>(b);
  switch (op) {
    case HM_SUM:
    case HM_AVG:
      return binary_steps<HalfStep<S, FloatSum>>(d, x, y, count);
    case HM_PROD:
      return binary_steps<HalfStep<S, FloatProd>>(d, x, y, count);
    case HM_MIN:
      return binary_steps<HalfStep<S, FloatMin>>(d, x, y, count);
    case HM_MAX:
      return binary_steps<HalfStep<S, FloatMax>>(d, x, y, count);
    default:
      return;
  }
}

}  // namespace

void reduce(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
            std::size_t count) {
  switch (dtype) {
    case HM_INT8:
      return reduce_int<std::int8_t>(op, dst, a, b, count);
    case HM_UINT8:
      return reduce_int<std::uint8_t>(op, dst, a, b, count);
    case HM_INT32:
      return reduce_int<std::int32_t>(op, dst, a, b, count);
    case HM_UINT32:
      return reduce_int<std::uint32_t>(op, dst, a, b, count);
    case HM_INT64:
      return reduce_int<std::int64_t>(op, dst, a, b, count);
    case HM_UINT64:
      return reduce_int<std::uint64_t>(op, dst, a, b, count);
    case HM_FLOAT16:
      return reduce_half<Float16Storage>(op, dst, a, b, count);
    case HM_BFLOAT16:
      return reduce_half<Bfloat16Storage>(op, dst, a, b, count);
    case HM_FLOAT32:
      return reduce_float<Float32>(op, dst, a, b, count);
    case HM_FLOAT64:
      return reduce_float<Float64>(op, dst, a, b, count);
    default:
      return;  // validated by the caller
  }
}

void finalize_average(hm_dtype_t dtype, void* data, std::size_t count, int nranks) {
  switch (dtype) {
    case HM_FLOAT16: {
      auto* d = static_cast<std::uint16_t*>(data);
      const HalfDivide<Float16Storage> step{_mm256_set1_ps(static_cast<float>(nranks))};
      return unary_steps(step, d, d, count);
    }
    case HM_BFLOAT16: {
      auto* d = static_cast<std::uint16_t*>(data);
      const HalfDivide<Bfloat16Storage> step{_mm256_set1_ps(static_cast<float>(nranks))};
      return unary_steps(step, d, d, count);
    }
    case HM_FLOAT32: {
      auto* d = static_cast<float*>(data);
      const FloatDivide<Float32> step{Float32::broadcast(static_cast<float>(nranks))};
      return unary_steps(step, d, d, count);
    }
    case HM_FLOAT64: {
      auto* d = static_cast<double*>(data);
      const FloatDivide<Float64> step{Float64::broadcast(static_cast<double>(nranks))};
      return unary_steps(step, d, d, count);
    }
    default:
      return;  // integers are divided by the caller
  }
}

void half_to_float(const std::uint16_t* in, float* out, std::size_t count) {
  unary_steps(HalfWiden<Float16Storage>{}, out, in, count);
}

void float_to_half(const float* in, std::uint16_t* out, std::size_t count) {
  unary_steps(HalfNarrow<Float16Storage>{}, out, in, count);
}

void bfloat16_to_float(const std::uint16_t* in, float* out, std::size_t count) {
  unary_steps(HalfWiden<Bfloat16Storage>{}, out, in, count);
}

void float_to_bfloat16(const float* in, std::uint16_t* out, std::size_t count) {
  unary_steps(HalfNarrow<Bfloat16Storage>{}, out, in, count);
}

}  // namespace holmes::avx2

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif  // HOLMES_HAVE_AVX2_KERNELS
