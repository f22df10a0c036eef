// Tests of src/core/dtype.hpp: element sizes and names, enum validation, and the float16 and
// bfloat16 conversions every half-precision reduction goes through. The conversions are checked
// exhaustively where the input space allows (all 65536 bit patterns) against references built
// here from first principles (ldexp decoding, brute-force nearest value), so that the test does
// not share the library's bit tricks. The bulk conversions of reduce.hpp are checked against the
// scalar ones bitwise on every instruction set this CPU runs: all 65536 halves, every NaN float,
// and every float at the rounding edges of both formats, at every alignment and tail length.
#include "core/dtype.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/reduce.hpp"
#include "core/status.hpp"

namespace holmes {
namespace {

std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }
float float_of(std::uint32_t bits) { return std::bit_cast<float>(bits); }

bool half_is_nan(std::uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool bf16_is_nan(std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

// Decodes binary16 arithmetically (no bit reinterpretation): the value of sign, exponent and
// mantissa fields as the IEEE 754 definition states it.
double reference_half_value(std::uint16_t h) {
  const bool negative = (h & 0x8000u) != 0;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  double magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  } else {
    magnitude = std::ldexp(static_cast<double>(1024 + mantissa), exponent - 25);
  }
  return negative ? -magnitude : magnitude;
}

// All non-negative finite halves in increasing order (index == bit pattern), for brute-force
// nearest-value search.
std::vector<double> positive_finite_halves() {
  std::vector<double> values;
  for (std::uint32_t h = 0; h < 0x7c00u; ++h) {
    values.push_back(reference_half_value(static_cast<std::uint16_t>(h)));
  }
  return values;
}

// The binary16 that round-to-nearest-even gives for a finite float, found by searching the table
// of all halves rather than by manipulating bits. Values at or past the midpoint between the
// largest half (65504) and the next power of two (65536, what the next step would be) overflow.
std::uint16_t reference_float_to_half(float value, const std::vector<double>& halves) {
  const double magnitude = std::fabs(static_cast<double>(value));
  const std::uint16_t sign = std::signbit(value) ? 0x8000u : 0;
  std::uint16_t result;
  if (magnitude >= 65520.0) {
    result = 0x7c00u;
  } else {
    const auto upper = std::lower_bound(halves.begin(), halves.end(), magnitude);
    if (upper == halves.begin()) {
      result = 0;  // magnitude is exactly zero
    } else if (upper == halves.end()) {
      result = 0x7bffu;  // in (65504, 65520): nearer the largest half than the overflow point
    } else {
      const auto hi = static_cast<std::uint16_t>(upper - halves.begin());
      const auto lo = static_cast<std::uint16_t>(hi - 1);
      if (*upper == magnitude) {
        result = hi;
      } else {
        const double below = magnitude - halves[lo];
        const double above = halves[hi] - magnitude;
        if (below < above) {
          result = lo;
        } else if (above < below) {
          result = hi;
        } else {
          result = (lo & 1u) == 0 ? lo : hi;
        }
      }
    }
  }
  return static_cast<std::uint16_t>(sign | result);
}

TEST(DtypeHalf, EveryBitPatternDecodesToTheIeeeValue) {
  for (std::uint32_t i = 0; i <= 0xffffu; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float decoded = half_to_float(h);
    const double expected = reference_half_value(h);
    if (half_is_nan(h)) {
      EXPECT_TRUE(std::isnan(decoded)) << "half 0x" << std::hex << i;
      // The sign of a NaN is still carried (it is visible to copysign and to the wire).
      EXPECT_EQ(std::signbit(decoded), (h & 0x8000u) != 0) << "half 0x" << std::hex << i;
    } else {
      // Compare as doubles (exact: every half is a float) and signs separately for +-0.
      EXPECT_EQ(static_cast<double>(decoded), expected) << "half 0x" << std::hex << i;
      EXPECT_EQ(std::signbit(decoded), std::signbit(expected)) << "half 0x" << std::hex << i;
    }
  }
}

TEST(DtypeHalf, EveryBitPatternRoundTripsThroughFloat) {
  for (std::uint32_t i = 0; i <= 0xffffu; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const std::uint16_t back = float_to_half(half_to_float(h));
    if (half_is_nan(h)) {
      // A signalling NaN may come back quieted, but it must stay a NaN of the same sign.
      EXPECT_TRUE(half_is_nan(back)) << "half 0x" << std::hex << i << " -> 0x" << back;
      EXPECT_EQ(back & 0x8000u, h & 0x8000u) << "half 0x" << std::hex << i;
    } else {
      EXPECT_EQ(back, h) << "half 0x" << std::hex << i;
    }
  }
}

// For every pair of adjacent finite halves (subnormals, binade boundaries and the top of the
// range included), the float exactly halfway between them must go to the one with an even
// mantissa, and the floats just either side of the midpoint to the nearer one. The midpoint
// needs 12 significant bits, so it is exact in float32.
TEST(DtypeHalf, TiesRoundToEvenAtEveryMidpoint) {
  for (std::uint32_t lo = 0; lo < 0x7bffu; ++lo) {
    const std::uint32_t hi = lo + 1;
    const double mid_exact = (reference_half_value(static_cast<std::uint16_t>(lo)) +
                              reference_half_value(static_cast<std::uint16_t>(hi))) /
                             2;
    const auto mid = static_cast<float>(mid_exact);
    ASSERT_EQ(static_cast<double>(mid), mid_exact) << "midpoint not exact for 0x" << std::hex << lo;
    const std::uint32_t even = (lo & 1u) == 0 ? lo : hi;
    EXPECT_EQ(float_to_half(mid), even) << "midpoint above 0x" << std::hex << lo;
    EXPECT_EQ(float_to_half(-mid), 0x8000u | even) << "midpoint above -0x" << std::hex << lo;
    EXPECT_EQ(float_to_half(std::nextafter(mid, 0.0f)), lo) << "below mid 0x" << std::hex << lo;
    EXPECT_EQ(float_to_half(std::nextafter(mid, 1e9f)), hi) << "above mid 0x" << std::hex << lo;
  }
}

TEST(DtypeHalf, RandomFloatsMatchBruteForceNearest) {
  const auto halves = positive_finite_halves();
  std::mt19937 rng(20240611);
  // Exponents from well below the smallest subnormal half to above the largest half, with a
  // random sign and mantissa, so every rounding path is taken many times.
  std::uniform_int_distribution<int> exponent(127 - 30, 127 + 17);
  std::uniform_int_distribution<std::uint32_t> mantissa(0, 0x7fffffu);
  std::uniform_int_distribution<std::uint32_t> sign(0, 1);
  for (int i = 0; i < 200000; ++i) {
    const std::uint32_t bits =
        (sign(rng) << 31) | (static_cast<std::uint32_t>(exponent(rng)) << 23) | mantissa(rng);
    const float value = float_of(bits);
    ASSERT_EQ(float_to_half(value), reference_float_to_half(value, halves))
        << "float bits 0x" << std::hex << bits << " (" << value << ")";
  }
}

TEST(DtypeHalf, OverflowGoesToInfinity) {
  // 65520 is the midpoint between 65504 (largest half) and 65536: ties-to-even picks the
  // "even" 65536, which is not representable, hence infinity.
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00u);
  EXPECT_EQ(float_to_half(-65520.0f), 0xfc00u);
  EXPECT_EQ(float_to_half(65519.99f), 0x7bffu);
  EXPECT_EQ(half_to_float(0x7bffu), 65504.0f);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bffu);
  EXPECT_EQ(float_to_half(65536.0f), 0x7c00u);
  EXPECT_EQ(float_to_half(1e10f), 0x7c00u);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::max()), 0x7c00u);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::max()), 0xfc00u);
}

TEST(DtypeHalf, InfinitiesAndZeros) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_half(inf), 0x7c00u);
  EXPECT_EQ(float_to_half(-inf), 0xfc00u);
  EXPECT_EQ(half_to_float(0x7c00u), inf);
  EXPECT_EQ(half_to_float(0xfc00u), -inf);
  EXPECT_EQ(float_to_half(0.0f), 0x0000u);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000u);
  EXPECT_EQ(bits_of(half_to_float(0x8000u)), 0x80000000u);
  EXPECT_EQ(bits_of(half_to_float(0x0000u)), 0x00000000u);
  // A negative value too small for any half keeps its sign: -0, not +0.
  EXPECT_EQ(float_to_half(-std::ldexp(1.0f, -30)), 0x8000u);
  // Float subnormals are far below the half range.
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::denorm_min()), 0x0000u);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::denorm_min()), 0x8000u);
}

TEST(DtypeHalf, Subnormals) {
  const float two_m24 = std::ldexp(1.0f, -24);
  const float two_m25 = std::ldexp(1.0f, -25);
  EXPECT_EQ(float_to_half(two_m24), 0x0001u);  // smallest subnormal half
  EXPECT_EQ(half_to_float(0x0001u), two_m24);
  EXPECT_EQ(float_to_half(two_m25), 0x0000u);  // tie between 0 and 2^-24: 0 is even
  EXPECT_EQ(float_to_half(-two_m25), 0x8000u);
  EXPECT_EQ(float_to_half(1.5f * two_m25), 0x0001u);
  EXPECT_EQ(float_to_half(std::nextafter(two_m25, 1.0f)), 0x0001u);
  EXPECT_EQ(float_to_half(3.0f * two_m25), 0x0002u);     // tie between 1 and 2 (x 2^-24): even 2
  EXPECT_EQ(float_to_half(5.0f * two_m25), 0x0002u);     // tie between 2 and 3: even 2
  EXPECT_EQ(half_to_float(0x03ffu), 1023.0f * two_m24);  // largest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14)), 0x0400u);  // smallest normal
  // Halfway between the largest subnormal (odd) and the smallest normal (even): rounds up
  // across the subnormal/normal boundary.
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14) - two_m25), 0x0400u);
}

TEST(DtypeHalf, NanStaysNan) {
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(half_is_nan(float_to_half(qnan)));
  EXPECT_TRUE(half_is_nan(float_to_half(-qnan)));
  EXPECT_EQ(float_to_half(-qnan) & 0x8000u, 0x8000u);
  // Payloads only in the low 13 bits would be lost by a plain shift and turn into infinity.
  EXPECT_TRUE(half_is_nan(float_to_half(float_of(0x7f800001u))));
  EXPECT_TRUE(half_is_nan(float_to_half(float_of(0xff800001u))));
  EXPECT_TRUE(half_is_nan(float_to_half(float_of(0x7f801fffu))));
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00u)));
  EXPECT_TRUE(std::isnan(half_to_float(0x7c01u)));
}

TEST(DtypeBfloat16, EveryBitPatternIsTheUpperHalfOfAFloat) {
  for (std::uint32_t i = 0; i <= 0xffffu; ++i) {
    const auto b = static_cast<std::uint16_t>(i);
    EXPECT_EQ(bits_of(bfloat16_to_float(b)), i << 16) << "bf16 0x" << std::hex << i;
  }
}

TEST(DtypeBfloat16, EveryBitPatternRoundTripsThroughFloat) {
  for (std::uint32_t i = 0; i <= 0xffffu; ++i) {
    const auto b = static_cast<std::uint16_t>(i);
    const std::uint16_t back = float_to_bfloat16(bfloat16_to_float(b));
    if (bf16_is_nan(b)) {
      EXPECT_TRUE(bf16_is_nan(back)) << "bf16 0x" << std::hex << i << " -> 0x" << back;
      EXPECT_EQ(back & 0x8000u, b & 0x8000u) << "bf16 0x" << std::hex << i;
    } else {
      EXPECT_EQ(back, b) << "bf16 0x" << std::hex << i;
    }
  }
}

// bfloat16 values of one sign are ordered like their bit patterns, so the float whose low 16
// bits are 0x8000 is exactly halfway between bf16 patterns b and b + 1 (even at binade
// boundaries, and between the largest finite value and infinity).
TEST(DtypeBfloat16, TiesRoundToEvenAtEveryMidpoint) {
  for (std::uint32_t sign : {0x0000u, 0x8000u}) {
    for (std::uint32_t magnitude = 0; magnitude < 0x7f80u; ++magnitude) {
      const std::uint32_t b = sign | magnitude;
      const std::uint32_t even = (b & 1u) == 0 ? b : b + 1;
      EXPECT_EQ(float_to_bfloat16(float_of((b << 16) | 0x8000u)), even)
          << "midpoint above 0x" << std::hex << b;
      EXPECT_EQ(float_to_bfloat16(float_of((b << 16) | 0x7fffu)), b)
          << "below midpoint above 0x" << std::hex << b;
      EXPECT_EQ(float_to_bfloat16(float_of((b << 16) | 0x8001u)), b + 1)
          << "above midpoint above 0x" << std::hex << b;
    }
  }
}

TEST(DtypeBfloat16, SpecificValues) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80u);
  EXPECT_EQ(float_to_bfloat16(-2.0f), 0xc000u);
  EXPECT_EQ(float_to_bfloat16(-0.0f), 0x8000u);
  EXPECT_EQ(float_to_bfloat16(0.0f), 0x0000u);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: the even one is 1.
  EXPECT_EQ(float_to_bfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80u);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(float_to_bfloat16(1.0f + 3.0f * std::ldexp(1.0f, -8)), 0x3f82u);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_bfloat16(inf), 0x7f80u);
  EXPECT_EQ(float_to_bfloat16(-inf), 0xff80u);
}

TEST(DtypeBfloat16, LargeValuesRoundToInfinity) {
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()), 0x7f80u);
  EXPECT_EQ(float_to_bfloat16(-std::numeric_limits<float>::max()), 0xff80u);
  // The largest finite bfloat16 (0x7f7f) is kept; the float just above its upper midpoint is not.
  EXPECT_EQ(float_to_bfloat16(float_of(0x7f7f0000u)), 0x7f7fu);
  EXPECT_EQ(float_to_bfloat16(float_of(0x7f7f7fffu)), 0x7f7fu);
  EXPECT_EQ(float_to_bfloat16(float_of(0x7f7f8000u)), 0x7f80u);
}

TEST(DtypeBfloat16, NanStaysNan) {
  // Every float NaN, including those whose payload lies only in the low 16 bits that truncation
  // drops (a careless rounding would turn them into infinity or carry into the sign).
  for (std::uint32_t sign : {0x00000000u, 0x80000000u}) {
    for (std::uint32_t payload :
         {0x000001u, 0x00ffffu, 0x007fffu, 0x008000u, 0x400000u, 0x7fffffu, 0x7f8000u, 0x010000u}) {
      const std::uint32_t bits = sign | 0x7f800000u | payload;
      const std::uint16_t b = float_to_bfloat16(float_of(bits));
      EXPECT_TRUE(bf16_is_nan(b)) << "float bits 0x" << std::hex << bits << " -> 0x" << b;
      EXPECT_EQ(b & 0x8000u, sign >> 16) << "float bits 0x" << std::hex << bits;
    }
  }
}

TEST(DtypeInfo, SizeAndNameOfEveryDtype) {
  struct Expected {
    hm_dtype_t dtype;
    std::size_t size;
    const char* name;
  };
  const Expected table[] = {
      {HM_INT8, 1, "int8"},       {HM_UINT8, 1, "uint8"},       {HM_INT32, 4, "int32"},
      {HM_UINT32, 4, "uint32"},   {HM_INT64, 8, "int64"},       {HM_UINT64, 8, "uint64"},
      {HM_FLOAT16, 2, "float16"}, {HM_BFLOAT16, 2, "bfloat16"}, {HM_FLOAT32, 4, "float32"},
      {HM_FLOAT64, 8, "float64"},
  };
  ASSERT_EQ(std::size(table), static_cast<std::size_t>(HM_DTYPE_COUNT));
  for (const auto& e : table) {
    EXPECT_EQ(dtype_size(e.dtype), e.size) << e.name;
    EXPECT_STREQ(dtype_name(e.dtype), e.name);
  }
}

TEST(DtypeInfo, InvalidDtypeHasNoSizeAndAnInvalidName) {
  for (int value : {-1, static_cast<int>(HM_DTYPE_COUNT), 11, 255, INT_MAX, INT_MIN}) {
    const auto dtype = static_cast<hm_dtype_t>(value);
    EXPECT_EQ(dtype_size(dtype), 0u) << value;
    EXPECT_STREQ(dtype_name(dtype), "invalid-dtype") << value;
  }
}

TEST(DtypeInfo, NameOfEveryOp) {
  EXPECT_STREQ(op_name(HM_SUM), "sum");
  EXPECT_STREQ(op_name(HM_PROD), "prod");
  EXPECT_STREQ(op_name(HM_MIN), "min");
  EXPECT_STREQ(op_name(HM_MAX), "max");
  EXPECT_STREQ(op_name(HM_AVG), "avg");
  EXPECT_STREQ(op_name(static_cast<hm_op_t>(HM_OP_COUNT)), "invalid-op");
  EXPECT_STREQ(op_name(static_cast<hm_op_t>(-1)), "invalid-op");
}

TEST(DtypeInfo, ValidityOfDtypeAndOpIntegers) {
  for (int v = 0; v < HM_DTYPE_COUNT; ++v) EXPECT_TRUE(dtype_valid(v)) << v;
  for (int v = 0; v < HM_OP_COUNT; ++v) EXPECT_TRUE(op_valid(v)) << v;
  for (int v : {-1, static_cast<int>(HM_DTYPE_COUNT), 100, INT_MAX, INT_MIN}) {
    EXPECT_FALSE(dtype_valid(v)) << v;
  }
  for (int v : {-1, static_cast<int>(HM_OP_COUNT), 100, INT_MAX, INT_MIN}) {
    EXPECT_FALSE(op_valid(v)) << v;
  }
}

// ---- bulk conversions (reduce.hpp) -----------------------------------------------------------

std::vector<ReduceIsa> runnable_isas() {
  std::vector<ReduceIsa> isas;
  for (ReduceIsa isa : {ReduceIsa::kPortable, ReduceIsa::kAvx2}) {
    if (reduce_isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

constexpr hm_dtype_t kHalfDtypes[] = {HM_FLOAT16, HM_BFLOAT16};

std::uint16_t scalar_narrow(hm_dtype_t dtype, float value) {
  return dtype == HM_BFLOAT16 ? float_to_bfloat16(value) : float_to_half(value);
}
float scalar_widen(hm_dtype_t dtype, std::uint16_t value) {
  return dtype == HM_BFLOAT16 ? bfloat16_to_float(value) : half_to_float(value);
}

std::vector<std::uint16_t> every_half() {
  std::vector<std::uint16_t> all(65536);
  for (std::uint32_t i = 0; i <= 0xffffu; ++i) all[i] = static_cast<std::uint16_t>(i);
  return all;
}

// Narrows `in` on `isa` and expects the scalar conversion's bits for every element.
void expect_bulk_narrow(ReduceIsa isa, hm_dtype_t dtype, const std::vector<float>& in) {
  std::vector<std::uint16_t> out(in.size());
  narrow_from_float(isa, dtype, in, out);
  for (std::size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(out[i], scalar_narrow(dtype, in[i]))
        << reduce_isa_name(isa) << " " << dtype_name(dtype) << " float bits 0x" << std::hex
        << bits_of(in[i]);
  }
}

TEST(DtypeBulk, EveryHalfWidensExactlyAsTheScalarConversion) {
  const std::vector<std::uint16_t> all = every_half();
  for (ReduceIsa isa : runnable_isas()) {
    for (hm_dtype_t dtype : kHalfDtypes) {
      std::vector<float> out(all.size());
      widen_to_float(isa, dtype, all, out);
      for (std::uint32_t i = 0; i <= 0xffffu; ++i) {
        // Signalling NaNs included: they keep their quiet bit clear.
        ASSERT_EQ(bits_of(out[i]), bits_of(scalar_widen(dtype, static_cast<std::uint16_t>(i))))
            << reduce_isa_name(isa) << " " << dtype_name(dtype) << " 0x" << std::hex << i;
      }
    }
  }
}

TEST(DtypeBulk, EveryHalfRoundTripsAsTheScalarConversions) {
  const std::vector<std::uint16_t> all = every_half();
  for (ReduceIsa isa : runnable_isas()) {
    for (hm_dtype_t dtype : kHalfDtypes) {
      std::vector<float> wide(all.size());
      std::vector<std::uint16_t> back(all.size());
      widen_to_float(isa, dtype, all, wide);
      narrow_from_float(isa, dtype, wide, back);
      for (std::uint32_t i = 0; i <= 0xffffu; ++i) {
        const auto h = static_cast<std::uint16_t>(i);
        // Numbers come back unchanged; NaNs come back quieted, as from the scalar functions.
        ASSERT_EQ(back[i], scalar_narrow(dtype, scalar_widen(dtype, h)))
            << reduce_isa_name(isa) << " " << dtype_name(dtype) << " 0x" << std::hex << i;
        const bool nan = dtype == HM_BFLOAT16 ? bf16_is_nan(h) : half_is_nan(h);
        if (!nan) {
          ASSERT_EQ(back[i], h) << dtype_name(dtype) << " 0x" << std::hex << i;
        }
      }
    }
  }
}

// Every float NaN and infinity (2^24 bit patterns), in chunks.
TEST(DtypeBulk, EveryNanAndInfinityNarrowsAsTheScalarConversion) {
  constexpr std::uint32_t kChunk = 1u << 20;
  std::vector<float> in(kChunk);
  for (std::uint32_t sign : {0x00000000u, 0x80000000u}) {
    for (std::uint32_t first = 0; first < (1u << 23); first += kChunk) {
      for (std::uint32_t i = 0; i < kChunk; ++i) {
        in[i] = float_of(sign | 0x7f800000u | (first + i));
      }
      for (ReduceIsa isa : runnable_isas()) {
        for (hm_dtype_t dtype : kHalfDtypes) {
          expect_bulk_narrow(isa, dtype, in);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// Every sign, exponent and top 7 mantissa bits (the 65536 bfloat16 patterns) with low 16 bits
// at and around both formats' rounding points: bfloat16's halfway (0x8000), float16's for
// normals (0x1000 with the kept bit 0 or 1) and the exact values. Float16 subnormals round at
// higher bits, which the enumerated upper half covers with low bits 0, 1 and 0xffff.
TEST(DtypeBulk, RoundingEdgesNarrowAsTheScalarConversion) {
  std::mt19937 rng(31337);
  const std::uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x0fff,
                                0x1000, 0x1001, 0x2fff, 0x3000, 0x3001, 0x2000, 0xe000};
  std::vector<float> in;
  for (std::uint32_t high = 0; high <= 0xffffu; ++high) {
    for (std::uint32_t low : lows) in.push_back(float_of((high << 16) | low));
    in.push_back(float_of((high << 16) | (rng() & 0xffffu)));
    in.push_back(float_of((high << 16) | (rng() & 0xffffu)));
  }
  for (ReduceIsa isa : runnable_isas()) {
    for (hm_dtype_t dtype : kHalfDtypes) {
      expect_bulk_narrow(isa, dtype, in);
      if (HasFatalFailure()) return;
    }
  }
}

// Spans at every alignment with every tail length: nothing outside them is written.
TEST(DtypeBulk, EveryAlignmentAndTailLength) {
  std::mt19937 rng(5);
  constexpr std::size_t kMax = 70;
  constexpr std::size_t kSlack = 16;
  for (ReduceIsa isa : runnable_isas()) {
    for (hm_dtype_t dtype : kHalfDtypes) {
      for (std::size_t count = 0; count <= kMax; ++count) {
        for (std::size_t offset = 0; offset < kSlack; ++offset) {
          std::vector<std::uint16_t> halves(kMax + 2 * kSlack);
          std::vector<float> floats(kMax + 2 * kSlack);
          for (auto& h : halves) h = static_cast<std::uint16_t>(rng());
          for (auto& f : floats) f = float_of(rng());
          std::vector<float> wide = floats;
          std::vector<std::uint16_t> narrow = halves;
          widen_to_float(isa, dtype, std::span(halves).subspan(offset, count),
                         std::span(wide).subspan(offset, count));
          narrow_from_float(isa, dtype, std::span(floats).subspan(offset, count),
                            std::span(narrow).subspan(offset, count));
          for (std::size_t i = 0; i < halves.size(); ++i) {
            const bool inside = i >= offset && i < offset + count;
            const std::uint32_t want_wide =
                inside ? bits_of(scalar_widen(dtype, halves[i])) : bits_of(floats[i]);
            const std::uint16_t want_narrow = inside ? scalar_narrow(dtype, floats[i]) : halves[i];
            ASSERT_EQ(bits_of(wide[i]), want_wide)
                << reduce_isa_name(isa) << " " << dtype_name(dtype) << " count " << count
                << " offset " << offset << " element " << i;
            ASSERT_EQ(narrow[i], want_narrow)
                << reduce_isa_name(isa) << " " << dtype_name(dtype) << " count " << count
                << " offset " << offset << " element " << i;
          }
        }
      }
    }
  }
}

TEST(DtypeBulk, BadArgumentsAreInvalidArgument) {
  std::vector<std::uint16_t> halves(4);
  std::vector<float> floats(4);
  std::vector<float> three(3);
  const auto expect_invalid = [](auto call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << ": no exception";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT) << what << ": " << e.what();
    }
  };
  for (ReduceIsa isa : runnable_isas()) {
    expect_invalid([&] { widen_to_float(isa, HM_FLOAT32, halves, floats); }, "float32 widen");
    expect_invalid([&] { narrow_from_float(isa, HM_INT32, floats, halves); }, "int32 narrow");
    expect_invalid([&] { widen_to_float(isa, HM_FLOAT16, halves, three); }, "short output");
    expect_invalid([&] { narrow_from_float(isa, HM_BFLOAT16, three, halves); }, "long output");
  }
}

}  // namespace
}  // namespace holmes
