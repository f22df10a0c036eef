// Tests of src/transports/tcp/frame.hpp: the 40-byte fragment header of the tcp transport.
// decode() is the first thing that touches bytes from a peer, so it must refuse every header
// whose fields would place a fragment outside its message or exceed the limits.
#include "transports/tcp/frame.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <random>

namespace holmes::tcp {
namespace {

using HeaderBytes = std::array<std::uint8_t, kFrameHeaderBytes>;

FrameHeader make(std::uint64_t total, std::uint64_t offset, std::uint32_t length,
                 std::uint32_t flags = 0) {
  FrameHeader h;
  h.signature = 0xdeadbeef;
  h.tag = 0x0102030405060708ull;
  h.total = total;
  h.offset = offset;
  h.length = length;
  h.flags = flags;
  return h;
}

std::optional<FrameHeader> decode(const HeaderBytes& bytes) { return FrameHeader::decode(bytes); }

void expect_same(const FrameHeader& a, const FrameHeader& b) {
  EXPECT_EQ(a.signature, b.signature);
  EXPECT_EQ(a.tag, b.tag);
  EXPECT_EQ(a.total, b.total);
  EXPECT_EQ(a.offset, b.offset);
  EXPECT_EQ(a.length, b.length);
  EXPECT_EQ(a.flags, b.flags);
}

TEST(FrameHeader, RoundTrip) {
  const FrameHeader cases[] = {
      make(0, 0, 0),                                    // an empty message is one empty fragment
      make(100, 0, 100),                                // a whole small message
      make(10 << 20, 4 << 20, 4 << 20),                 // a middle fragment of maximum size
      make(kMaxMessageBytes, kMaxMessageBytes - 1, 1),  // the last byte of the largest message
      make(kMaxMessageBytes, kMaxMessageBytes, 0),      // empty fragment at the very end
  };
  for (const FrameHeader& h : cases) {
    const auto decoded = decode(h.encode());
    ASSERT_TRUE(decoded.has_value()) << "total " << h.total << " offset " << h.offset;
    expect_same(h, *decoded);
  }
}

// The layout the header comment documents: little-endian fields at fixed offsets.
TEST(FrameHeader, WireLayout) {
  const HeaderBytes bytes = make(0x1122334455667788ull & 0xffffffffffull, 0x10, 0x20).encode();
  const HeaderBytes expected = {
      'H',  'M',  'F',  '1',                           // magic
      0xef, 0xbe, 0xad, 0xde,                          // signature
      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  // tag
      0x88, 0x77, 0x66, 0x55, 0x44, 0,    0,    0,     // total (40 bits)
      0x10, 0,    0,    0,    0,    0,    0,    0,     // offset
      0x20, 0,    0,    0,                             // length
      0,    0,    0,    0,                             // flags
  };
  EXPECT_EQ(bytes, expected);
}

TEST(FrameHeader, RejectsBadMagic) {
  HeaderBytes bytes = make(10, 0, 10).encode();
  for (std::size_t i = 0; i < 4; ++i) {
    HeaderBytes corrupted = bytes;
    corrupted[i] ^= 0x01;
    EXPECT_FALSE(decode(corrupted).has_value()) << "magic byte " << i;
  }
  HeaderBytes zeros{};
  EXPECT_FALSE(decode(zeros).has_value());
}

TEST(FrameHeader, RejectsOffsetPastTotal) {
  EXPECT_FALSE(decode(make(10, 11, 0).encode()).has_value());
  EXPECT_FALSE(decode(make(0, 1, 0).encode()).has_value());
  EXPECT_FALSE(decode(make(10, UINT64_MAX, 0).encode()).has_value());
  EXPECT_TRUE(decode(make(10, 10, 0).encode()).has_value());  // boundary: empty tail fragment
}

TEST(FrameHeader, RejectsFragmentRunningPastTotal) {
  EXPECT_FALSE(decode(make(10, 5, 6).encode()).has_value());
  EXPECT_FALSE(decode(make(10, 10, 1).encode()).has_value());
  EXPECT_FALSE(decode(make(0, 0, 1).encode()).has_value());
  EXPECT_TRUE(decode(make(10, 5, 5).encode()).has_value());  // boundary: ends exactly at total
  // offset + length would wrap around 2^64 if the check were written as a sum.
  EXPECT_FALSE(
      decode(make(kMaxMessageBytes, kMaxMessageBytes - 1, 0xffffffffu).encode()).has_value());
}

TEST(FrameHeader, RejectsFragmentLongerThanTheLimit) {
  const auto limit = static_cast<std::uint32_t>(kMaxFragmentBytes);
  EXPECT_TRUE(decode(make(limit, 0, limit).encode()).has_value());
  EXPECT_FALSE(decode(make(limit + 1ull, 0, limit + 1).encode()).has_value());
  EXPECT_FALSE(decode(make(UINT32_MAX, 0, UINT32_MAX).encode()).has_value());
}

TEST(FrameHeader, RejectsMessageLargerThanTheLimit) {
  EXPECT_TRUE(decode(make(kMaxMessageBytes, 0, 0).encode()).has_value());
  EXPECT_FALSE(decode(make(kMaxMessageBytes + 1, 0, 0).encode()).has_value());
  EXPECT_FALSE(decode(make(UINT64_MAX, 0, 0).encode()).has_value());
}

TEST(FrameHeader, AcceptsOnlyTheChecksumFlag) {
  const auto checked = decode(make(10, 0, 10, kFlagChecksum).encode());
  ASSERT_TRUE(checked.has_value());
  EXPECT_EQ(checked->flags, kFlagChecksum);
  for (std::uint32_t flags : {2u, 3u, 0x80000000u, 0xffffffffu}) {
    EXPECT_FALSE(decode(make(10, 0, 10, flags).encode()).has_value()) << flags;
  }
}

// Random headers: whatever decode() accepts must satisfy every invariant the transport relies
// on, and re-encode to the same bytes. Most inputs get the right magic and small field values
// (otherwise nearly nothing would pass the magic check and the bounds logic would go untested).
TEST(FrameHeader, RandomBytesNeverYieldAnInconsistentHeader) {
  std::mt19937_64 rng(99);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> shape(0, 7);
  int accepted = 0;
  int rejected_with_magic = 0;
  for (int iteration = 0; iteration < 100000; ++iteration) {
    HeaderBytes bytes;
    for (auto& b : bytes) b = static_cast<std::uint8_t>(byte(rng));
    if (shape(rng) != 0) {
      bytes[0] = 'H';
      bytes[1] = 'M';
      bytes[2] = 'F';
      bytes[3] = '1';
      // Shrink total/offset/length/flags to a few significant bytes so they interact.
      const int keep = shape(rng);  // significant low bytes to keep in the 64-bit fields
      for (int i = keep; i < 8; ++i) {
        bytes[16 + i] = 0;
        bytes[24 + i] = 0;
      }
      for (int i = std::min(keep, 4); i < 4; ++i) bytes[32 + i] = 0;
      if (shape(rng) != 0) bytes[36] = bytes[37] = bytes[38] = bytes[39] = 0;
    }
    const auto header = decode(bytes);
    if (!header) {
      if (bytes[0] == 'H' && bytes[1] == 'M' && bytes[2] == 'F' && bytes[3] == '1') {
        ++rejected_with_magic;
      }
      continue;
    }
    ++accepted;
    ASSERT_LE(header->total, kMaxMessageBytes);
    ASSERT_LE(header->length, kMaxFragmentBytes);
    ASSERT_LE(header->offset, header->total);
    ASSERT_LE(header->offset + header->length, header->total);  // no wrap: both bounded above
    ASSERT_EQ(header->flags & ~kFlagChecksum, 0u);
    ASSERT_EQ(header->encode(), bytes) << "iteration " << iteration;
  }
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(rejected_with_magic, 1000);
}

}  // namespace
}  // namespace holmes::tcp
