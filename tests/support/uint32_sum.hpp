// The reference for combining receives in transport tests: a + b as uint32 elements (wrapping),
// computed here element by element, independent of the library's reduction kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace holmes::test {

inline std::vector<std::byte> uint32_sum(const std::vector<std::byte>& a,
                                         const std::vector<std::byte>& b) {
  std::vector<std::byte> sum(a.size());
  for (std::size_t i = 0; i + 4 <= a.size(); i += 4) {
    std::uint32_t x = 0;
    std::uint32_t y = 0;
    std::memcpy(&x, a.data() + i, 4);
    std::memcpy(&y, b.data() + i, 4);
    const std::uint32_t z = x + y;
    std::memcpy(sum.data() + i, &z, 4);
  }
  return sum;
}

}  // namespace holmes::test
