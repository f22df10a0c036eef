// The link shaper over a fake transport that records what it is handed and when: messages keep
// their order per link, a burst is held to the link's rate, the latency is added, the real
// send's status comes back, and shutdown fails what is still held without handing it over.
// Timing checks are lower bounds only (the shaper may be late on a busy machine, never early).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.hpp"
#include "transports/shaping/link_shaper.hpp"

namespace holmes {
namespace {

using std::chrono::duration;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;

// Stands in for a real transport: records each message handed over, and completes its send at
// once (or later, by hand, when `hold` is set).
class FakeTransport {
 public:
  struct Sent {
    int peer;
    std::uint64_t tag;
    std::uint32_t signature;
    std::size_t bytes;
    Clock::time_point at;
    CompletionPtr done;
  };

  explicit FakeTransport(bool hold = false) : hold_(hold) {}

  LinkShaper::SendFunction sender() {
    return [this](int peer, std::uint64_t tag, std::uint32_t signature,
                  std::span<const std::byte> data) {
      auto done = std::make_shared<Completion>();
      {
        std::lock_guard lock(mutex_);
        sent_.push_back({peer, tag, signature, data.size(), Clock::now(), done});
      }
      if (!hold_) done->complete();
      return done;
    };
  }

  std::vector<Sent> sent() const {
    std::lock_guard lock(mutex_);
    return sent_;
  }

  // Waits (bounded) until `count` messages were handed over.
  bool wait_for_count(std::size_t count, milliseconds limit = milliseconds(10000)) const {
    const auto until = Clock::now() + limit;
    while (Clock::now() < until) {
      if (sent().size() >= count) return true;
      std::this_thread::sleep_for(milliseconds(1));
    }
    return false;
  }

 private:
  bool hold_;
  mutable std::mutex mutex_;
  std::vector<Sent> sent_;
};

LinkShape shape_of(double bytes_per_s, nanoseconds latency = nanoseconds(0)) {
  return LinkShape{bytes_per_s, latency, "test"};
}

// Shapes for `peers` peers: peer 0 (this rank) and `unshaped` are not shaped.
std::vector<std::optional<LinkShape>> shapes(int peers, const LinkShape& shape, int unshaped = -1) {
  std::vector<std::optional<LinkShape>> out(static_cast<std::size_t>(peers), shape);
  out[0].reset();
  if (unshaped >= 0) out[static_cast<std::size_t>(unshaped)].reset();
  return out;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return duration<double>(b - a).count();
}

TEST(LinkShapeTest, DescribesRateLatencyAndOrigin) {
  const LinkShape shape{0.25e9 / 8, std::chrono::microseconds(30), "link class eth-25 / 100"};
  EXPECT_EQ(shape.describe(), "shaped to 0.25 Gbit/s + 30 us (link class eth-25 / 100)");
  EXPECT_EQ((LinkShape{2e9 / 8, nanoseconds(2500), ""}).describe(), "shaped to 2 Gbit/s + 2.5 us");
}

TEST(LinkShaperTest, RefusesRatesThatAreNotPositiveAndLatenciesBelowZero) {
  FakeTransport fake;
  for (double rate : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(),
                      std::numeric_limits<double>::infinity()}) {
    try {
      LinkShaper shaper(shapes(2, shape_of(rate)), fake.sender());
      ADD_FAILURE() << "rate " << rate << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(e.what()).find("link to rank 1"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(LinkShaper(shapes(2, shape_of(1e6, nanoseconds(-1))), fake.sender()), Error);
}

TEST(LinkShaperTest, ReportsWhichLinksAreShaped) {
  FakeTransport fake;
  LinkShaper shaper(shapes(4, shape_of(1e6), 2), fake.sender());
  EXPECT_EQ(shaper.shape(0), nullptr);
  EXPECT_NE(shaper.shape(1), nullptr);
  EXPECT_EQ(shaper.shape(2), nullptr);
  EXPECT_NE(shaper.shape(3), nullptr);
  EXPECT_EQ(shaper.shape(-1), nullptr);
  EXPECT_EQ(shaper.shape(4), nullptr);
  EXPECT_TRUE(shaper.any_shaped());
  std::vector<std::byte> buffer(8);
  try {
    shaper.isend(2, 1, 0, buffer);
    ADD_FAILURE() << "a send on an unshaped link was queued";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_INTERNAL);
  }
}

TEST(LinkShaperTest, KeepsTheOrderOfMessagesToEachPeer) {
  FakeTransport fake;
  LinkShaper shaper(shapes(3, shape_of(50e6, std::chrono::microseconds(20))), fake.sender());
  std::vector<std::byte> buffer(64 << 10);
  std::vector<CompletionPtr> done;
  // Sizes vary (a small message after a large one is due later still), peers interleave.
  constexpr int kMessages = 40;
  for (int i = 0; i < kMessages; ++i) {
    const std::size_t bytes = (i % 3 == 0) ? buffer.size() : static_cast<std::size_t>(i);
    done.push_back(
        shaper.isend(1 + i % 2, static_cast<std::uint64_t>(i), 7, std::span(buffer).first(bytes)));
  }
  for (const auto& d : done) {
    ASSERT_TRUE(d->wait_until(Deadline::after(milliseconds(10000))));
    EXPECT_EQ(d->status(), HM_SUCCESS) << d->message();
  }
  const auto sent = fake.sent();
  ASSERT_EQ(sent.size(), static_cast<std::size_t>(kMessages));
  std::vector<std::uint64_t> next_tag = {0, 0, 1};  // peer 1: 0, 2, 4 ...; peer 2: 1, 3, 5 ...
  for (const auto& s : sent) {
    EXPECT_EQ(s.tag, next_tag[static_cast<std::size_t>(s.peer)]) << "peer " << s.peer;
    next_tag[static_cast<std::size_t>(s.peer)] += 2;
    EXPECT_EQ(s.signature, 7u);
    EXPECT_EQ(s.bytes, (s.tag % 3 == 0) ? buffer.size() : s.tag);
  }
}

TEST(LinkShaperTest, HoldsABurstToTheLinkRate) {
  FakeTransport fake;
  constexpr double kRate = 20e6;  // bytes/s
  constexpr std::size_t kBytes = 200'000;
  constexpr int kMessages = 10;  // 2 MB at 20 MB/s: at least 0.1 s
  LinkShaper shaper(shapes(2, shape_of(kRate)), fake.sender());
  std::vector<std::byte> buffer(kBytes);
  const auto start = Clock::now();
  std::vector<CompletionPtr> done;
  for (int i = 0; i < kMessages; ++i)
    done.push_back(shaper.isend(1, static_cast<unsigned>(i), 0, buffer));
  for (const auto& d : done) ASSERT_TRUE(d->wait_until(Deadline::after(milliseconds(10000))));
  const double elapsed = seconds_between(start, Clock::now());
  EXPECT_GE(elapsed, kMessages * kBytes / kRate);
  // Each message leaves only once the ones before it and itself have been serialized.
  const auto sent = fake.sent();
  ASSERT_EQ(sent.size(), static_cast<std::size_t>(kMessages));
  for (int i = 0; i < kMessages; ++i) {
    EXPECT_GE(seconds_between(start, sent[static_cast<std::size_t>(i)].at),
              (i + 1) * kBytes / kRate)
        << "message " << i;
  }
}

TEST(LinkShaperTest, LinksToDifferentPeersAreIndependent) {
  FakeTransport fake;
  LinkShaper shaper(shapes(3, shape_of(1e6)), fake.sender());
  std::vector<std::byte> big(500'000);  // half a second on peer 1's link
  std::vector<std::byte> small(10);
  auto first = shaper.isend(1, 1, 0, big);
  auto second = shaper.isend(2, 2, 0, small);
  ASSERT_TRUE(first->wait_until(Deadline::after(milliseconds(10000))));
  ASSERT_TRUE(second->wait_until(Deadline::after(milliseconds(10000))));
  const auto sent = fake.sent();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].peer, 2) << "peer 2's message waited behind peer 1's";
  EXPECT_EQ(sent[1].peer, 1);
}

TEST(LinkShaperTest, LinksOfOneBucketShareItsRate) {
  FakeTransport fake;
  constexpr double kRate = 10e6;
  constexpr std::size_t kBytes = 250'000;
  LinkShape shared = shape_of(kRate);
  shared.bucket = 3;
  LinkShaper shaper(shapes(4, shared), fake.sender());
  std::vector<std::byte> buffer(kBytes);
  const auto start = Clock::now();
  // One message to each of three peers at once: 0.75 MB through one 10 MB/s bucket.
  std::vector<CompletionPtr> done;
  for (int peer = 1; peer <= 3; ++peer) done.push_back(shaper.isend(peer, 1, 0, buffer));
  for (const auto& d : done) ASSERT_TRUE(d->wait_until(Deadline::after(milliseconds(10000))));
  const auto sent = fake.sent();
  ASSERT_EQ(sent.size(), 3u);
  for (std::size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(sent[i].peer, static_cast<int>(i) + 1);
    EXPECT_GE(seconds_between(start, sent[i].at), static_cast<double>(i + 1) * kBytes / kRate)
        << "message " << i;
  }
}

TEST(LinkShaperTest, AddsTheLatency) {
  FakeTransport fake;
  const auto latency = milliseconds(60);
  LinkShaper shaper(shapes(2, shape_of(1e9, latency)), fake.sender());
  std::vector<std::byte> buffer(1000);  // 1 us at 1 GB/s
  const auto start = Clock::now();
  auto empty = shaper.isend(1, 1, 0, {});
  auto small = shaper.isend(1, 2, 0, buffer);
  ASSERT_TRUE(empty->wait_until(Deadline::after(milliseconds(10000))));
  ASSERT_TRUE(small->wait_until(Deadline::after(milliseconds(10000))));
  const auto sent = fake.sent();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_GE(sent[0].at - start, latency);
  EXPECT_GE(sent[1].at - start, latency + std::chrono::microseconds(1));
}

TEST(LinkShaperTest, CompletesWhenTheRealSendDoesWithItsStatus) {
  FakeTransport fake(/*hold=*/true);
  LinkShaper shaper(shapes(2, shape_of(1e9)), fake.sender());
  std::vector<std::byte> buffer(100);
  auto ok = shaper.isend(1, 1, 0, buffer);
  auto failed = shaper.isend(1, 2, 0, buffer);
  ASSERT_TRUE(fake.wait_for_count(2));
  const auto sent = fake.sent();
  EXPECT_FALSE(ok->done()) << "completed before the real send";
  EXPECT_FALSE(failed->done());
  sent[1].done->complete(HM_ERR_PEER_FAILED, "rank 1 went away");
  sent[0].done->complete();
  ASSERT_TRUE(ok->wait_until(Deadline::after(milliseconds(10000))));
  ASSERT_TRUE(failed->wait_until(Deadline::after(milliseconds(10000))));
  EXPECT_EQ(ok->status(), HM_SUCCESS);
  EXPECT_EQ(failed->status(), HM_ERR_PEER_FAILED);
  EXPECT_EQ(failed->message(), "rank 1 went away");
}

TEST(LinkShaperTest, ASendThatThrowsFailsItsCompletion) {
  LinkShaper shaper(
      shapes(2, shape_of(1e9)),
      [](int, std::uint64_t, std::uint32_t, std::span<const std::byte>) -> CompletionPtr {
        fail(HM_ERR_TRANSPORT, "no route to rank 1");
      });
  std::vector<std::byte> buffer(10);
  auto done = shaper.isend(1, 1, 0, buffer);
  ASSERT_TRUE(done->wait_until(Deadline::after(milliseconds(10000))));
  EXPECT_EQ(done->status(), HM_ERR_TRANSPORT);
  EXPECT_EQ(done->message(), "no route to rank 1");
}

TEST(LinkShaperTest, ShutdownFailsWhatIsHeldAndNeverHandsItOver) {
  FakeTransport fake;
  auto shaper = std::make_unique<LinkShaper>(shapes(3, shape_of(1000)), fake.sender());
  std::vector<std::byte> buffer(20'000);  // 20 s each at 1 kB/s
  std::vector<CompletionPtr> done;
  for (int i = 0; i < 3; ++i)
    done.push_back(shaper->isend(1 + i % 2, static_cast<unsigned>(i), 0, buffer));
  shaper->shutdown(HM_ERR_ABORTED, "the communicator was destroyed", ShutdownWait::kUntilReleased);
  for (const auto& d : done) {
    ASSERT_TRUE(d->done()) << "still pending after shutdown returned";
    EXPECT_EQ(d->status(), HM_ERR_ABORTED);
    EXPECT_EQ(d->message(), "the communicator was destroyed");
  }
  auto late = shaper->isend(1, 9, 0, buffer);
  ASSERT_TRUE(late->done());
  EXPECT_EQ(late->status(), HM_ERR_ABORTED);
  shaper.reset();
  EXPECT_TRUE(fake.sent().empty());
}

TEST(LinkShaperTest, ShutdownWithoutWaitingFailsWhatIsHeld) {
  FakeTransport fake;
  LinkShaper shaper(shapes(2, shape_of(1000)), fake.sender());
  std::vector<std::byte> buffer(20'000);
  auto held = shaper.isend(1, 1, 0, buffer);
  shaper.shutdown(HM_ERR_TIMEOUT, "abort", ShutdownWait::kReturnAtOnce);
  ASSERT_TRUE(held->done());
  EXPECT_EQ(held->status(), HM_ERR_TIMEOUT);
  EXPECT_TRUE(fake.sent().empty());
}

TEST(LinkShaperTest, FailPeerFailsOnlyThatPeersMessages) {
  FakeTransport fake;
  LinkShaper shaper(shapes(3, shape_of(1000)), fake.sender());
  std::vector<std::byte> buffer(20'000);  // 20 s each
  auto to_one = shaper.isend(1, 1, 0, buffer);
  auto to_two = shaper.isend(2, 2, 0, buffer);
  shaper.fail_peer(1, HM_ERR_PEER_FAILED, "rank 1 closed its connection");
  ASSERT_TRUE(to_one->done());
  EXPECT_EQ(to_one->status(), HM_ERR_PEER_FAILED);
  EXPECT_EQ(to_one->message(), "rank 1 closed its connection");
  EXPECT_FALSE(to_two->done());
  shaper.shutdown(HM_ERR_ABORTED, "done", ShutdownWait::kUntilReleased);
  EXPECT_EQ(to_two->status(), HM_ERR_ABORTED);
  EXPECT_TRUE(fake.sent().empty());
}

}  // namespace
}  // namespace holmes
