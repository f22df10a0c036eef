// Tests of src/transports/tcp/inbox.hpp: the tcp reader's read-ahead buffer hands out exactly
// the bytes that were put in, in order, across headers, payloads, skips and compactions.
#include "transports/tcp/inbox.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <vector>

namespace holmes::tcp {
namespace {

// Writes bytes first, first+1, ... into the inbox's free space (as a socket read would).
std::size_t put(Inbox& box, std::size_t n, std::uint8_t first) {
  auto space = box.free_space();
  n = std::min(n, space.size());
  for (std::size_t i = 0; i < n; ++i) space[i] = static_cast<std::uint8_t>(first + i);
  box.filled(n);
  return n;
}

TEST(TcpInbox, HandsOutHeadersAndPayloadsInOrder) {
  Inbox box;
  EXPECT_EQ(box.size(), 0u);
  EXPECT_EQ(box.free_space().size(), Inbox::kBytes);
  ASSERT_EQ(put(box, kFrameHeaderBytes + 10, 0), kFrameHeaderBytes + 10);
  const auto header = box.take_header();
  for (std::size_t i = 0; i < kFrameHeaderBytes; ++i) EXPECT_EQ(header[i], i);
  std::vector<std::byte> payload(4);
  EXPECT_EQ(box.take(payload), 4u);
  EXPECT_EQ(payload[0], std::byte{40});
  EXPECT_EQ(payload[3], std::byte{43});
  EXPECT_EQ(box.skip(2), 2u);
  std::vector<std::byte> rest(100, std::byte{0xee});
  EXPECT_EQ(box.take(rest), 4u);  // only what it holds
  EXPECT_EQ(rest[0], std::byte{46});
  EXPECT_EQ(rest[3], std::byte{49});
  EXPECT_EQ(rest[4], std::byte{0xee});  // the rest of the destination is untouched
  EXPECT_EQ(box.size(), 0u);
  EXPECT_EQ(box.take(rest), 0u);
  EXPECT_EQ(box.skip(7), 0u);
}

TEST(TcpInbox, CompactionKeepsUnreadBytesAndFreesTheFront) {
  Inbox box;
  ASSERT_EQ(put(box, Inbox::kBytes, 0), Inbox::kBytes);
  EXPECT_TRUE(box.free_space().empty());
  EXPECT_EQ(box.skip(Inbox::kBytes - 30), Inbox::kBytes - 30);
  box.compact();
  EXPECT_EQ(box.size(), 30u);
  EXPECT_EQ(box.free_space().size(), Inbox::kBytes - 30);
  put(box, 10, 200);
  std::vector<std::byte> out(40);
  ASSERT_EQ(box.take(out), 40u);
  for (std::size_t i = 0; i < 30; ++i) {
    EXPECT_EQ(out[i], std::byte(static_cast<std::uint8_t>(Inbox::kBytes - 30 + i)));
  }
  for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(out[30 + i], std::byte(200 + i));
  box.compact();  // empty: everything is free again
  EXPECT_EQ(box.free_space().size(), Inbox::kBytes);
}

TEST(TcpInbox, ManySmallFramesFromOneRead) {
  // 48-byte frames (a header and 8 bytes), as an 8-byte allreduce sends them, back to back.
  constexpr std::size_t kFrame = kFrameHeaderBytes + 8;
  Inbox box;
  std::vector<std::uint8_t> stream(10 * kFrame);
  std::iota(stream.begin(), stream.end(), std::uint8_t{0});
  std::size_t written = 0;
  std::size_t frames = 0;
  while (frames < 10) {
    if (box.size() < kFrame) {  // a short read: 7 bytes at a time at most
      box.compact();
      auto space = box.free_space();
      const std::size_t n = std::min<std::size_t>({7, space.size(), stream.size() - written});
      std::copy_n(stream.begin() + static_cast<std::ptrdiff_t>(written), n, space.begin());
      box.filled(n);
      written += n;
      continue;
    }
    const auto header = box.take_header();
    EXPECT_EQ(header[0], static_cast<std::uint8_t>(frames * kFrame));
    std::vector<std::byte> payload(8);
    ASSERT_EQ(box.take(payload), 8u);
    EXPECT_EQ(payload[7], std::byte(static_cast<std::uint8_t>(frames * kFrame + kFrame - 1)));
    ++frames;
  }
  EXPECT_EQ(box.size(), 0u);
}

}  // namespace
}  // namespace holmes::tcp
