#include "check_data.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.hpp"

namespace holmes::check {
namespace {

bool is_unsigned(hm_dtype_t dtype) {
  return dtype == HM_UINT8 || dtype == HM_UINT32 || dtype == HM_UINT64;
}
bool is_float(hm_dtype_t dtype) {
  return dtype == HM_FLOAT16 || dtype == HM_BFLOAT16 || dtype == HM_FLOAT32 || dtype == HM_FLOAT64;
}

// Integers wrap modulo 2^bits, as the library defines integer sum and product.
template <typename T>
void store_integer(double value, void* element) {
  const auto wide = static_cast<std::int64_t>(value);
  const T narrow = static_cast<T>(static_cast<std::uint64_t>(wide));
  std::memcpy(element, &narrow, sizeof(T));
}

// input_value depends on the index only through index * 7 mod 9 and mod 5: every pattern repeats
// after 45 elements, so fill the first period and copy it forward (16 MiB buffers stay cheap).
constexpr std::size_t kPeriod = 45;

template <typename ElementFn>
void fill_periodic(unsigned char* out, std::size_t count, std::size_t es, ElementFn element) {
  const std::size_t head = std::min(count, kPeriod);
  for (std::size_t i = 0; i < head; ++i) element(i, out + i * es);
  // `done` stays a multiple of the period, so position `done` starts a period again; each copy
  // doubles the filled prefix.
  for (std::size_t done = head; done < count;) {
    const std::size_t take = std::min(done, count - done);
    std::memcpy(out + done * es, out, take * es);
    done += take;
  }
}

}  // namespace

double input_value(hm_dtype_t dtype, hm_op_t op, int rank, std::size_t index, unsigned salt) {
  const std::size_t mix = static_cast<std::size_t>(rank) * 31 + index * 7 + salt * 13;
  if (op == HM_PROD) {
    static constexpr double kSigned[5] = {1, 2, -1, 1, -2};
    static constexpr double kUnsigned[5] = {1, 2, 1, 1, 2};
    return is_unsigned(dtype) ? kUnsigned[mix % 5] : kSigned[mix % 5];
  }
  const double v = static_cast<double>(mix % 9);
  return is_unsigned(dtype) ? v : v - 4;
}

void encode(double value, hm_dtype_t dtype, void* element) {
  switch (dtype) {
    case HM_INT8:
      return store_integer<std::int8_t>(value, element);
    case HM_UINT8:
      return store_integer<std::uint8_t>(value, element);
    case HM_INT32:
      return store_integer<std::int32_t>(value, element);
    case HM_UINT32:
      return store_integer<std::uint32_t>(value, element);
    case HM_INT64:
      return store_integer<std::int64_t>(value, element);
    case HM_UINT64:
      return store_integer<std::uint64_t>(value, element);
    case HM_FLOAT16: {
      const std::uint16_t h = float_to_half(static_cast<float>(value));
      std::memcpy(element, &h, 2);
      return;
    }
    case HM_BFLOAT16: {
      const std::uint16_t b = float_to_bfloat16(static_cast<float>(value));
      std::memcpy(element, &b, 2);
      return;
    }
    case HM_FLOAT32: {
      const auto f = static_cast<float>(value);
      std::memcpy(element, &f, 4);
      return;
    }
    case HM_FLOAT64:
      std::memcpy(element, &value, 8);
      return;
    default:
      return;
  }
}

void fill_input(void* buffer, hm_dtype_t dtype, hm_op_t op, int rank, std::size_t offset,
                std::size_t count, unsigned salt) {
  fill_periodic(static_cast<unsigned char*>(buffer), count, dtype_size(dtype),
                [&](std::size_t i, unsigned char* element) {
                  encode(input_value(dtype, op, rank, offset + i, salt), dtype, element);
                });
}

void fill_expected(void* buffer, hm_dtype_t dtype, hm_op_t op, int nranks, std::size_t offset,
                   std::size_t count, unsigned salt) {
  fill_periodic(static_cast<unsigned char*>(buffer), count, dtype_size(dtype),
                [&](std::size_t i, unsigned char* element) {
                  double acc = input_value(dtype, op, 0, offset + i, salt);
                  for (int r = 1; r < nranks; ++r) {
                    const double v = input_value(dtype, op, r, offset + i, salt);
                    switch (op) {
                      case HM_PROD:
                        acc *= v;
                        break;
                      case HM_MIN:
                        acc = std::fmin(acc, v);
                        break;
                      case HM_MAX:
                        acc = std::fmax(acc, v);
                        break;
                      default:
                        acc += v;
                        break;
                    }
                  }
                  if (op == HM_AVG) {
                    if (!is_float(dtype)) {
                      acc = std::trunc(acc / nranks);  // the sums here never wrap, so this is exact
                    } else if (dtype == HM_FLOAT64) {
                      acc = acc / nranks;
                    } else {
                      // float16, bfloat16 and float32 divide in float32 and round once.
                      acc =
                          static_cast<double>(static_cast<float>(acc) / static_cast<float>(nranks));
                    }
                  }
                  encode(acc, dtype, element);
                });
}

std::size_t count_wrong(const void* got, const void* expected, std::size_t count,
                        hm_dtype_t dtype) {
  const std::size_t es = dtype_size(dtype);
  const auto* a = static_cast<const unsigned char*>(got);
  const auto* b = static_cast<const unsigned char*>(expected);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (std::memcmp(a + i * es, b + i * es, es) != 0) ++wrong;
  }
  return wrong;
}

}  // namespace holmes::check
