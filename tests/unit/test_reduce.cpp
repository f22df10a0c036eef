// Tests of src/core/reduce.hpp: reduce() for every dtype x op against a reference written here in
// plain C++ (wider arithmetic, then conversion), at counts around the 256-element blocks of the
// half-precision path, in place and out of place; finalize_average(); and argument validation.
#include "core/reduce.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.hpp"
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
  for (hm_dtype_t dtype : kAllDtypes) {
    for (hm_op_t op : kAllOps) {
      for (std::size_t count : kCounts) {
        const std::string context =
            std::string(dtype_name(dtype)) + " " + op_name(op) + " count " + std::to_string(count);
        const Bytes a = random_inputs(dtype, count, rng);
        const Bytes b = random_inputs(dtype, count, rng);
        const Bytes expected = reference_reduce(dtype, op, a, b, count);

        // Out of place; the sentinel byte after dst must survive (no write past count).
        Bytes dst(expected.size() + 1, 0xa5);
        reduce(dtype, op, dst.data(), a.data(), b.data(), count);
        EXPECT_EQ(dst.back(), 0xa5) << context << ": wrote past the end";
        dst.pop_back();
        expect_same(dtype, expected, dst, context + " out of place");

        Bytes in_a = a;
        reduce(dtype, op, in_a.data(), in_a.data(), b.data(), count);
        expect_same(dtype, expected, in_a, context + " dst == a");

        Bytes in_b = b;
        reduce(dtype, op, in_b.data(), a.data(), in_b.data(), count);
        expect_same(dtype, expected, in_b, context + " dst == b");
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
  for (hm_dtype_t dtype : kAllDtypes) {
    for (int nranks : {1, 2, 3, 7, 200, 1000}) {
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{257}}) {
        const std::string context = std::string(dtype_name(dtype)) + " nranks " +
                                    std::to_string(nranks) + " count " + std::to_string(count);
        const Bytes input = random_inputs(dtype, count, rng);
        const Bytes expected = reference_finalize(dtype, input, count, nranks);
        Bytes actual = input;
        actual.push_back(0x5a);  // sentinel: nothing past count is touched
        finalize_average(dtype, actual.data(), count, nranks);
        EXPECT_EQ(actual.back(), 0x5a) << context;
        actual.pop_back();
        expect_same(dtype, expected, actual, context);
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

}  // namespace
}  // namespace holmes
