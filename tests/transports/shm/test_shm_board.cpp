// The shm transport's shared board (transports/shared_board.hpp) with endpoints in one process:
// rounds alternate between two slots and carry each rank's bytes, signature and operation
// number; a reader sees "not yet" until the round is published, wakes from its sleep when it is,
// and ends with a clear error when the peer failed or closed, when its own endpoint shut down,
// or when a slot makes no sense (a round ahead, a size beyond the slot).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <thread>

#include "core/status.hpp"
#include "shm_test_util.hpp"
#include "transports/capabilities.hpp"
#include "transports/shared_board.hpp"
#include "transports/shm/layout.hpp"

namespace holmes::shm {
namespace {

using namespace testing;

std::vector<std::unique_ptr<Transport>> connected_job(int n) {
  auto endpoints = job(n);
  std::vector<CompletionPtr> connected;
  for (auto& e : endpoints) connected.push_back(e->connect_all());
  for (auto& c : connected) {
    EXPECT_TRUE(finishes(c, 5s));
    EXPECT_EQ(c->status(), HM_SUCCESS) << c->message();
  }
  return endpoints;
}

SharedBoard& board(const std::unique_ptr<Transport>& endpoint) {
  SharedBoardAccess* access = capability<SharedBoardAccess>(*endpoint);
  SharedBoard* b = access != nullptr ? &access->shared_board() : nullptr;
  EXPECT_NE(b, nullptr);
  return *b;
}

void publish(SharedBoard& b, std::uint64_t round, const std::vector<std::byte>& data,
             std::uint32_t signature) {
  std::memcpy(b.own_slot(round).data(), data.data(), data.size());
  b.publish(round, /*sequence=*/round * 10, signature, /*root=*/-1, data.size());
}

// The status read() throws for (peer, round) on `reader`, or HM_SUCCESS when it does not.
hm_status_t read_error(SharedBoard& reader, int peer, std::uint64_t round, std::string* message) {
  try {
    reader.read(peer, round);
  } catch (const Error& e) {
    if (message != nullptr) *message = e.what();
    return e.status();
  }
  return HM_SUCCESS;
}

class ShmBoardTest : public ::testing::Test {
 protected:
  void TearDown() override {
    EXPECT_EQ(segments_of(getpid()), std::vector<std::string>{}) << "segments left in /dev/shm";
  }
};

TEST_F(ShmBoardTest, RoundsCarryEveryRanksBytesThroughAlternatingSlots) {
  constexpr int kRanks = 3;
  auto endpoints = connected_job(kRanks);
  for (std::uint64_t round = 1; round <= 6; ++round) {
    // Sizes up to a whole slot; rounds 1 and 3 share a slot, so stale bytes would show.
    const std::size_t bytes = round == 6 ? kBoardSlotBytes : 8 * round + 1;
    for (int r = 0; r < kRanks; ++r) {
      SharedBoard& b = board(endpoints[static_cast<std::size_t>(r)]);
      EXPECT_EQ(b.begin_round(), round);
      EXPECT_EQ(b.slot_bytes(), kBoardSlotBytes);
      // Not published yet: every peer reads "not yet" (the slot still holds round - 2).
      for (int other = 0; other < kRanks; ++other) {
        if (other == r) continue;
        EXPECT_FALSE(board(endpoints[static_cast<std::size_t>(other)]).read(r, round).has_value());
      }
      publish(b, round, pattern(bytes, static_cast<int>(round) * 10 + r), 0x1000u + r);
    }
    for (int reader = 0; reader < kRanks; ++reader) {
      for (int r = 0; r < kRanks; ++r) {
        if (r == reader) continue;
        const auto entry = board(endpoints[static_cast<std::size_t>(reader)]).read(r, round);
        ASSERT_TRUE(entry.has_value()) << "round " << round << " of rank " << r;
        EXPECT_EQ(entry->sequence, round * 10);
        EXPECT_EQ(entry->signature, 0x1000u + r);
        const auto expected = pattern(bytes, static_cast<int>(round) * 10 + r);
        ASSERT_EQ(entry->data.size(), bytes);
        EXPECT_EQ(std::memcmp(entry->data.data(), expected.data(), bytes), 0)
            << "round " << round << " of rank " << r << " arrived changed";
      }
    }
  }
}

TEST_F(ShmBoardTest, ASleepingReaderWakesWhenTheRoundIsPublished) {
  auto endpoints = connected_job(2);
  SharedBoard& reader = board(endpoints[0]);
  SharedBoard& writer = board(endpoints[1]);
  const std::uint64_t round = writer.begin_round();
  std::thread late([&] {
    std::this_thread::sleep_for(50ms);
    publish(writer, round, pattern(64, 1), 7);
  });
  const auto start = Clock::now();
  while (!reader.read(1, round).has_value() && Clock::now() - start < 10s) {
    reader.sleep_until_published(1, round, std::chrono::microseconds(5'000'000));
  }
  const auto waited = Clock::now() - start;
  late.join();
  EXPECT_TRUE(reader.read(1, round).has_value());
  // Woken by the publication, not by the 5 s bound.
  EXPECT_LT(waited, 3s);
  // A sleep with nothing to wait for is bounded by its timeout.
  const auto before = Clock::now();
  reader.sleep_until_published(1, round + 1, std::chrono::microseconds(20'000));
  EXPECT_LT(Clock::now() - before, 3s);
}

TEST_F(ShmBoardTest, AFailedPeerEndsTheWaitWithItsCause) {
  auto endpoints = connected_job(3);
  endpoints[0]->fail_peer(1, HM_ERR_PEER_FAILED, "rank 1 vanished from the control plane");
  // The failure reaches the board through the progress thread: look until it shows.
  std::string message;
  const auto deadline = Deadline::after(5s);
  hm_status_t status = HM_SUCCESS;
  while ((status = read_error(board(endpoints[0]), 1, 1, &message)) == HM_SUCCESS &&
         !deadline.expired()) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(status, HM_ERR_PEER_FAILED);
  EXPECT_NE(message.find("vanished from the control plane"), std::string::npos) << message;
  // Rank 2 is untouched.
  publish(board(endpoints[2]), 1, pattern(16, 2), 9);
  EXPECT_TRUE(board(endpoints[0]).read(2, 1).has_value());
}

TEST_F(ShmBoardTest, APeerThatClosedIsAFailureUnlessItPublishedFirst) {
  auto endpoints = connected_job(3);
  publish(board(endpoints[1]), 1, pattern(16, 3), 5);
  endpoints[1]->shutdown(HM_ERR_ABORTED, "destroyed by the test", ShutdownWait::kUntilReleased);
  // What it published before closing is still read.
  EXPECT_TRUE(board(endpoints[0]).read(1, 1).has_value());
  std::string message;
  EXPECT_EQ(read_error(board(endpoints[0]), 1, 2, &message), HM_ERR_PEER_FAILED);
  EXPECT_NE(message.find("closed its shm endpoint"), std::string::npos) << message;
}

TEST_F(ShmBoardTest, ReadsAfterThisEndpointShutDownFailWithItsStatus) {
  auto endpoints = connected_job(2);
  endpoints[0]->shutdown(HM_ERR_ABORTED, "aborted by the test", ShutdownWait::kUntilReleased);
  std::string message;
  EXPECT_EQ(read_error(board(endpoints[0]), 1, 1, &message), HM_ERR_ABORTED);
  EXPECT_NE(message.find("aborted by the test"), std::string::npos) << message;
}

TEST_F(ShmBoardTest, SlotsThatMakeNoSenseAreRefused) {
  auto endpoints = connected_job(2);
  SharedBoard& writer = board(endpoints[1]);
  // The header line sits just before a slot's data (layout.hpp).
  auto header = [&](std::uint64_t round) -> BoardSlotHeader& {
    return *reinterpret_cast<BoardSlotHeader*>(writer.own_slot(round).data() - kCacheLine);
  };
  std::string message;
  // A round ahead of the reader's: the ranks disagree about earlier calls.
  header(3).round = 3;
  EXPECT_EQ(read_error(board(endpoints[0]), 1, 1, &message), HM_ERR_MISMATCH);
  EXPECT_NE(message.find("round 3"), std::string::npos) << message;
  // A size beyond the slot.
  header(2).round = 2;
  header(2).bytes = kBoardSlotBytes + 1;
  EXPECT_EQ(read_error(board(endpoints[0]), 1, 2, &message), HM_ERR_TRANSPORT);
  EXPECT_NE(message.find("bytes in a board slot"), std::string::npos) << message;
  // And nothing larger than a slot can be published.
  EXPECT_THROW(writer.publish(4, 4, 0, -1, kBoardSlotBytes + 1), Error);
  // Out-of-range peers are refused.
  EXPECT_THROW(board(endpoints[0]).read(0, 1), Error);
  EXPECT_THROW(board(endpoints[0]).read(2, 1), Error);
}

}  // namespace
}  // namespace holmes::shm
