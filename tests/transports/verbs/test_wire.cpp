// The verbs transport's slot messages (wire.hpp) and how a message is cut into them
// (message_cutter.hpp). decode() is the first thing that touches bytes a peer wrote into our
// memory, so every field is checked against what actually arrived.
#include "transports/verbs/wire.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "transports/verbs/message_cutter.hpp"

namespace holmes::verbs {
namespace {

std::vector<std::uint8_t> message_of(const WireHeader& h, std::size_t payload_bytes) {
  const auto header = h.encode();
  std::vector<std::uint8_t> out(header.begin(), header.end());
  out.resize(out.size() + payload_bytes, 0xab);
  return out;
}

WireHeader data(std::uint64_t total, std::uint64_t offset, std::uint32_t length) {
  WireHeader h;
  h.kind = MessageKind::kData;
  h.credits = 7;
  h.signature = 0xdeadbeef;
  h.tag = 0x0102030405060708ull;
  h.total = total;
  h.offset = offset;
  h.length = length;
  return h;
}

std::string why_refused(const std::vector<std::uint8_t>& bytes) {
  std::string why;
  EXPECT_FALSE(WireHeader::decode(bytes, &why).has_value());
  return why;
}

TEST(VerbsWire, RoundTrip) {
  for (const auto& h : {data(0, 0, 0), data(100, 0, 100), data(1000, 960, 40),
                        data(kMaxMessageBytes, kMaxMessageBytes - 16, 16)}) {
    std::string why;
    const auto got = WireHeader::decode(message_of(h, h.length), &why);
    ASSERT_TRUE(got.has_value()) << why;
    EXPECT_EQ(got->kind, h.kind);
    EXPECT_EQ(got->credits, h.credits);
    EXPECT_EQ(got->signature, h.signature);
    EXPECT_EQ(got->tag, h.tag);
    EXPECT_EQ(got->total, h.total);
    EXPECT_EQ(got->offset, h.offset);
    EXPECT_EQ(got->length, h.length);
  }
  for (const auto kind : {MessageKind::kCredit, MessageKind::kGoodbye}) {
    WireHeader h;
    h.kind = kind;
    h.credits = kMaxSlots;
    const auto got = WireHeader::decode(message_of(h, 0), nullptr);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->kind, kind);
    EXPECT_EQ(got->credits, kMaxSlots);
  }
}

TEST(VerbsWire, Layout) {
  const auto bytes = data(0x20, 0x10, 0x10).encode();
  const std::uint8_t expected_start[] = {'H',  'M',  'V',  '1',  1, 0, 0, 0, 7, 0, 0, 0,
                                         0xef, 0xbe, 0xad, 0xde, 8, 7, 6, 5, 4, 3, 2, 1};
  for (std::size_t i = 0; i < sizeof expected_start; ++i)
    EXPECT_EQ(bytes[i], expected_start[i]) << i;
  EXPECT_EQ(bytes[24], 0x20);  // total
  EXPECT_EQ(bytes[32], 0x10);  // offset
  EXPECT_EQ(bytes[40], 0x10);  // length
  EXPECT_EQ(kWireHeaderBytes, 48u);
}

TEST(VerbsWire, RefusesWhatDoesNotAddUp) {
  EXPECT_EQ(why_refused(std::vector<std::uint8_t>(47, 0)),
            "a 47-byte message is shorter than the 48-byte header");
  auto bad_magic = message_of(data(10, 0, 10), 10);
  bad_magic[0] = 'X';
  EXPECT_EQ(why_refused(bad_magic).substr(0, 9), "bad magic");
  auto bad_kind = message_of(data(10, 0, 10), 10);
  bad_kind[4] = 9;
  EXPECT_EQ(why_refused(bad_kind), "unknown message kind 9");
  auto flags = message_of(data(10, 0, 10), 10);
  flags[5] = 1;
  EXPECT_EQ(why_refused(flags), "reserved header bits are set");
  auto reserved = message_of(data(10, 0, 10), 10);
  reserved[47] = 1;
  EXPECT_EQ(why_refused(reserved), "reserved header bits are set");
  EXPECT_EQ(why_refused(message_of(data(10, 0, 10), 9)),
            "its header says 10 payload bytes but 9 arrived");
  EXPECT_EQ(why_refused(message_of(data(10, 0, 5), 10)),
            "its header says 5 payload bytes but 10 arrived");
  EXPECT_EQ(why_refused(message_of(data(10, 8, 4), 4)),
            "piece [8, +4) lies outside its 10-byte message");
  EXPECT_EQ(why_refused(message_of(data(10, 11, 0), 0)),
            "piece [11, +0) lies outside its 10-byte message");
  EXPECT_NE(
      why_refused(message_of(data(~0ull, 0, 1), 1)).find("exceeds the 1099511627776-byte limit"),
      std::string::npos);
  EXPECT_EQ(why_refused(message_of(data(10, 3, 0), 0)), "an empty piece of a non-empty message");
  auto greedy = data(10, 0, 10);
  greedy.credits = kMaxSlots + 1;
  EXPECT_EQ(why_refused(message_of(greedy, 10)), "it returns 4097 credits");
  WireHeader control;
  control.kind = MessageKind::kCredit;
  control.tag = 5;
  EXPECT_EQ(why_refused(message_of(control, 0)), "a control message carries message fields");
  control.tag = 0;
  control.kind = MessageKind::kGoodbye;
  control.length = 3;
  EXPECT_EQ(why_refused(message_of(control, 3)), "a control message carries message fields");
}

// Random bytes of every length never pass as a data piece that lies outside its message.
TEST(VerbsWire, RandomBytesNeverDecodeToAnOutOfBoundsPiece) {
  std::mt19937_64 random(42);
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(random() % 120));
    for (auto& b : bytes) b = static_cast<std::uint8_t>(random());
    if (bytes.size() >= 8 && i % 2 == 0) {  // half with a valid magic and kind, to go deeper
      bytes[0] = 'H';
      bytes[1] = 'M';
      bytes[2] = 'V';
      bytes[3] = '1';
      bytes[4] = static_cast<std::uint8_t>(1 + random() % 3);
      bytes[5] = bytes[6] = bytes[7] = 0;
    }
    const auto h = WireHeader::decode(bytes, nullptr);
    if (!h) continue;
    EXPECT_EQ(h->length + kWireHeaderBytes, bytes.size());
    EXPECT_LE(h->offset + h->length, h->total);
    EXPECT_LE(h->total, kMaxMessageBytes);
  }
}

// ---- cutting messages into pieces ------------------------------------------------------------

std::vector<MessageCutter::Piece> cut(std::uint64_t total, std::uint64_t capacity) {
  MessageCutter cutter(total, capacity);
  std::vector<MessageCutter::Piece> pieces;
  while (!cutter.done()) pieces.push_back(cutter.next());
  return pieces;
}

TEST(VerbsMessageCutter, EmptyMessageIsOneEmptyPiece) {
  const auto pieces = cut(0, 100);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].offset, 0u);
  EXPECT_EQ(pieces[0].length, 0u);
}

TEST(VerbsMessageCutter, PiecesAreConsecutiveAndBounded) {
  auto pieces = cut(250, 100);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].offset, 0u);
  EXPECT_EQ(pieces[0].length, 100u);
  EXPECT_EQ(pieces[1].offset, 100u);
  EXPECT_EQ(pieces[1].length, 100u);
  EXPECT_EQ(pieces[2].offset, 200u);
  EXPECT_EQ(pieces[2].length, 50u);
  EXPECT_EQ(cut(200, 100).size(), 2u);  // an exact multiple has no empty tail
  EXPECT_EQ(cut(1, 100).size(), 1u);
  EXPECT_EQ(cut(5, 1).size(), 5u);
  // 1 GiB through 64 KiB slots minus the header.
  const std::uint64_t capacity = (64u << 10) - kWireHeaderBytes;
  pieces = cut(1ull << 30, capacity);
  EXPECT_EQ(pieces.size(), ((1ull << 30) + capacity - 1) / capacity);
  std::uint64_t next = 0;
  for (const auto& p : pieces) {
    EXPECT_EQ(p.offset, next);
    EXPECT_GT(p.length, 0u);
    EXPECT_LE(p.length, capacity);
    next += p.length;
  }
  EXPECT_EQ(next, 1ull << 30);
}

}  // namespace
}  // namespace holmes::verbs
