// Tests of src/core/reduce.hpp: reduce() for every dtype x op against a reference written here in
// plain C++ (wider arithmetic, then conversion), at counts around the 256-element blocks of the
// half-precision path, in place and out of place, on every instruction set this CPU runs;
// finalize_average(); the vector kernels against the portable ones bitwise on inputs full of
// NaNs, infinities and subnormals at every alignment and tail length; the NaN a float sum or
// product returns; the choice of instruction set (HOLMES_REDUCE_ISA); and argument validation.
#include "core/reduce.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/dtype.hpp"
#include "core/reduce_isa.hpp"
#include "core/status.hpp"

namespace holmes {
namespace {

constexpr hm_dtype_t kAllDtypes[] = {HM_INT8,   HM_UINT8,   HM_INT32,    HM_UINT32,  HM_INT64,
                                     HM_UINT64, HM_FLOAT16, HM_BFLOAT16, HM_FLOAT32, HM_FLOAT64};
constexpr hm_op_t kAllOps[] = {HM_SUM, HM_PROD, HM_MIN, HM_MAX, HM_AVG};
// 256 is the block size of the half-precision path: these hit empty, partial, exact and
// one-past blocks.
constexpr std::size_t kCounts[] = {0, 1, 7, 255, 256, 257, 1000};

using Bytes = std::vector<std::uint8_t>;

// Every instruction set this CPU can run; the portable one always.
std::vector<ReduceIsa> runnable_isas() {
  std::vector<ReduceIsa> isas;
  for (ReduceIsa isa : {ReduceIsa::kPortable, ReduceIsa::kAvx2}) {
    if (reduce_isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

// Integer reference: compute in uint64_t, where overflow is defined (modulo 2^64), then convert
// back, which C++20 defines as modulo 2^N; the low N bits of a 64-bit sum or product are the
// wrapped N-bit result for signed and unsigned types alike.
template <typename T>
T reference_int(hm_op_t op, T a, T b) {
  using Wide = std::uint64_t;
  const auto wa = static_cast<Wide>(a);
  const auto wb = static_cast<Wide>(b);
  switch (op) {
    case HM_SUM:
    case HM_AVG:
      return static_cast<T>(wa + wb);
    case HM_PROD:
      return static_cast<T>(wa * wb);
    case HM_MIN:
      return a < b ? a : b;
    case HM_MAX:
      return a > b ? a : b;
    default:
      ADD_FAILURE() << "bad op";
      return T{};
  }
}

template <typename F>
F reference_float(hm_op_t op, F a, F b) {
  switch (op) {
    case HM_SUM:
    case HM_AVG:
      return a + b;
    case HM_PROD:
      return a * b;
    case HM_MIN:
      return b < a ? b : a;
    case HM_MAX:
      return a < b ? b : a;
    default:
      ADD_FAILURE() << "bad op";
      return F{};
  }
}

template <typename T>
T load(const Bytes& bytes, std::size_t i) {
  T value;
  std::memcpy(&value, bytes.data() + i * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
void put(Bytes& bytes, std::size_t i, T value) {
  std::memcpy(bytes.data() + i * sizeof(T), &value, sizeof(T));
}

template <typename T>
void reference_int_all(hm_op_t op, const Bytes& a, const Bytes& b, Bytes& out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    put<T>(out, i, reference_int<T>(op, load<T>(a, i), load<T>(b, i)));
}

template <typename F>
void reference_float_all(hm_op_t op, const Bytes& a, const Bytes& b, Bytes& out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    put<F>(out, i, reference_float<F>(op, load<F>(a, i), load<F>(b, i)));
  }
}

// Half types: widen both inputs to float32, apply the op there, round once.
void reference_half_all(hm_dtype_t dtype, hm_op_t op, const Bytes& a, const Bytes& b, Bytes& out,
                        std::size_t n) {
  const bool bf16 = dtype == HM_BFLOAT16;
  for (std::size_t i = 0; i < n; ++i) {
    const auto ha = load<std::uint16_t>(a, i);
    const auto hb = load<std::uint16_t>(b, i);
    const float fa = bf16 ? bfloat16_to_float(ha) : half_to_float(ha);
    const float fb = bf16 ? bfloat16_to_float(hb) : half_to_float(hb);
    const float r = reference_float<float>(op, fa, fb);
    put<std::uint16_t>(out, i, bf16 ? float_to_bfloat16(r) : float_to_half(r));
  }
}

Bytes reference_reduce(hm_dtype_t dtype, hm_op_t op, const Bytes& a, const Bytes& b,
                       std::size_t n) {
  Bytes out(n * dtype_size(dtype));
  switch (dtype) {
    case HM_INT8:
      reference_int_all<std::int8_t>(op, a, b, out, n);
      break;
    case HM_UINT8:
      reference_int_all<std::uint8_t>(op, a, b, out, n);
      break;
    case HM_INT32:
      reference_int_all<std::int32_t>(op, a, b, out, n);
      break;
    case HM_UINT32:
      reference_int_all<std::uint32_t>(op, a, b, out, n);
      break;
    case HM_INT64:
      reference_int_all<std::int64_t>(op, a, b, out, n);
      break;
    case HM_UINT64:
      reference_int_all<std::uint64_t>(op, a, b, out, n);
      break;
    case HM_FLOAT16:
    case HM_BFLOAT16:
      reference_half_all(dtype, op, a, b, out, n);
      break;
    case HM_FLOAT32:
      reference_float_all<float>(op, a, b, out, n);
      break;
    case HM_FLOAT64:
      reference_float_all<double>(op, a, b, out, n);
      break;
    default:
      ADD_FAILURE() << "bad dtype";
  }
  return out;
}

// Random inputs without NaN or infinity (their min/max and arithmetic would make the reference
// comparison ambiguous). Floats alternate between arbitrary finite bit patterns (extreme
// magnitudes, subnormals, overflow in products) and moderate values where rounding matters.
Bytes random_inputs(hm_dtype_t dtype, std::size_t n, std::mt19937_64& rng) {
  Bytes out(n * dtype_size(dtype));
  std::uniform_real_distribution<double> moderate(-100.0, 100.0);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t r = rng();
    switch (dtype) {
      case HM_FLOAT16: {
        auto h = static_cast<std::uint16_t>(r);
        if ((h & 0x7c00u) == 0x7c00u) h &= 0xbfffu;  // clear an exponent bit: finite
        if (i % 2 == 1) h = float_to_half(static_cast<float>(moderate(rng)));
        put<std::uint16_t>(out, i, h);
        break;
      }
      case HM_BFLOAT16: {
        auto b = static_cast<std::uint16_t>(r);
        if ((b & 0x7f80u) == 0x7f80u) b &= 0xbfffu;
        if (i % 2 == 1) b = float_to_bfloat16(static_cast<float>(moderate(rng)));
        put<std::uint16_t>(out, i, b);
        break;
      }
      case HM_FLOAT32: {
        auto bits = static_cast<std::uint32_t>(r);
        if ((bits & 0x7f800000u) == 0x7f800000u) bits &= 0xbfffffffu;
        float f;
        std::memcpy(&f, &bits, 4);
        if (i % 2 == 1) f = static_cast<float>(moderate(rng));
        put<float>(out, i, f);
        break;
      }
      case HM_FLOAT64: {
        auto bits = r;
        if ((bits & 0x7ff0000000000000ull) == 0x7ff0000000000000ull) bits &= 0xbfffffffffffffffull;
        double d;
        std::memcpy(&d, &bits, 8);
        if (i % 2 == 1) d = moderate(rng);
        put<double>(out, i, d);
        break;
      }
      default:  // integers: every bit pattern is a value
        std::memcpy(out.data() + i * dtype_size(dtype), &r, dtype_size(dtype));
        break;
    }
  }
  return out;
}

// Byte-exact comparison element by element, so a failure names the element.
void expect_same(hm_dtype_t dtype, const Bytes& expected, const Bytes& actual,
                 const std::string& context) {
  ASSERT_EQ(expected.size(), actual.size()) << context;
  const std::size_t size = dtype_size(dtype);
  int reported = 0;
  for (std::size_t i = 0; i * size < expected.size(); ++i) {
    if (std::memcmp(expected.data() + i * size, actual.data() + i * size, size) != 0) {
      ADD_FAILURE() << context << ": element " << i << " differs";
      if (++reported == 5) return;  // enough to diagnose
    }
  }
}

TEST(Reduce, EveryDtypeOpAndCountMatchesReference) {
  std::mt19937_64 rng(12345);
  for (ReduceIsa isa : runnable_isas()) {
    for (hm_dtype_t dtype : kAllDtypes) {
      for (hm_op_t op : kAllOps) {
        for (std::size_t count : kCounts) {
          const std::string context = std::string(reduce_isa_name(isa)) + " " + dtype_name(dtype) +
                                      " " + op_name(op) + " count " + std::to_string(count);
          const Bytes a = random_inputs(dtype, count, rng);
          const Bytes b = random_inputs(dtype, count, rng);
          const Bytes expected = reference_reduce(dtype, op, a, b, count);

          // Out of place; the sentinel byte after dst must survive (no write past count).
          Bytes dst(expected.size() + 1, 0xa5);
          reduce(isa, dtype, op, dst.data(), a.data(), b.data(), count);
          EXPECT_EQ(dst.back(), 0xa5) << context << ": wrote past the end";
          dst.pop_back();
          expect_same(dtype, expected, dst, context + " out of place");

          Bytes in_a = a;
          reduce(isa, dtype, op, in_a.data(), in_a.data(), b.data(), count);
          expect_same(dtype, expected, in_a, context + " dst == a");

          Bytes in_b = b;
          reduce(isa, dtype, op, in_b.data(), a.data(), in_b.data(), count);
          expect_same(dtype, expected, in_b, context + " dst == b");
        }
      }
    }
  }
}

// One-element helpers for readable hand-computed cases.
template <typename T>
T reduce_one(hm_dtype_t dtype, hm_op_t op, T a, T b) {
  T out{};
  reduce(dtype, op, &out, &a, &b, 1);
  return out;
}

TEST(Reduce, IntegerSumAndProductWrap) {
  EXPECT_EQ(reduce_one<std::int8_t>(HM_INT8, HM_SUM, 127, 1), -128);
  EXPECT_EQ(reduce_one<std::int8_t>(HM_INT8, HM_SUM, -128, -1), 127);
  EXPECT_EQ(reduce_one<std::int8_t>(HM_INT8, HM_PROD, -128, -1), -128);
  EXPECT_EQ(reduce_one<std::int8_t>(HM_INT8, HM_PROD, 16, 16), 0);
  EXPECT_EQ(reduce_one<std::int8_t>(HM_INT8, HM_PROD, 100, 3), 44);  // 300 - 256
  EXPECT_EQ(reduce_one<std::uint8_t>(HM_UINT8, HM_PROD, 200, 2), 144);
  EXPECT_EQ(reduce_one<std::uint8_t>(HM_UINT8, HM_SUM, 200, 100), 44);
  EXPECT_EQ(reduce_one<std::uint8_t>(HM_UINT8, HM_PROD, 255, 255), 1);  // 65025 mod 256
  EXPECT_EQ(reduce_one<std::int32_t>(HM_INT32, HM_SUM, INT32_MAX, 1), INT32_MIN);
  EXPECT_EQ(reduce_one<std::int32_t>(HM_INT32, HM_PROD, 65536, 65536), 0);
  EXPECT_EQ(reduce_one<std::int32_t>(HM_INT32, HM_PROD, 65537, 65537), 131073);  // 2^32+2^17+1
  EXPECT_EQ(reduce_one<std::uint32_t>(HM_UINT32, HM_SUM, UINT32_MAX, 2), 1u);
  EXPECT_EQ(reduce_one<std::int64_t>(HM_INT64, HM_SUM, INT64_MAX, 1), INT64_MIN);
  EXPECT_EQ(reduce_one<std::int64_t>(HM_INT64, HM_SUM, INT64_MIN, INT64_MIN), 0);
  EXPECT_EQ(reduce_one<std::int64_t>(HM_INT64, HM_PROD, INT64_MIN, -1), INT64_MIN);
  // (2^32 + 1)^2 = 2^64 + 2^33 + 1 -> 2^33 + 1.
  EXPECT_EQ(reduce_one<std::int64_t>(HM_INT64, HM_PROD, (1ll << 32) + 1, (1ll << 32) + 1),
            (1ll << 33) + 1);
  EXPECT_EQ(reduce_one<std::uint64_t>(HM_UINT64, HM_SUM, UINT64_MAX, 1), 0u);
  EXPECT_EQ(reduce_one<std::uint64_t>(HM_UINT64, HM_PROD, 1ull << 63, 2), 0u);
}

TEST(Reduce, MinMaxRespectSignedness) {
  EXPECT_EQ(reduce_one<std::int8_t>(HM_INT8, HM_MIN, -1, 1), -1);
  EXPECT_EQ(reduce_one<std::uint8_t>(HM_UINT8, HM_MIN, 255, 1), 1);  // 255 is not -1 here
  EXPECT_EQ(reduce_one<std::int64_t>(HM_INT64, HM_MAX, INT64_MIN, -1), -1);
  EXPECT_EQ(reduce_one<std::uint64_t>(HM_UINT64, HM_MAX, UINT64_MAX, 0), UINT64_MAX);
  EXPECT_EQ(reduce_one<float>(HM_FLOAT32, HM_MIN, -3.5f, 2.0f), -3.5f);
  EXPECT_EQ(reduce_one<double>(HM_FLOAT64, HM_MAX, -3.5, -2.0), -2.0);
  const std::uint16_t h_minus2 = float_to_half(-2.0f);
  const std::uint16_t h_1 = float_to_half(1.0f);
  EXPECT_EQ(reduce_one<std::uint16_t>(HM_FLOAT16, HM_MIN, h_1, h_minus2), h_minus2);
  EXPECT_EQ(reduce_one<std::uint16_t>(HM_FLOAT16, HM_MAX, h_minus2, h_1), h_1);
  const std::uint16_t b_minus2 = float_to_bfloat16(-2.0f);
  const std::uint16_t b_1 = float_to_bfloat16(1.0f);
  EXPECT_EQ(reduce_one<std::uint16_t>(HM_BFLOAT16, HM_MIN, b_1, b_minus2), b_minus2);
  EXPECT_EQ(reduce_one<std::uint16_t>(HM_BFLOAT16, HM_MAX, b_minus2, b_1), b_1);
}

// Half sums round to nearest even once: 2048 + 1 = 2049 lies halfway between the halves 2048
// and 2050 (spacing 2 above 2048), and 2048 has the even mantissa.
TEST(Reduce, HalfPrecisionSumsRoundToNearestEven) {
  const auto h = [](float f) { return float_to_half(f); };
  EXPECT_EQ(reduce_one<std::uint16_t>(HM_FLOAT16, HM_SUM, h(2048), h(1)), h(2048));
  EXPECT_EQ(reduce_one<std::uint16_t>(HM_FLOAT16, HM_SUM, h(2048), h(3)), h(2052));
  EXPECT_EQ(reduce_one<std::uint16_t>(HM_FLOAT16, HM_SUM, h(1.5f), h(2.25f)), h(3.75f));
  EXPECT_EQ(reduce_one<std::uint16_t>(HM_FLOAT16, HM_SUM, h(60000), h(10000)), 0x7c00u);  // inf
  EXPECT_EQ(reduce_one<std::uint16_t>(HM_FLOAT16, HM_PROD, h(300), h(300)), 0x7c00u);
  EXPECT_EQ(reduce_one<std::uint16_t>(HM_FLOAT16, HM_PROD, h(-3), h(0.5f)), h(-1.5f));
  // bfloat16 keeps 8 significant bits: spacing 2 in [256, 512).
  const auto b = [](float f) { return float_to_bfloat16(f); };
  EXPECT_EQ(reduce_one<std::uint16_t>(HM_BFLOAT16, HM_SUM, b(256), b(1)), b(256));
  EXPECT_EQ(reduce_one<std::uint16_t>(HM_BFLOAT16, HM_SUM, b(256), b(3)), b(260));
  EXPECT_EQ(reduce_one<std::uint16_t>(HM_BFLOAT16, HM_PROD, b(-3), b(0.5f)), b(-1.5f));
}

// AVG reduces as SUM (the division happens once in finalize_average).
TEST(Reduce, AvgReducesAsSum) {
  EXPECT_EQ(reduce_one<std::int32_t>(HM_INT32, HM_AVG, 7, 8), 15);
  EXPECT_EQ(reduce_one<double>(HM_FLOAT64, HM_AVG, 0.25, 0.5), 0.75);
}

template <typename T>
std::vector<T> finalize(hm_dtype_t dtype, std::vector<T> data, int nranks) {
  finalize_average(dtype, data.data(), data.size(), nranks);
  return data;
}

TEST(FinalizeAverage, IntegersTruncateTowardZero) {
  EXPECT_EQ(finalize<std::int32_t>(HM_INT32, {-7, 7, -1, 1, 0, -8}, 2),
            (std::vector<std::int32_t>{-3, 3, 0, 0, 0, -4}));
  EXPECT_EQ(finalize<std::int8_t>(HM_INT8, {-128, 127, -7}, 2),
            (std::vector<std::int8_t>{-64, 63, -3}));
  // More ranks than int8 can count: the divisor must not be narrowed to the element type.
  EXPECT_EQ(finalize<std::int8_t>(HM_INT8, {-128, 127, 100}, 200),
            (std::vector<std::int8_t>{0, 0, 0}));
  EXPECT_EQ(finalize<std::uint8_t>(HM_UINT8, {255, 254, 1}, 2),
            (std::vector<std::uint8_t>{127, 127, 0}));
  EXPECT_EQ(finalize<std::uint8_t>(HM_UINT8, {255, 200}, 200), (std::vector<std::uint8_t>{1, 1}));
  EXPECT_EQ(finalize<std::uint32_t>(HM_UINT32, {UINT32_MAX, 10}, 3),
            (std::vector<std::uint32_t>{1431655765u, 3}));
  EXPECT_EQ(finalize<std::int64_t>(HM_INT64, {INT64_MIN, INT64_MAX, -10}, 3),
            (std::vector<std::int64_t>{-3074457345618258602ll, 3074457345618258602ll, -3}));
  // uint64 values above INT64_MAX must not be divided as signed numbers.
  EXPECT_EQ(finalize<std::uint64_t>(HM_UINT64, {UINT64_MAX, 1ull << 63}, 2),
            (std::vector<std::uint64_t>{UINT64_MAX / 2, 1ull << 62}));
  EXPECT_EQ(finalize<std::int32_t>(HM_INT32, {5, -5}, 1), (std::vector<std::int32_t>{5, -5}));
}

TEST(FinalizeAverage, FloatsDivideOnceInTheirComputePrecision) {
  EXPECT_EQ(finalize<float>(HM_FLOAT32, {3.0f, -1.0f, 1.0f}, 2),
            (std::vector<float>{1.5f, -0.5f, 0.5f}));
  EXPECT_EQ(finalize<float>(HM_FLOAT32, {1.0f}, 3), (std::vector<float>{1.0f / 3.0f}));
  EXPECT_EQ(finalize<double>(HM_FLOAT64, {1.0}, 3), (std::vector<double>{1.0 / 3.0}));
  const auto h = [](float f) { return float_to_half(f); };
  EXPECT_EQ(finalize<std::uint16_t>(HM_FLOAT16, {h(3), h(-5), h(1)}, 2),
            (std::vector<std::uint16_t>{h(1.5f), h(-2.5f), h(0.5f)}));
  // 1/3 computed in float32 then rounded to half once.
  EXPECT_EQ(finalize<std::uint16_t>(HM_FLOAT16, {h(1)}, 3),
            (std::vector<std::uint16_t>{h(1.0f / 3.0f)}));
  // The smallest subnormal halved is a tie between 0 and 2^-24: rounds to even 0.
  EXPECT_EQ(finalize<std::uint16_t>(HM_FLOAT16, {0x0001u, 0x0003u}, 2),
            (std::vector<std::uint16_t>{0x0000u, 0x0002u}));
  const auto b = [](float f) { return float_to_bfloat16(f); };
  EXPECT_EQ(finalize<std::uint16_t>(HM_BFLOAT16, {b(3), b(-5), b(1)}, 2),
            (std::vector<std::uint16_t>{b(1.5f), b(-2.5f), b(0.5f)}));
  EXPECT_EQ(finalize<std::uint16_t>(HM_BFLOAT16, {b(1)}, 3),
            (std::vector<std::uint16_t>{b(1.0f / 3.0f)}));
}

template <typename T>
void reference_divide_int(Bytes& data, std::size_t n, int nranks) {
  for (std::size_t i = 0; i < n; ++i) {
    const T v = load<T>(data, i);
    T q;
    if constexpr (std::is_signed_v<T>) {
      q = static_cast<T>(static_cast<std::int64_t>(v) / nranks);
    } else {
      q = static_cast<T>(static_cast<std::uint64_t>(v) / static_cast<std::uint64_t>(nranks));
    }
    put<T>(data, i, q);
  }
}

template <typename F>
void reference_divide_float(Bytes& data, std::size_t n, int nranks) {
  for (std::size_t i = 0; i < n; ++i) put<F>(data, i, load<F>(data, i) / static_cast<F>(nranks));
}

Bytes reference_finalize(hm_dtype_t dtype, Bytes data, std::size_t n, int nranks) {
  switch (dtype) {
    case HM_INT8:
      reference_divide_int<std::int8_t>(data, n, nranks);
      break;
    case HM_UINT8:
      reference_divide_int<std::uint8_t>(data, n, nranks);
      break;
    case HM_INT32:
      reference_divide_int<std::int32_t>(data, n, nranks);
      break;
    case HM_UINT32:
      reference_divide_int<std::uint32_t>(data, n, nranks);
      break;
    case HM_INT64:
      reference_divide_int<std::int64_t>(data, n, nranks);
      break;
    case HM_UINT64:
      reference_divide_int<std::uint64_t>(data, n, nranks);
      break;
    case HM_FLOAT16:
      for (std::size_t i = 0; i < n; ++i) {
        const float f = half_to_float(load<std::uint16_t>(data, i));
        put<std::uint16_t>(data, i, float_to_half(f / static_cast<float>(nranks)));
      }
      break;
    case HM_BFLOAT16:
      for (std::size_t i = 0; i < n; ++i) {
        const float f = bfloat16_to_float(load<std::uint16_t>(data, i));
        put<std::uint16_t>(data, i, float_to_bfloat16(f / static_cast<float>(nranks)));
      }
      break;
    case HM_FLOAT32:
      reference_divide_float<float>(data, n, nranks);
      break;
    case HM_FLOAT64:
      reference_divide_float<double>(data, n, nranks);
      break;
    default:
      ADD_FAILURE() << "bad dtype";
  }
  return data;
}

TEST(FinalizeAverage, EveryDtypeMatchesReference) {
  std::mt19937_64 rng(777);
  for (ReduceIsa isa : runnable_isas()) {
    for (hm_dtype_t dtype : kAllDtypes) {
      for (int nranks : {1, 2, 3, 7, 200, 1000}) {
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{257}}) {
          const std::string context = std::string(reduce_isa_name(isa)) + " " + dtype_name(dtype) +
                                      " nranks " + std::to_string(nranks) + " count " +
                                      std::to_string(count);
          const Bytes input = random_inputs(dtype, count, rng);
          const Bytes expected = reference_finalize(dtype, input, count, nranks);
          Bytes actual = input;
          actual.push_back(0x5a);  // sentinel: nothing past count is touched
          finalize_average(isa, dtype, actual.data(), count, nranks);
          EXPECT_EQ(actual.back(), 0x5a) << context;
          actual.pop_back();
          expect_same(dtype, expected, actual, context);
        }
      }
    }
  }
}

void expect_invalid_argument(const std::function<void()>& call, const std::string& context) {
  try {
    call();
    ADD_FAILURE() << context << ": no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT) << context << ": " << e.what();
  }
}

TEST(Reduce, InvalidDtypeThrowsInvalidArgument) {
  std::uint64_t a = 1, b = 2, dst = 0;
  for (int dtype : {-1, static_cast<int>(HM_DTYPE_COUNT), 99}) {
    expect_invalid_argument(
        [&] { reduce(static_cast<hm_dtype_t>(dtype), HM_SUM, &dst, &a, &b, 1); },
        "reduce dtype " + std::to_string(dtype));
    expect_invalid_argument([&] { finalize_average(static_cast<hm_dtype_t>(dtype), &dst, 1, 2); },
                            "finalize_average dtype " + std::to_string(dtype));
  }
  EXPECT_EQ(dst, 0u);
}

TEST(Reduce, InvalidOpThrowsInvalidArgumentForEveryDtype) {
  for (hm_dtype_t dtype : kAllDtypes) {
    for (int op : {-1, static_cast<int>(HM_OP_COUNT), 42}) {
      std::uint64_t a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
      std::uint64_t dst[4] = {9, 9, 9, 9};
      expect_invalid_argument([&] { reduce(dtype, static_cast<hm_op_t>(op), dst, a, b, 3); },
                              std::string(dtype_name(dtype)) + " op " + std::to_string(op));
      // Nothing was written before the op was rejected.
      for (std::uint64_t v : dst) EXPECT_EQ(v, 9u) << dtype_name(dtype) << " op " << op;
    }
  }
}

// An invalid op should be rejected regardless of count, as it is for the integer and
// full-precision float types (the half-precision path once checked it only per block).
TEST(Reduce, InvalidOpThrowsEvenForZeroCount) {
  for (hm_dtype_t dtype : kAllDtypes) {
    std::uint64_t a = 0, b = 0, dst = 0;
    expect_invalid_argument(
        [&] { reduce(dtype, static_cast<hm_op_t>(HM_OP_COUNT), &dst, &a, &b, 0); },
        std::string(dtype_name(dtype)) + " count 0");
  }
}

// ---- the vector kernels against the portable ones --------------------------------------------

// Bit patterns where kernels go wrong: NaNs (quiet and signalling, both signs, payloads in the
// high and the low bits), infinities, signed zeros, subnormals, the extremes, and values whose
// rounding to float16 or bfloat16 is a tie or overflows.
std::vector<std::uint64_t> special_bits(hm_dtype_t dtype) {
  switch (dtype) {
    case HM_FLOAT16:
      return {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0xbc00,
              0x3c01, 0x6800, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0xfe00,
              0x7c01, 0xfc01, 0x7d55, 0x7dff, 0x7fff, 0xffff, 0x7e01, 0x0200};
    case HM_BFLOAT16:
      return {0x0000, 0x8000, 0x0001, 0x807f, 0x0080, 0x3f80, 0xbf80, 0x3f81,
              0x4380, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81,
              0xff81, 0x7fbf, 0x7fff, 0xffff, 0x7fc1, 0x0040};
    case HM_FLOAT32:
      return {0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff, 0x00800000, 0x3f800000,
              0xbf800000, 0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000,
              0x7f800001, 0xff800001, 0x7fa00000, 0x7fbfffff, 0x7fffffff, 0xffffffff, 0x7fc12345,
              0x33000000, 0x477ff000, 0x477fe000, 0x3f801000, 0x3f808000, 0x7f7f8000};
    case HM_FLOAT64:
      return {0x0000000000000000, 0x8000000000000000, 0x0000000000000001, 0x800fffffffffffff,
              0x0010000000000000, 0x3ff0000000000000, 0xbff0000000000000, 0x7fefffffffffffff,
              0xffefffffffffffff, 0x7ff0000000000000, 0xfff0000000000000, 0x7ff8000000000000,
              0xfff8000000000000, 0x7ff0000000000001, 0xfff0000000000001, 0x7ff4000000000000,
              0x7fffffffffffffff, 0x7ff8123456789abc};
    default: {
      const unsigned bits = 8 * static_cast<unsigned>(dtype_size(dtype));
      const std::uint64_t all = bits == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
      const std::uint64_t top = std::uint64_t{1} << (bits - 1);
      return {0, 1, 2, all, all - 1, top, top - 1, top + 1, all >> 1 >> (bits / 2)};
    }
  }
}

// A third special values, the rest arbitrary bit patterns (NaNs among them), written at p.
void fill_special(hm_dtype_t dtype, std::uint8_t* p, std::size_t n, std::mt19937_64& rng) {
  const std::vector<std::uint64_t> specials = special_bits(dtype);
  const std::size_t size = dtype_size(dtype);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t bits = rng();
    if (bits % 3 == 0) bits = specials[(bits >> 8) % specials.size()];
    std::memcpy(p + i * size, &bits, size);  // little-endian: the low bytes
  }
}

std::string hex_element(const std::uint8_t* p, std::size_t size) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, p, size);
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(bits));
  return text;
}

// Room for `count` elements placed `offset` elements past a 64-byte boundary, surrounded by
// guard bytes that must survive.
class Placed {
 public:
  static constexpr std::uint8_t kGuardByte = 0xc3;
  Placed(hm_dtype_t dtype, std::size_t count, std::size_t offset)
      : size_(dtype_size(dtype) * count),
        bytes_(64 + 64 + offset * dtype_size(dtype) + size_ + 64, kGuardByte) {
    const auto base = reinterpret_cast<std::uintptr_t>(bytes_.data() + 64);
    start_ = 64 + (64 - base % 64) % 64 + offset * dtype_size(dtype);
  }
  // A copy of `other`'s elements at `offset`.
  Placed(hm_dtype_t dtype, std::size_t count, std::size_t offset, const Placed& other)
      : Placed(dtype, count, offset) {
    if (size_ > 0) std::memcpy(data(), other.data(), size_);
  }
  Placed(const Placed&) = delete;
  Placed& operator=(const Placed&) = delete;

  std::uint8_t* data() { return bytes_.data() + start_; }
  const std::uint8_t* data() const { return bytes_.data() + start_; }
  Bytes elements() const { return Bytes(data(), data() + size_); }
  bool guards_intact() const {
    for (std::size_t i = 0; i < bytes_.size(); ++i) {
      if ((i < start_ || i >= start_ + size_) && bytes_[i] != kGuardByte) return false;
    }
    return true;
  }

 private:
  std::size_t size_;
  Bytes bytes_;
  std::size_t start_ = 0;
};

// The avx2 result against the portable one element by element (named in a failure), and no
// byte written outside the range.
void expect_same_placed(hm_dtype_t dtype, const Placed& portable, const Placed& vector,
                        std::size_t count, const std::string& context) {
  const std::size_t size = dtype_size(dtype);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint8_t* p = portable.data() + i * size;
    const std::uint8_t* v = vector.data() + i * size;
    if (std::memcmp(p, v, size) != 0) {
      ADD_FAILURE() << context << ": element " << i << " portable " << hex_element(p, size)
                    << " avx2 " << hex_element(v, size);
      return;
    }
  }
  EXPECT_TRUE(portable.guards_intact()) << context << ": portable wrote outside the range";
  EXPECT_TRUE(vector.guards_intact()) << context << ": avx2 wrote outside the range";
}

std::vector<std::size_t> tail_counts() {
  std::vector<std::size_t> counts;
  for (std::size_t n = 0; n <= 70; ++n) counts.push_back(n);
  for (std::size_t n : {255, 256, 257, 1000, 4099}) counts.push_back(n);
  return counts;
}

TEST(ReduceIsa, Avx2ReduceEqualsPortableBitwiseAtEveryAlignmentAndTail) {
  if (!reduce_isa_supported(ReduceIsa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2 + F16C";
  std::mt19937_64 rng(4242);
  for (hm_dtype_t dtype : kAllDtypes) {
    const std::size_t alignments = 32 / dtype_size(dtype);  // element offsets in a vector
    for (hm_op_t op : kAllOps) {
      for (std::size_t count : tail_counts()) {
        for (std::size_t offset = 0; offset < alignments; ++offset) {
          // Long inputs only at a few alignments: the short ones already take every path.
          if (count > 70 && offset % 3 != 0) continue;
          const std::size_t a_offset = offset;
          const std::size_t b_offset = (offset * 3 + 1) % alignments;
          const std::size_t d_offset = (offset * 5 + 2) % alignments;
          const std::string context = std::string(dtype_name(dtype)) + " " + op_name(op) +
                                      " count " + std::to_string(count) + " offset " +
                                      std::to_string(offset);
          Placed a(dtype, count, a_offset);
          Placed b(dtype, count, b_offset);
          fill_special(dtype, a.data(), count, rng);
          fill_special(dtype, b.data(), count, rng);
          const Bytes a_before = a.elements();
          const Bytes b_before = b.elements();

          Placed dst_portable(dtype, count, d_offset);
          Placed dst_vector(dtype, count, d_offset);
          reduce(ReduceIsa::kPortable, dtype, op, dst_portable.data(), a.data(), b.data(), count);
          reduce(ReduceIsa::kAvx2, dtype, op, dst_vector.data(), a.data(), b.data(), count);
          expect_same_placed(dtype, dst_portable, dst_vector, count, context + " out of place");
          EXPECT_TRUE(a.elements() == a_before && b.elements() == b_before)
              << context << ": an input changed";

          Placed in_a_portable(dtype, count, a_offset, a);
          Placed in_a_vector(dtype, count, a_offset, a);
          reduce(ReduceIsa::kPortable, dtype, op, in_a_portable.data(), in_a_portable.data(),
                 b.data(), count);
          reduce(ReduceIsa::kAvx2, dtype, op, in_a_vector.data(), in_a_vector.data(), b.data(),
                 count);
          expect_same_placed(dtype, in_a_portable, in_a_vector, count, context + " dst == a");

          Placed in_b_portable(dtype, count, b_offset, b);
          Placed in_b_vector(dtype, count, b_offset, b);
          reduce(ReduceIsa::kPortable, dtype, op, in_b_portable.data(), a.data(),
                 in_b_portable.data(), count);
          reduce(ReduceIsa::kAvx2, dtype, op, in_b_vector.data(), a.data(), in_b_vector.data(),
                 count);
          expect_same_placed(dtype, in_b_portable, in_b_vector, count, context + " dst == b");
          if (HasFailure()) return;  // one failing case says enough
        }
      }
    }
  }
}

TEST(ReduceIsa, Avx2FinalizeAverageEqualsPortableBitwise) {
  if (!reduce_isa_supported(ReduceIsa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2 + F16C";
  std::mt19937_64 rng(99);
  for (hm_dtype_t dtype : kAllDtypes) {
    for (int nranks : {1, 2, 3, 7, 1000, 65536}) {
      for (std::size_t count : tail_counts()) {
        const std::size_t offset = count % (32 / dtype_size(dtype));
        const std::string context = std::string(dtype_name(dtype)) + " nranks " +
                                    std::to_string(nranks) + " count " + std::to_string(count);
        Placed portable(dtype, count, offset);
        fill_special(dtype, portable.data(), count, rng);
        Placed vector(dtype, count, offset, portable);
        finalize_average(ReduceIsa::kPortable, dtype, portable.data(), count, nranks);
        finalize_average(ReduceIsa::kAvx2, dtype, vector.data(), count, nranks);
        expect_same_placed(dtype, portable, vector, count, context);
        if (HasFailure()) return;
      }
    }
  }
}

// Which NaN a float sum or product returns is part of the results every device reproduces
// (src/core/cuda/element_ops.hpp): b's NaN, quieted, when b is a NaN; else a's, quieted; else
// the default NaN (negative, quiet, no payload) of an invalid operation such as inf - inf.
// Min and max return one operand unchanged, a NaN a included. Checked with 37 equal elements,
// so that both the vector body and the tail of every kernel see them.
template <typename T>
void expect_op_bits(ReduceIsa isa, hm_dtype_t dtype, hm_op_t op, std::uint64_t a_bits,
                    std::uint64_t b_bits, std::uint64_t expected_bits) {
  constexpr std::size_t kCount = 37;
  std::vector<T> a(kCount);
  std::vector<T> b(kCount);
  std::vector<T> dst(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    std::memcpy(&a[i], &a_bits, sizeof(T));
    std::memcpy(&b[i], &b_bits, sizeof(T));
  }
  reduce(isa, dtype, op, dst.data(), a.data(), b.data(), kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &dst[i], sizeof(T));
    ASSERT_EQ(bits, expected_bits)
        << reduce_isa_name(isa) << " " << dtype_name(dtype) << " " << op_name(op) << " of 0x"
        << std::hex << a_bits << " and 0x" << b_bits << ", element " << std::dec << i;
  }
}

TEST(Reduce, FloatNanResultsAreTheSameOnEveryIsa) {
  for (ReduceIsa isa : runnable_isas()) {
    for (hm_op_t op : {HM_SUM, HM_PROD, HM_AVG}) {
      // float32: b's NaN wins and is quieted; a's when b is a number; default NaN otherwise.
      expect_op_bits<float>(isa, HM_FLOAT32, op, 0x7f800001, 0xff800002, 0xffc00002);
      expect_op_bits<float>(isa, HM_FLOAT32, op, 0x7fc00005, 0xffc12345, 0xffc12345);
      expect_op_bits<float>(isa, HM_FLOAT32, op, 0xff800003, 0x3f800000, 0xffc00003);
      expect_op_bits<float>(isa, HM_FLOAT32, op, 0x3f800000, 0x7f800004, 0x7fc00004);
      expect_op_bits<double>(isa, HM_FLOAT64, op, 0x7ff0000000000001, 0xfff0000000000002,
                             0xfff8000000000002);
      expect_op_bits<double>(isa, HM_FLOAT64, op, 0xfff0000000000003, 0x4000000000000000,
                             0xfff8000000000003);
      // float16 0x7c01 is a signalling NaN with payload 1; narrowing quiets it (0x0200).
      expect_op_bits<std::uint16_t>(isa, HM_FLOAT16, op, 0x7c01, 0xfc02, 0xfe02);
      expect_op_bits<std::uint16_t>(isa, HM_FLOAT16, op, 0x7d00, 0x3c00, 0x7f00);
      expect_op_bits<std::uint16_t>(isa, HM_BFLOAT16, op, 0x7f81, 0xff82, 0xffc2);
      expect_op_bits<std::uint16_t>(isa, HM_BFLOAT16, op, 0xff81, 0x3f80, 0xffc1);
    }
    const std::uint64_t inf32 = 0x7f800000, minus_inf32 = 0xff800000;
    expect_op_bits<float>(isa, HM_FLOAT32, HM_SUM, inf32, minus_inf32, 0xffc00000);
    expect_op_bits<float>(isa, HM_FLOAT32, HM_PROD, 0, inf32, 0xffc00000);
    expect_op_bits<double>(isa, HM_FLOAT64, HM_SUM, 0xfff0000000000000, 0x7ff0000000000000,
                           0xfff8000000000000);
    expect_op_bits<std::uint16_t>(isa, HM_FLOAT16, HM_SUM, 0x7c00, 0xfc00, 0xfe00);
    expect_op_bits<std::uint16_t>(isa, HM_BFLOAT16, HM_PROD, 0x0000, 0xff80, 0xffc0);
    // Min and max keep a when either is a NaN (the comparison is false): a signalling a stays
    // signalling in float32, and is quieted only by narrowing to float16.
    expect_op_bits<float>(isa, HM_FLOAT32, HM_MIN, 0x7f800001, 0x3f800000, 0x7f800001);
    expect_op_bits<float>(isa, HM_FLOAT32, HM_MAX, 0x7f800001, 0x3f800000, 0x7f800001);
    expect_op_bits<float>(isa, HM_FLOAT32, HM_MIN, 0x3f800000, 0x7f800001, 0x3f800000);
    expect_op_bits<float>(isa, HM_FLOAT32, HM_MAX, 0x3f800000, 0xffc00000, 0x3f800000);
    expect_op_bits<double>(isa, HM_FLOAT64, HM_MAX, 0x7ff0000000000001, 0, 0x7ff0000000000001);
    expect_op_bits<std::uint16_t>(isa, HM_FLOAT16, HM_MIN, 0x7c01, 0x3c00, 0x7e01);
    expect_op_bits<std::uint16_t>(isa, HM_BFLOAT16, HM_MAX, 0x7f81, 0x3f80, 0x7fc1);
    // Zeros of different signs compare equal: a is kept.
    expect_op_bits<float>(isa, HM_FLOAT32, HM_MIN, 0x00000000, 0x80000000, 0x00000000);
    expect_op_bits<float>(isa, HM_FLOAT32, HM_MAX, 0x80000000, 0x00000000, 0x80000000);
    expect_op_bits<std::uint16_t>(isa, HM_FLOAT16, HM_MIN, 0x0000, 0x8000, 0x0000);
  }
}

// ---- choosing the instruction set ------------------------------------------------------------

void expect_status(hm_status_t status, const std::function<void()>& call,
                   const std::string& context) {
  try {
    call();
    ADD_FAILURE() << context << ": no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << context << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("HOLMES_REDUCE_ISA"), std::string::npos) << e.what();
  }
}

TEST(ReduceIsa, ChoiceFollowsTheSettingAndTheCpu) {
  EXPECT_EQ(choose_reduce_isa(std::nullopt, true), ReduceIsa::kAvx2);
  EXPECT_EQ(choose_reduce_isa(std::nullopt, false), ReduceIsa::kPortable);
  EXPECT_EQ(choose_reduce_isa("auto", true), ReduceIsa::kAvx2);
  EXPECT_EQ(choose_reduce_isa("auto", false), ReduceIsa::kPortable);
  EXPECT_EQ(choose_reduce_isa("portable", true), ReduceIsa::kPortable);
  EXPECT_EQ(choose_reduce_isa("portable", false), ReduceIsa::kPortable);
  EXPECT_EQ(choose_reduce_isa("avx2", true), ReduceIsa::kAvx2);
  expect_status(
      HM_ERR_UNSUPPORTED, [] { choose_reduce_isa("avx2", false); }, "avx2 without it");
  for (const char* bad : {"AVX2", "sse", "avx512", "", "portable "}) {
    expect_status(
        HM_ERR_INVALID_ARGUMENT, [bad] { choose_reduce_isa(bad, true); },
        std::string("setting '") + bad + "'");
  }
}

TEST(ReduceIsa, NamesAndTheProcessChoice) {
  EXPECT_STREQ(reduce_isa_name(ReduceIsa::kPortable), "portable");
  EXPECT_STREQ(reduce_isa_name(ReduceIsa::kAvx2), "avx2");
  EXPECT_TRUE(reduce_isa_supported(ReduceIsa::kPortable));
  const char* setting = std::getenv("HOLMES_REDUCE_ISA");
  const ReduceIsa expected = choose_reduce_isa(setting != nullptr && *setting != '\0'
                                                   ? std::optional<std::string_view>(setting)
                                                   : std::nullopt,
                                               reduce_isa_supported(ReduceIsa::kAvx2));
  EXPECT_EQ(reduce_isa(), expected);
  EXPECT_STREQ(reduce_isa_name(), reduce_isa_name(expected));
}

// The variable is read once per process, so each case runs in a fresh process (a death test
// in the "threadsafe" style re-executes the test binary). Exit codes: 0 as expected, 1 not.
[[noreturn]] void exit_with_isa_chosen_by(const char* setting, ReduceIsa expected) {
  setenv("HOLMES_REDUCE_ISA", setting, 1);
  std::exit(reduce_isa() == expected ? 0 : 1);
}

[[noreturn]] void exit_with_reduce_refused_under(const char* setting) {
  setenv("HOLMES_REDUCE_ISA", setting, 1);
  float a = 1;
  float b = 2;
  float dst = 0;
  try {
    reduce(HM_FLOAT32, HM_SUM, &dst, &a, &b, 1);
  } catch (const Error& e) {
    std::exit(e.status() == HM_ERR_INVALID_ARGUMENT && dst == 0 ? 0 : 1);
  }
  std::exit(1);
}

TEST(ReduceIsa, EnvironmentSelectsTheKernels) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(exit_with_isa_chosen_by("portable", ReduceIsa::kPortable), testing::ExitedWithCode(0),
              "");
  EXPECT_EXIT(exit_with_reduce_refused_under("fastest"), testing::ExitedWithCode(0), "");
  if (reduce_isa_supported(ReduceIsa::kAvx2)) {
    EXPECT_EXIT(exit_with_isa_chosen_by("avx2", ReduceIsa::kAvx2), testing::ExitedWithCode(0), "");
    EXPECT_EXIT(exit_with_isa_chosen_by("auto", ReduceIsa::kAvx2), testing::ExitedWithCode(0), "");
  }
}

}  // namespace
}  // namespace holmes
