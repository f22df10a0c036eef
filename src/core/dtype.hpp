// Element types: sizes, names, validation, and the float16/bfloat16 <-> float32 conversions
// that every half-precision reduction goes through.
#pragma once

#include <holmes/holmes.h>

#include <bit>
#include <cstddef>
#include <cstdint>

namespace holmes {

constexpr bool dtype_valid(int dtype) { return dtype >= 0 && dtype < HM_DTYPE_COUNT; }
constexpr bool op_valid(int op) { return op >= 0 && op < HM_OP_COUNT; }

// Size in bytes of one element; 0 for an invalid value.
constexpr std::size_t dtype_size(hm_dtype_t dtype) {
  switch (dtype) {
    case HM_INT8:
    case HM_UINT8:
      return 1;
    case HM_FLOAT16:
    case HM_BFLOAT16:
      return 2;
    case HM_INT32:
    case HM_UINT32:
    case HM_FLOAT32:
      return 4;
    case HM_INT64:
    case HM_UINT64:
    case HM_FLOAT64:
      return 8;
    default:
      return 0;
  }
}

const char* dtype_name(hm_dtype_t dtype) noexcept;  // "float32", "bfloat16", ...
const char* op_name(hm_op_t op) noexcept;           // "sum", "avg", ...

// IEEE 754 binary16 -> binary32, exact.
inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float32.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(magnitude) | sign);
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// binary32 -> binary16 with round-to-nearest-even; overflow gives infinity, NaN stays NaN.
inline std::uint16_t float_to_half(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: quiet, keep the top payload bits
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  const int exponent = static_cast<int>(magnitude >> 23) - 127;
  if (exponent > 15) return static_cast<std::uint16_t>(sign | 0x7c00u);  // includes infinity
  if (magnitude <= 0x33000000u) return sign;  // <= 2^-25 rounds to zero (the tie goes to even)
  const std::uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  // Normal halves keep 11 significant bits; subnormal halves fewer, fixed at 2^-24 steps.
  const int dropped = exponent >= -14 ? 13 : 13 + (-14 - exponent);
  std::uint32_t kept = significand >> dropped;
  const std::uint32_t remainder = significand & ((1u << dropped) - 1);
  const std::uint32_t halfway = 1u << (dropped - 1);
  if (remainder > halfway || (remainder == halfway && (kept & 1u))) ++kept;
  if (exponent >= -14) {
    // kept is in [0x400, 0x800]; a carry into 0x800 bumps the exponent (up to infinity).
    const auto biased = static_cast<std::uint32_t>(exponent + 15);
    return static_cast<std::uint16_t>(sign | (((biased - 1) << 10) + kept));
  }
  return static_cast<std::uint16_t>(sign | kept);  // may round up into the smallest normal
}

inline float bfloat16_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

// binary32 -> bfloat16 with round-to-nearest-even; NaN stays NaN.
inline std::uint16_t float_to_bfloat16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

}  // namespace holmes
