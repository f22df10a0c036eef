// CRC32C: the standard check value, the hardware path equal to the portable one on every length
// and alignment, continuation across pieces, and a flipped bit always seen.
#include <gtest/gtest.h>

#include <random>
#include <string_view>
#include <vector>

#include "core/crc32c.hpp"

namespace holmes {
namespace {

std::span<const std::byte> bytes_of(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

TEST(Crc32c, CheckValue) {
  EXPECT_EQ(crc32c(bytes_of("123456789")), 0xE3069283u);
  EXPECT_EQ(crc32c_portable(bytes_of("123456789")), 0xE3069283u);
  EXPECT_EQ(crc32c({}), 0u);
}

TEST(Crc32c, HardwareEqualsPortableAndContinues) {
  std::mt19937 rng(5);
  std::vector<std::byte> data(4096 + 7);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  for (std::size_t offset : {0u, 1u, 3u}) {
    for (std::size_t length : {0u, 1u, 7u, 8u, 9u, 63u, 4096u}) {
      const std::span<const std::byte> piece(data.data() + offset, length);
      EXPECT_EQ(crc32c(piece), crc32c_portable(piece)) << offset << " " << length;
      const std::size_t half = length / 2;
      EXPECT_EQ(crc32c(piece.subspan(half), crc32c(piece.first(half))), crc32c(piece));
    }
  }
}

TEST(Crc32c, EveryFlippedBitChangesIt) {
  std::vector<std::byte> data(1024, std::byte{0x5a});
  const std::uint32_t clean = crc32c(data);
  for (std::size_t bit = 0; bit < data.size() * 8; bit += 37) {
    data[bit / 8] ^= std::byte(1u << (bit % 8));
    EXPECT_NE(crc32c(data), clean) << "bit " << bit;
    data[bit / 8] ^= std::byte(1u << (bit % 8));
  }
}

}  // namespace
}  // namespace holmes
