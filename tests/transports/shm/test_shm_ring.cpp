// The shared-memory ring on its own, over ordinary memory: records keep their order and bytes
// across many wraps, a full ring says so, and a consumer refuses a ring a producer corrupted
// (impossible head, unknown record, a length past the ring) instead of reading past it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "shm_test_util.hpp"
#include "transports/shm/layout.hpp"
#include "transports/shm/ring.hpp"
#include "transports/shm/segment.hpp"

namespace holmes::shm {
namespace {

using namespace testing;

// A ring's control block and data in one aligned allocation.
struct LocalRing {
  explicit LocalRing(std::uint64_t bytes) : bytes(bytes) {
    memory.reset(static_cast<std::byte*>(
        ::operator new(kRingControlBytes + bytes, std::align_val_t(kPageBytes))));
    std::memset(memory.get(), 0, kRingControlBytes + bytes);
  }
  RingControl& control() { return *reinterpret_cast<RingControl*>(memory.get()); }
  std::byte* data() { return memory.get() + kRingControlBytes; }

  struct Free {
    void operator()(std::byte* p) const { ::operator delete(p, std::align_val_t(kPageBytes)); }
  };
  std::unique_ptr<std::byte, Free> memory;
  std::uint64_t bytes;
};

RecordHeader data_header(std::uint64_t tag, std::uint64_t length) {
  RecordHeader h{};
  h.kind = static_cast<std::uint32_t>(RecordKind::kData);
  h.tag = tag;
  h.total = length;
  h.length = length;
  return h;
}

TEST(ShmRingTest, RecordsKeepOrderAndBytesAcrossManyWraps) {
  LocalRing ring(64 << 10);
  RingWriter writer(ring.control(), ring.data(), ring.bytes);
  RingReader reader(ring.control(), ring.data(), ring.bytes);
  EXPECT_EQ(writer.max_payload(), (16u << 10) - kRecordHeaderBytes);
  std::uint64_t written = 0;
  std::uint64_t read = 0;
  std::string corrupt;
  // Odd sizes so that the ring's end falls inside records and pads are needed.
  auto size_of = [](std::uint64_t i) { return (i * 7919) % 16000; };
  while (read < 2000) {
    while (written < 2000) {
      const auto payload = pattern(size_of(written), static_cast<int>(written));
      const auto result = writer.write(data_header(written, payload.size()), payload);
      if (result == RingWriter::Result::kFull) break;
      ASSERT_EQ(result, RingWriter::Result::kWritten);
      ++written;
    }
    auto record = reader.next(corrupt);
    ASSERT_TRUE(record.has_value()) << corrupt;
    ASSERT_EQ(record->header.tag, read);
    const auto expected = pattern(size_of(read), static_cast<int>(read));
    ASSERT_EQ(record->payload.size(), expected.size());
    // std::equal, not memcmp: an empty payload's data() may be null, which memcmp must not get.
    ASSERT_TRUE(std::equal(record->payload.begin(), record->payload.end(), expected.begin()));
    reader.release(record->end);
    ++read;
  }
  EXPECT_FALSE(reader.next(corrupt).has_value());
  EXPECT_EQ(corrupt, "");
  EXPECT_TRUE(reader.drained());
  EXPECT_GT(ring.control().head, 20 * ring.bytes);  // it did wrap, many times
}

TEST(ShmRingTest, FullRingRefusesUntilSpaceIsFreed) {
  LocalRing ring(64 << 10);
  RingWriter writer(ring.control(), ring.data(), ring.bytes);
  RingReader reader(ring.control(), ring.data(), ring.bytes);
  const auto payload = pattern(writer.max_payload(), 1);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(writer.write(data_header(i, payload.size()), payload), RingWriter::Result::kWritten);
  }
  EXPECT_FALSE(writer.fits(0));
  EXPECT_EQ(writer.write(data_header(4, 0), {}), RingWriter::Result::kFull);
  std::string corrupt;
  auto first = reader.next(corrupt);
  ASSERT_TRUE(first.has_value());
  reader.release(first->end);
  EXPECT_TRUE(writer.fits(payload.size()));
  EXPECT_EQ(writer.write(data_header(4, payload.size()), payload), RingWriter::Result::kWritten);
}

// A consumer may read past records it keeps (waiting for their receive): the producer gets
// their space only once they, and everything before them, are released.
TEST(ShmRingTest, ReadingAheadKeepsSpaceUntilReleased) {
  LocalRing ring(64 << 10);
  RingWriter writer(ring.control(), ring.data(), ring.bytes);
  RingReader reader(ring.control(), ring.data(), ring.bytes);
  const auto payload = pattern(writer.max_payload(), 1);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(writer.write(data_header(i, payload.size()), payload), RingWriter::Result::kWritten);
  }
  std::string corrupt;
  std::vector<RingReader::Record> records;
  while (auto r = reader.next(corrupt)) records.push_back(*r);
  ASSERT_EQ(records.size(), 4u);
  EXPECT_TRUE(reader.drained());
  EXPECT_FALSE(writer.fits(0));
  // The first record stays; releasing the later ones frees nothing yet (release is in order).
  reader.release(records[0].end);
  EXPECT_TRUE(writer.fits(payload.size()));
  EXPECT_EQ(writer.write(data_header(4, payload.size()), payload), RingWriter::Result::kWritten);
  EXPECT_FALSE(writer.fits(0));
  // Kept records still hold their bytes after the producer wrote behind them.
  EXPECT_EQ(records[1].header.tag, 1u);
  EXPECT_EQ(std::memcmp(records[3].payload.data(), payload.data(), payload.size()), 0);
  auto fifth = reader.next(corrupt);
  ASSERT_TRUE(fifth.has_value()) << corrupt;
  EXPECT_EQ(fifth->header.tag, 4u);
  reader.release(fifth->end);
  EXPECT_TRUE(writer.fits(payload.size()));
}

TEST(ShmRingTest, ImpossibleHeadIsRefused) {
  LocalRing ring(64 << 10);
  RingReader reader(ring.control(), ring.data(), ring.bytes);
  ring.control().head = ring.bytes + kCacheLine;  // more than the ring holds
  std::string corrupt;
  EXPECT_FALSE(reader.next(corrupt).has_value());
  EXPECT_NE(corrupt.find("ring head"), std::string::npos) << corrupt;
}

TEST(ShmRingTest, UnknownRecordKindIsRefused) {
  LocalRing ring(64 << 10);
  RingReader reader(ring.control(), ring.data(), ring.bytes);
  std::memset(ring.data(), 0x5a, kRecordHeaderBytes);
  ring.control().head = kRecordHeaderBytes;
  std::string corrupt;
  EXPECT_FALSE(reader.next(corrupt).has_value());
  EXPECT_NE(corrupt.find("unknown record kind 0x5a5a5a5a"), std::string::npos) << corrupt;
}

TEST(ShmRingTest, LengthPastTheRingIsRefused) {
  LocalRing ring(64 << 10);
  RingReader reader(ring.control(), ring.data(), ring.bytes);
  for (const std::uint64_t length : {std::uint64_t{1} << 62, std::uint64_t{4096}}) {
    const auto h = data_header(1, length);  // claims more than was published
    std::memcpy(ring.data(), &h, sizeof(h));
    ring.control().head = kRecordHeaderBytes + 1024;
    std::string corrupt;
    EXPECT_FALSE(reader.next(corrupt).has_value());
    EXPECT_NE(corrupt.find("runs past the ring"), std::string::npos) << corrupt;
  }
}

TEST(ShmRingTest, PadPastPublishedDataIsRefused) {
  LocalRing ring(64 << 10);
  RingReader reader(ring.control(), ring.data(), ring.bytes);
  RecordHeader pad{};
  pad.kind = static_cast<std::uint32_t>(RecordKind::kPad);
  std::memcpy(ring.data(), &pad, sizeof(pad));
  ring.control().head = kRecordHeaderBytes;  // a pad claims the whole ring, only 64 B published
  std::string corrupt;
  EXPECT_FALSE(reader.next(corrupt).has_value());
  EXPECT_NE(corrupt.find("pad record"), std::string::npos) << corrupt;
}

TEST(ShmRingTest, ImpossibleTailIsCorruptForTheWriter) {
  LocalRing ring(64 << 10);
  RingWriter writer(ring.control(), ring.data(), ring.bytes);
  ring.control().tail = 4096;  // past anything written
  EXPECT_EQ(writer.write(data_header(1, 8), pattern(8, 1)), RingWriter::Result::kCorrupt);
}

TEST(ShmSegmentNameTest, OnlyHolmesNamesAreAccepted) {
  EXPECT_TRUE(is_segment_name("/holmes-job.world0-123-abcdef012345"));
  EXPECT_FALSE(is_segment_name("/holmes-"));
  EXPECT_FALSE(is_segment_name("holmes-x"));
  EXPECT_FALSE(is_segment_name("/other-x"));
  EXPECT_FALSE(is_segment_name("/holmes-../../etc/passwd"));
  EXPECT_FALSE(is_segment_name("/holmes-a b"));
  EXPECT_FALSE(is_segment_name("/holmes-" + std::string(300, 'a')));
  EXPECT_FALSE(is_segment_name(""));
}

TEST(ShmSegmentNameTest, OwnNamesAreValidAndUnique) {
  OwnSegment a("job/world0:with spaces and a very long context " + std::string(200, 'x'));
  OwnSegment b("job/world0");
  EXPECT_TRUE(is_segment_name(a.name())) << a.name();
  EXPECT_TRUE(is_segment_name(b.name())) << b.name();
  EXPECT_NE(a.name(), b.name());
  EXPECT_NE(a.name().find("-" + std::to_string(getpid()) + "-"), std::string::npos);
}

}  // namespace
}  // namespace holmes::shm
