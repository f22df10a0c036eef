// Shared by the tests in tests/cuda: skipping (or failing) tests that need a GPU, inputs that
// reach every corner of the reduction kernels, and byte-exact comparison.
#pragma once

#include <gtest/gtest.h>
#include <holmes/holmes.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/memory.hpp"
#include "core/dtype.hpp"

namespace holmes::testing {

// bench/gpu-check.sh sets HOLMES_REQUIRE_CUDA_DEVICE=1: on a GPU machine a test that would skip
// for want of a device is a failure.
inline bool device_required() {
  const char* value = std::getenv("HOLMES_REQUIRE_CUDA_DEVICE");
  return value != nullptr && std::string(value) == "1";
}

// Ends the test unless a CUDA device is usable: skipped with the reason, or failed when one is
// required (see above).
#define HOLMES_REQUIRE_CUDA_DEVICE()                                                           \
  do {                                                                                         \
    std::string holmes_why_no_device;                                                          \
    if (!::holmes::cuda_device_available(&holmes_why_no_device)) {                             \
      if (::holmes::testing::device_required()) {                                              \
        FAIL() << "HOLMES_REQUIRE_CUDA_DEVICE=1 but no CUDA device: " << holmes_why_no_device; \
      }                                                                                        \
      GTEST_SKIP() << "needs a CUDA device: " << holmes_why_no_device;                         \
    }                                                                                          \
  } while (false)

inline constexpr hm_dtype_t kAllDtypes[] = {HM_INT8,    HM_UINT8,  HM_INT32,   HM_UINT32,
                                            HM_INT64,   HM_UINT64, HM_FLOAT16, HM_BFLOAT16,
                                            HM_FLOAT32, HM_FLOAT64};
inline constexpr hm_op_t kAllOps[] = {HM_SUM, HM_PROD, HM_MIN, HM_MAX, HM_AVG};

using Bytes = std::vector<std::uint8_t>;

// Bit patterns that exercise the float paths: signed zeros, infinities, quiet and signalling
// NaNs with payloads and both signs, subnormals, the extremes of the normal range, and values
// whose sums and products round or overflow.
inline std::vector<std::uint16_t> special_halves() {
  return {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7d01, 0xfd55, 0x7e3f, 0x0001,
          0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x3c00, 0xbc00, 0x3c01, 0x5bff, 0x0200};
}
inline std::vector<std::uint16_t> special_bfloat16s() {
  return {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0xffa5, 0x7fc3, 0x0001,
          0x8001, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x3f80, 0xbf80, 0x3f81, 0x4f7f, 0x0040};
}
inline std::vector<std::uint32_t> special_floats() {
  return {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
          0x7f800001u, 0xff812345u, 0x7fc54321u, 0x00000001u, 0x80000001u, 0x007fffffu,
          0x00800000u, 0x7f7fffffu, 0xff7fffffu, 0x3f800000u, 0xbf800000u, 0x3f800001u,
          0x33000000u, 0x33000001u, 0x387fc000u, 0x38800000u, 0x477ff000u, 0x477fefffu};
}
inline std::vector<std::uint64_t> special_doubles() {
  return {0x0000000000000000ull, 0x8000000000000000ull, 0x7ff0000000000000ull,
          0xfff0000000000000ull, 0x7ff8000000000000ull, 0xfff8000000000000ull,
          0x7ff0000000000001ull, 0xfff0000012345678ull, 0x7ff8000087654321ull,
          0x0000000000000001ull, 0x8000000000000001ull, 0x000fffffffffffffull,
          0x0010000000000000ull, 0x7fefffffffffffffull, 0xffefffffffffffffull,
          0x3ff0000000000000ull, 0xbff0000000000000ull, 0x3ff0000000000001ull};
}

// `n` elements of `dtype`: integers are arbitrary bit patterns; floats mix arbitrary bit patterns
// (every exponent, NaNs included), moderate values where rounding matters, and the special
// values above.
inline Bytes random_inputs(hm_dtype_t dtype, std::size_t n, std::mt19937_64& rng) {
  const std::size_t size = dtype_size(dtype);
  Bytes out(n * size);
  std::uniform_real_distribution<double> moderate(-100.0, 100.0);
  const auto halves = special_halves();
  const auto bfloats = special_bfloat16s();
  const auto floats = special_floats();
  const auto doubles = special_doubles();
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t bits = rng();
    const unsigned flavour = static_cast<unsigned>(bits >> 60) % 4;  // 0, 1: random; 2: moderate
    const std::uint64_t pick = rng();
    switch (dtype) {
      case HM_FLOAT16:
        if (flavour == 2) bits = float_to_half(static_cast<float>(moderate(rng)));
        if (flavour == 3) bits = halves[pick % halves.size()];
        break;
      case HM_BFLOAT16:
        if (flavour == 2) bits = float_to_bfloat16(static_cast<float>(moderate(rng)));
        if (flavour == 3) bits = bfloats[pick % bfloats.size()];
        break;
      case HM_FLOAT32:
        if (flavour == 2) {
          const auto f = static_cast<float>(moderate(rng));
          std::uint32_t u;
          std::memcpy(&u, &f, 4);
          bits = u;
        }
        if (flavour == 3) bits = floats[pick % floats.size()];
        break;
      case HM_FLOAT64:
        if (flavour == 2) {
          const double d = moderate(rng);
          std::memcpy(&bits, &d, 8);
        }
        if (flavour == 3) bits = doubles[pick % doubles.size()];
        break;
      default:
        break;
    }
    std::memcpy(out.data() + i * size, &bits, size);  // little-endian: the low bytes
  }
  return out;
}

// "" when equal byte for byte, else which elements differ (the first few, in hex).
inline std::string first_differences(hm_dtype_t dtype, const Bytes& expected, const Bytes& actual) {
  if (expected.size() != actual.size()) {
    return "sizes differ: " + std::to_string(expected.size()) + " vs " +
           std::to_string(actual.size());
  }
  const std::size_t size = dtype_size(dtype);
  std::string report;
  int reported = 0;
  for (std::size_t i = 0; i * size < expected.size(); ++i) {
    if (std::memcmp(expected.data() + i * size, actual.data() + i * size, size) == 0) continue;
    auto hex = [&](const Bytes& bytes) {
      std::uint64_t v = 0;
      std::memcpy(&v, bytes.data() + i * size, size);
      char text[32];
      std::snprintf(text, sizeof text, "0x%0*llx", static_cast<int>(size * 2),
                    static_cast<unsigned long long>(v));
      return std::string(text);
    };
    report += "element " + std::to_string(i) + ": expected " + hex(expected) + " got " +
              hex(actual) + "; ";
    if (++reported == 5) break;
  }
  return report;
}

inline std::string describe(hm_dtype_t dtype, hm_op_t op, std::size_t count) {
  return std::string(dtype_name(dtype)) + " " + op_name(op) + " count " + std::to_string(count);
}

}  // namespace holmes::testing
