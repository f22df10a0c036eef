// A producer that breaks the protocol (a bug, or a process writing whatever it likes into its
// ring) costs the receiver that one peer, with an error that says what was wrong: never a crash,
// a hang, or bytes outside the receive buffer.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>

#include "bootstrap/auth.hpp"
#include "core/status.hpp"
#include "shm_test_util.hpp"
#include "transports/shm/doorbell.hpp"
#include "transports/shm/layout.hpp"
#include "transports/shm/ring.hpp"
#include "transports/shm/segment.hpp"

namespace holmes::shm {
namespace {

using namespace testing;

// Attaches to `name` (rank `to` of `size`) as rank `from`, with valid proofs like a real rank,
// then writes whatever a test wants.
class FakeProducer {
 public:
  FakeProducer(const std::string& name, int from, int to, int size) {
    const Proofs proofs{"secret", "test/world0"};
    segment_ = PeerSegment::open(
        name, {to, static_cast<std::uint32_t>(size), context_hash("test/world0")}, proofs);
    EXPECT_NE(segment_, nullptr);
    RingControl& c = segment_->control(from);
    c.producer_pid = getpid();
    c.producer_pid_namespace = pid_namespace_id();
    const auto nonce = auth::random_nonce();
    std::memcpy(c.producer_nonce, nonce.data(), kNonceBytes);
    c.cma_probe_address = reinterpret_cast<std::uintptr_t>(&probe_);
    c.cma_probe_value = probe_;
    proofs.producer_mac(segment_->header(), c, from, to, c.producer_mac);
    store_release(c.attached, 1u);
    writer_.emplace(c, segment_->ring_data(from), segment_->ring_bytes());
    control_ = &c;
  }

  void write(const RecordHeader& h, std::span<const std::byte> payload = {}) {
    EXPECT_EQ(writer_->write(h, payload), RingWriter::Result::kWritten);
    ring_doorbell(segment_->header());
  }
  // Raw bytes at the ring's start, published by moving head to `head`.
  void scribble(std::span<const std::byte> bytes, std::uint64_t head) {
    // Not memcpy: `bytes` may be empty, and its null data() is not for memcpy (UBSan).
    std::ranges::copy(bytes, segment_->ring_data(0));
    store_release(control_->head, head);
    ring_doorbell(segment_->header());
  }
  RingControl& control() { return *control_; }

 private:
  std::uint64_t probe_ = 0x1234567887654321ull;
  std::unique_ptr<PeerSegment> segment_;
  std::optional<RingWriter> writer_;
  RingControl* control_ = nullptr;
};

RecordHeader record(RecordKind kind, std::uint64_t tag, std::uint64_t total, std::uint64_t offset,
                    std::uint64_t length) {
  RecordHeader h{};
  h.kind = static_cast<std::uint32_t>(kind);
  h.tag = tag;
  // The signature of the victim's pending receive, so each record fails for what its test shows.
  h.signature = 1;
  h.total = total;
  h.offset = offset;
  h.length = length;
  return h;
}

// Endpoint 1 of three waits for tag 1 from rank 0, whose ring slot a FakeProducer holds. (Rank 2
// never attaches, so endpoint 1 keeps its name in /dev/shm for the whole test.)
struct Victim {
  std::vector<std::unique_ptr<Transport>> job = testing::job(3);
  FakeProducer fake{job[1]->listen_address(), 0, 1, 3};
  std::vector<std::byte> buffer = std::vector<std::byte>(4096, std::byte{0x77});
  CompletionPtr pending = job[1]->irecv(0, 1, 1, buffer);

  // The pending receive fails with `status`, naming `what`, and the buffer is untouched.
  void expect_failure(hm_status_t status, const std::string& what) {
    ASSERT_TRUE(finishes(pending, 5s));
    EXPECT_EQ(pending->status(), status) << pending->message();
    EXPECT_NE(pending->message().find(what), std::string::npos) << pending->message();
    EXPECT_EQ(buffer, std::vector<std::byte>(4096, std::byte{0x77}));
  }
};

TEST(ShmHostileTest, UnknownRecordKind) {
  Victim v;
  v.fake.scribble(pattern(kRecordHeaderBytes, 3), kRecordHeaderBytes);
  v.expect_failure(HM_ERR_TRANSPORT, "corrupted its ring: unknown record kind");
}

TEST(ShmHostileTest, ImpossibleHead) {
  Victim v;
  v.fake.scribble({}, 3ull << 40);
  v.expect_failure(HM_ERR_TRANSPORT, "corrupted its ring: ring head");
}

TEST(ShmHostileTest, FragmentOutsideItsMessage) {
  Victim v;
  const auto payload = pattern(1024, 1);
  // Bytes [4000, 5024) of a 4096-byte message: would run past the receive buffer.
  v.fake.write(record(RecordKind::kData, 1, 4096, 4000, 1024), payload);
  v.expect_failure(HM_ERR_TRANSPORT, "broke the protocol");
}

TEST(ShmHostileTest, FragmentsThatDisagreeOnTheSize) {
  Victim v;
  const auto payload = pattern(100, 1);
  v.fake.write(record(RecordKind::kData, 2, 5000, 0, 100), payload);  // kept as unexpected
  v.fake.write(record(RecordKind::kData, 2, 6000, 100, 100), payload);
  v.expect_failure(HM_ERR_TRANSPORT, "disagree on its size");
}

TEST(ShmHostileTest, CrossMemoryRequestOutOfOrder) {
  Victim v;
  // Wait until the victim has decided about cross-memory reads from this producer.
  const auto deadline = Deadline::after(5s);
  while (load_acquire(v.fake.control().cma) == 0 && !deadline.expired()) {
    std::this_thread::sleep_for(1ms);
  }
  auto h = record(RecordKind::kRts, 1, 4096, 0, 4096);
  h.cookie = 7;  // the first must be 1
  v.fake.write(h);
  v.expect_failure(HM_ERR_TRANSPORT, "malformed cross-memory request");
}

TEST(ShmHostileTest, CrossMemoryMessageTooLargeToHold) {
  Victim v;
  const auto deadline = Deadline::after(5s);
  while (load_acquire(v.fake.control().cma) == 0 && !deadline.expired()) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(load_acquire(v.fake.control().cma), static_cast<std::uint32_t>(CmaState::kWorks));
  // 256 TiB for a tag nobody receives yet: more than any address space can hold.
  const std::uint64_t huge = (1ull << 48) - 64;
  auto h = record(RecordKind::kRts, 2, huge, 0, huge);
  h.cookie = 1;
  v.fake.write(h);
  v.expect_failure(HM_ERR_OUT_OF_MEMORY, "cannot hold it");
}

// The real rank 0 arriving after the slot was taken is refused instead of sharing the ring.
TEST(ShmHostileTest, RingSlotAlreadyTaken) {
  Victim v;
  auto c = v.job[0]->connect_all();
  ASSERT_TRUE(finishes(c, 5s));
  EXPECT_EQ(c->status(), HM_ERR_TRANSPORT);
  EXPECT_NE(c->message().find("two endpoints claim rank 0"), std::string::npos) << c->message();
}

}  // namespace
}  // namespace holmes::shm
