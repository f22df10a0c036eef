// The shm transport with several endpoints in one process: messages of every size arrive intact
// through the rings and by cross-memory attach, whichever side comes first; many tags and
// hundreds of requests at once; fan-in; several caller threads sending to one peer; fragments
// held in a small ring, moved aside or parked until their receives come; mismatches; a peer that
// closes or fails; bad or foreign segments refused with clear errors; nothing left in /dev/shm.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <latch>
#include <random>
#include <thread>

#include "core/status.hpp"
#include "shm_test_util.hpp"
#include "transports/shm/layout.hpp"

namespace holmes::shm {
namespace {

using namespace testing;

// Every test must leave /dev/shm as it found it.
class ShmTest : public ::testing::Test {
 protected:
  void TearDown() override {
    EXPECT_EQ(segments_of(getpid()), std::vector<std::string>{}) << "segments left in /dev/shm";
  }
};

// Sends `bytes` from endpoint 0 to 1 and checks what arrives.
void exchange(std::size_t bytes, bool receive_first, const ShmTuning& t) {
  auto endpoints = job(2, t);
  const auto sent = pattern(bytes, static_cast<int>(bytes % 251));
  std::vector<std::byte> received(bytes, std::byte{0});
  CompletionPtr recv;
  if (receive_first) recv = endpoints[1]->irecv(0, 42, 7, received);
  auto send = endpoints[0]->isend(1, 42, 7, sent);
  if (!receive_first) {
    // Let it arrive unexpected (a ring message is then complete; a CMA one is read into a
    // temporary) before the receive is posted.
    std::this_thread::sleep_for(20ms);
    recv = endpoints[1]->irecv(0, 42, 7, received);
  }
  ASSERT_TRUE(finishes(recv));
  ASSERT_EQ(recv->status(), HM_SUCCESS) << recv->message();
  ASSERT_TRUE(finishes(send));
  EXPECT_EQ(send->status(), HM_SUCCESS) << send->message();
  EXPECT_TRUE(received == sent) << bytes << " bytes arrived changed";
}

class ShmSizesTest : public ShmTest,
                     public ::testing::WithParamInterface<std::tuple<std::size_t, bool, bool>> {};

TEST_P(ShmSizesTest, MessageArrivesIntact) {
  const auto [bytes, receive_first, cma] = GetParam();
  exchange(bytes, receive_first, tuning(cma));
}

INSTANTIATE_TEST_SUITE_P(Shapes, ShmSizesTest,
                         ::testing::Combine(::testing::Values(0, 1, 63, 64, 65, 4096, 64u << 10,
                                                              (256u << 10) + 1, (1u << 20) - 1,
                                                              1u << 20, (4u << 20) - 64,
                                                              (16u << 20) + 3, 64u << 20),
                                            ::testing::Bool(), ::testing::Bool()));

// The smallest ring: records wrap around it many times, with pad records at its end.
TEST_F(ShmTest, SmallRingWrapsManyTimes) {
  exchange((3u << 20) + 17, true, tuning(false, 64 << 10));
}

// One message of 1 GiB, the largest size the contract names, by each path.
TEST_F(ShmTest, OneGibibyteByCrossMemoryAttach) { exchange(1ull << 30, true, tuning(true)); }
TEST_F(ShmTest, OneGibibyteThroughTheRing) { exchange(1ull << 30, true, tuning(false)); }

TEST_F(ShmTest, ManyTagsInAnyOrder) {
  auto endpoints = job(3);
  constexpr int kMessages = 200;
  std::vector<std::vector<std::byte>> out;
  std::vector<std::vector<std::byte>> in(kMessages);
  std::vector<CompletionPtr> pending;
  for (int m = 0; m < kMessages; ++m) {
    // Sizes on both sides of the fragment size and of the CMA threshold.
    out.push_back(pattern(static_cast<std::size_t>(m) * 3001 + (m % 10 == 0 ? 1u << 20 : 1), m));
    in[static_cast<std::size_t>(m)].resize(out.back().size());
  }
  // Half the receives first, in reverse order; then every send; then the other half.
  for (int m = kMessages - 1; m >= kMessages / 2; --m) {
    pending.push_back(
        endpoints[2]->irecv(0, static_cast<std::uint64_t>(m), 1, in[static_cast<std::size_t>(m)]));
  }
  for (int m = 0; m < kMessages; ++m) {
    pending.push_back(
        endpoints[0]->isend(2, static_cast<std::uint64_t>(m), 1, out[static_cast<std::size_t>(m)]));
  }
  for (int m = 0; m < kMessages / 2; ++m) {
    pending.push_back(
        endpoints[2]->irecv(0, static_cast<std::uint64_t>(m), 1, in[static_cast<std::size_t>(m)]));
  }
  for (auto& p : pending) {
    ASSERT_TRUE(finishes(p));
    EXPECT_EQ(p->status(), HM_SUCCESS) << p->message();
  }
  EXPECT_TRUE(in == out);
}

// Hundreds of requests outstanding in both directions at once, more than the ring holds.
TEST_F(ShmTest, HundredsOfOutstandingRequestsBothWays) {
  auto endpoints = job(2, tuning(true, 64 << 10));
  constexpr int kMessages = 400;
  std::vector<std::vector<std::byte>> out[2];
  std::vector<std::vector<std::byte>> in[2];
  std::vector<CompletionPtr> pending;
  for (int side = 0; side < 2; ++side) {
    for (int m = 0; m < kMessages; ++m) {
      out[side].push_back(pattern(static_cast<std::size_t>(m % 17) * 4099 + 8, m + 1000 * side));
      in[side].emplace_back(out[side].back().size());
    }
  }
  for (int m = 0; m < kMessages; ++m) {
    for (int side = 0; side < 2; ++side) {
      const auto tag = static_cast<std::uint64_t>(m);
      pending.push_back(endpoints[side]->isend(1 - side, tag, 3, out[side][m]));
      pending.push_back(endpoints[1 - side]->irecv(side, tag, 3, in[side][m]));
    }
  }
  for (auto& p : pending) {
    ASSERT_TRUE(finishes(p));
    EXPECT_EQ(p->status(), HM_SUCCESS) << p->message();
  }
  EXPECT_TRUE(in[0] == out[0]);
  EXPECT_TRUE(in[1] == out[1]);
}

// A cross-memory send completes even though its receive is posted only after it completed (the
// receiver reads it into a temporary once it has waited long enough), so ranks that each wait
// for their send before receiving do not deadlock.
TEST_F(ShmTest, SendsCompleteBeforeTheirReceivesArePosted) {
  auto endpoints = job(2);
  const auto a = pattern(1u << 20, 1);
  const auto b = pattern(1u << 20, 2);
  auto send_a = endpoints[0]->isend(1, 1, 1, a);
  auto send_b = endpoints[1]->isend(0, 1, 1, b);
  ASSERT_TRUE(finishes(send_a, 5s));
  ASSERT_TRUE(finishes(send_b, 5s));
  EXPECT_EQ(send_a->status(), HM_SUCCESS) << send_a->message();
  EXPECT_EQ(send_b->status(), HM_SUCCESS) << send_b->message();
  std::vector<std::byte> got_a(a.size());
  std::vector<std::byte> got_b(b.size());
  auto recv_a = endpoints[1]->irecv(0, 1, 1, got_a);
  auto recv_b = endpoints[0]->irecv(1, 1, 1, got_b);
  ASSERT_TRUE(finishes(recv_a));
  ASSERT_TRUE(finishes(recv_b));
  EXPECT_TRUE(got_a == a);
  EXPECT_TRUE(got_b == b);
}

// Ring sends complete without their receives: fragments wait in the ring while it has room, and
// move out of the producer's way (into the matcher) when it needs the space.
TEST_F(ShmTest, RingSendsCompleteWithoutTheirReceives) {
  auto endpoints = job(2, tuning(false, 64 << 10));
  std::vector<std::vector<std::byte>> out;
  for (int m = 0; m < 12; ++m) out.push_back(pattern(m == 0 ? (1u << 20) + 5 : 3000u * m, m));
  std::vector<CompletionPtr> sends;
  for (int m = 0; m < 12; ++m) {
    sends.push_back(endpoints[0]->isend(1, static_cast<std::uint64_t>(m), 1, out[m]));
  }
  for (auto& c : sends) {
    ASSERT_TRUE(finishes(c, 5s));
    EXPECT_EQ(c->status(), HM_SUCCESS) << c->message();
  }
  std::vector<std::vector<std::byte>> in;
  for (const auto& o : out) in.emplace_back(o.size());
  std::vector<CompletionPtr> recvs;
  for (int m = 11; m >= 0; --m) {
    recvs.push_back(endpoints[1]->irecv(0, static_cast<std::uint64_t>(m), 1, in[m]));
  }
  for (auto& c : recvs) {
    ASSERT_TRUE(finishes(c));
    EXPECT_EQ(c->status(), HM_SUCCESS) << c->message();
  }
  EXPECT_TRUE(in == out);
}

// More cross-memory messages outstanding than a pair has acknowledgement slots (64): the rest
// take the ring, and everything arrives.
TEST_F(ShmTest, MoreLargeMessagesThanAcknowledgementSlots) {
  auto t = tuning();
  t.cma_min_bytes = 64u << 10;
  auto endpoints = job(2, t);
  constexpr int kMessages = 300;
  std::vector<std::vector<std::byte>> out;
  std::vector<std::vector<std::byte>> in;
  std::vector<CompletionPtr> sends;
  for (int m = 0; m < kMessages; ++m) {
    out.push_back(pattern(100000 + static_cast<std::size_t>(m), m));
    in.emplace_back(out.back().size());
  }
  for (int m = 0; m < kMessages; ++m) {
    sends.push_back(endpoints[0]->isend(1, static_cast<std::uint64_t>(m), 4, out[m]));
  }
  std::vector<CompletionPtr> recvs;
  for (int m = kMessages - 1; m >= 0; --m) {
    recvs.push_back(endpoints[1]->irecv(0, static_cast<std::uint64_t>(m), 4, in[m]));
  }
  for (auto& c : sends) {
    ASSERT_TRUE(finishes(c));
    EXPECT_EQ(c->status(), HM_SUCCESS) << c->message();
  }
  for (auto& c : recvs) {
    ASSERT_TRUE(finishes(c));
    EXPECT_EQ(c->status(), HM_SUCCESS) << c->message();
  }
  EXPECT_TRUE(in == out);
}

// Seven senders into one receiver at once, through rings and by CMA.
TEST_F(ShmTest, FanInOfSevenSenders) {
  for (const bool cma : {false, true}) {
    auto endpoints = job(8, tuning(cma));
    std::vector<std::vector<std::byte>> out;
    std::vector<std::vector<std::byte>> in(8);
    std::vector<CompletionPtr> pending;
    for (int r = 1; r < 8; ++r) {
      out.push_back(pattern((3u << 20) + static_cast<std::size_t>(r), r));
      in[static_cast<std::size_t>(r)].resize(out.back().size());
      pending.push_back(endpoints[0]->irecv(r, 9, 2, in[static_cast<std::size_t>(r)]));
    }
    for (int r = 1; r < 8; ++r) {
      pending.push_back(endpoints[static_cast<std::size_t>(r)]->isend(
          0, 9, 2, out[static_cast<std::size_t>(r - 1)]));
    }
    for (auto& p : pending) {
      ASSERT_TRUE(finishes(p));
      EXPECT_EQ(p->status(), HM_SUCCESS) << p->message();
    }
    for (int r = 1; r < 8; ++r) {
      EXPECT_TRUE(in[static_cast<std::size_t>(r)] == out[static_cast<std::size_t>(r - 1)])
          << "from rank " << r << (cma ? " by CMA" : " through the ring");
    }
  }
}

TEST_F(ShmTest, SeveralCommunicatorsAtOnce) {
  auto a = job(3, tuning(), "test/world0");
  auto b = job(3, tuning(), "test/split1:0");
  const auto x = pattern(100000, 1);
  const auto y = pattern(100000, 2);
  std::vector<std::byte> rx(x.size());
  std::vector<std::byte> ry(y.size());
  auto r1 = a[1]->irecv(2, 1, 1, rx);
  auto r2 = b[1]->irecv(2, 1, 1, ry);
  auto s1 = a[2]->isend(1, 1, 1, x);
  auto s2 = b[2]->isend(1, 1, 1, y);
  for (auto& c : {r1, r2, s1, s2}) {
    ASSERT_TRUE(finishes(c));
    EXPECT_EQ(c->status(), HM_SUCCESS) << c->message();
  }
  EXPECT_TRUE(rx == x);
  EXPECT_TRUE(ry == y);
}

TEST_F(ShmTest, SizeMismatchIsReported) {
  for (const std::size_t bytes : {1000u, 1u << 20}) {  // through the ring, by CMA
    auto endpoints = job(2);
    const auto sent = pattern(bytes, 1);
    std::vector<std::byte> too_small(bytes / 2);
    auto recv = endpoints[1]->irecv(0, 5, 9, too_small);
    auto send = endpoints[0]->isend(1, 5, 9, sent);
    ASSERT_TRUE(finishes(recv));
    EXPECT_EQ(recv->status(), HM_ERR_MISMATCH);
    EXPECT_NE(recv->message().find(std::to_string(bytes) + " bytes"), std::string::npos)
        << recv->message();
    EXPECT_NE(recv->message().find("rank 0"), std::string::npos) << recv->message();
    // The sender is not held up by the refusal, and the link still works.
    ASSERT_TRUE(finishes(send));
    EXPECT_EQ(send->status(), HM_SUCCESS) << send->message();
    std::vector<std::byte> right(bytes);
    auto again = endpoints[1]->irecv(0, 6, 9, right);
    auto resend = endpoints[0]->isend(1, 6, 9, sent);
    ASSERT_TRUE(finishes(again));
    EXPECT_EQ(again->status(), HM_SUCCESS) << again->message();
    EXPECT_TRUE(right == sent);
    ASSERT_TRUE(finishes(resend));  // `sent` is the transport's until then
  }
}

TEST_F(ShmTest, SignatureMismatchIsReported) {
  for (const std::size_t bytes : {64u, 1u << 20}) {
    auto endpoints = job(2);
    const auto sent = pattern(bytes, 1);
    std::vector<std::byte> received(bytes);
    auto send = endpoints[0]->isend(1, 5, 0x1111, sent);
    ASSERT_TRUE(finishes(send));
    auto recv = endpoints[1]->irecv(0, 5, 0x2222, received);  // arrived before: checked at post
    ASSERT_TRUE(finishes(recv));
    EXPECT_EQ(recv->status(), HM_ERR_MISMATCH);
    EXPECT_NE(recv->message().find("different operation"), std::string::npos) << recv->message();
  }
}

// A sender destroyed in the middle of a large message: the receiver fails promptly with
// HM_ERR_PEER_FAILED instead of waiting for the rest.
TEST_F(ShmTest, PeerDestroyedMidMessageFailsTheReceiver) {
  for (const bool cma : {false, true}) {
    auto endpoints = job(2, tuning(cma));
    std::vector<std::byte> big(512u << 20);
    std::vector<std::byte> received(big.size());
    auto recv = endpoints[1]->irecv(0, 1, 1, received);
    auto send = endpoints[0]->isend(1, 1, 1, big);
    std::this_thread::sleep_for(5ms);
    const auto start = Clock::now();
    endpoints[0].reset();  // shuts down, fails the send, tells the peer
    EXPECT_TRUE(send->done());
    EXPECT_EQ(send->status(), HM_ERR_ABORTED);
    ASSERT_TRUE(finishes(recv, 5s));
    EXPECT_LT(Clock::now() - start, 2s);
    EXPECT_EQ(recv->status(), HM_ERR_PEER_FAILED) << recv->message();
    EXPECT_NE(recv->message().find("rank 0"), std::string::npos) << recv->message();
    // Later receives from it fail at once, and so do sends to it.
    std::vector<std::byte> small(8);
    auto late = endpoints[1]->irecv(0, 2, 1, small);
    ASSERT_TRUE(finishes(late, 2s));
    EXPECT_EQ(late->status(), HM_ERR_PEER_FAILED);
    auto to_gone = endpoints[1]->isend(0, 3, 1, small);
    ASSERT_TRUE(finishes(to_gone, 2s));
    EXPECT_EQ(to_gone->status(), HM_ERR_PEER_FAILED);
  }
}

// What a peer sent before it closed is still delivered; only what never came fails.
TEST_F(ShmTest, MessagesSentBeforeCloseAreDelivered) {
  auto endpoints = job(2);
  const auto small = pattern(1000, 3);
  const auto large = pattern(3u << 20, 4);
  auto s1 = endpoints[0]->isend(1, 1, 1, small);
  auto s2 = endpoints[0]->isend(1, 2, 1, large);
  ASSERT_TRUE(finishes(s1));
  EXPECT_EQ(s1->status(), HM_SUCCESS);
  std::vector<std::byte> r_large(large.size());
  auto r2 = endpoints[1]->irecv(0, 2, 1, r_large);
  ASSERT_TRUE(finishes(s2));  // a CMA send completes once the receiver has read it
  EXPECT_EQ(s2->status(), HM_SUCCESS);
  endpoints[0].reset();
  std::vector<std::byte> r_small(small.size());
  auto r1 = endpoints[1]->irecv(0, 1, 1, r_small);
  std::vector<std::byte> r_never(10);
  auto r3 = endpoints[1]->irecv(0, 3, 1, r_never);
  for (auto& c : {r1, r2}) {
    ASSERT_TRUE(finishes(c));
    EXPECT_EQ(c->status(), HM_SUCCESS) << c->message();
  }
  EXPECT_TRUE(r_small == small);
  EXPECT_TRUE(r_large == large);
  ASSERT_TRUE(finishes(r3, 2s));
  EXPECT_EQ(r3->status(), HM_ERR_PEER_FAILED);
  EXPECT_NE(r3->message().find("closed its shm endpoint"), std::string::npos) << r3->message();
}

// A peer that closes because its communicator failed says why: ranks waiting on it report that
// cause (a disagreement stays HM_ERR_MISMATCH), not only that it closed.
TEST_F(ShmTest, ClosingPeerPassesOnItsReason) {
  const struct {
    hm_status_t closes_with;
    hm_status_t expected;
  } cases[] = {{HM_ERR_MISMATCH, HM_ERR_MISMATCH},
               {HM_ERR_TIMEOUT, HM_ERR_PEER_FAILED},
               {HM_ERR_PEER_FAILED, HM_ERR_PEER_FAILED}};
  for (const auto& c : cases) {
    auto endpoints = job(2);
    for (auto& e : endpoints) ASSERT_TRUE(finishes(e->connect_all()));
    std::vector<std::byte> buffer(64);
    auto recv = endpoints[1]->irecv(0, 1, 1, buffer);
    const std::string why = std::string("allreduce #7 on rank 0: the link to rank 5 is down\n") +
                            std::string(3000, 'x');  // longer than the room for it
    endpoints[0]->shutdown(c.closes_with, why, ShutdownWait::kUntilReleased);
    ASSERT_TRUE(finishes(recv, 2s));
    EXPECT_EQ(recv->status(), c.expected) << recv->message();
    EXPECT_NE(recv->message().find("rank 0"), std::string::npos) << recv->message();
    EXPECT_NE(recv->message().find(std::string(status_name(c.closes_with)) +
                                   ": allreduce #7 on rank 0: the link to rank 5 is down?xxx"),
              std::string::npos)
        << recv->message();
    EXPECT_LT(recv->message().size(), 1300u);
  }
  // A plain destroy or abort gives no cause beyond the closing.
  auto endpoints = job(2);
  for (auto& e : endpoints) ASSERT_TRUE(finishes(e->connect_all()));
  std::vector<std::byte> buffer(64);
  auto recv = endpoints[1]->irecv(0, 1, 1, buffer);
  endpoints[0]->shutdown(HM_ERR_ABORTED, "the communicator was destroyed",
                         ShutdownWait::kUntilReleased);
  ASSERT_TRUE(finishes(recv, 2s));
  EXPECT_EQ(recv->status(), HM_ERR_PEER_FAILED);
  EXPECT_NE(recv->message().find("closed its shm endpoint"), std::string::npos) << recv->message();
  EXPECT_EQ(recv->message().find("the communicator was destroyed"), std::string::npos)
      << recv->message();
}

TEST_F(ShmTest, FailPeerFailsItsTrafficOnly) {
  auto endpoints = job(3);
  std::vector<std::byte> from1(64);
  std::vector<std::byte> from2(64);
  auto r1 = endpoints[0]->irecv(1, 1, 1, from1);
  auto r2 = endpoints[0]->irecv(2, 1, 1, from2);
  endpoints[0]->fail_peer(1, HM_ERR_PEER_FAILED, "rank 1 vanished from the control plane");
  ASSERT_TRUE(finishes(r1, 2s));
  EXPECT_EQ(r1->status(), HM_ERR_PEER_FAILED);
  EXPECT_EQ(r1->message(), "rank 1 vanished from the control plane");
  auto later = endpoints[0]->isend(1, 2, 1, from1);
  ASSERT_TRUE(finishes(later, 2s));
  EXPECT_EQ(later->status(), HM_ERR_PEER_FAILED);
  // Rank 2 is untouched.
  const auto payload = pattern(64, 5);
  auto s2 = endpoints[2]->isend(0, 1, 1, payload);
  ASSERT_TRUE(finishes(s2));
  ASSERT_TRUE(finishes(r2));
  EXPECT_EQ(r2->status(), HM_SUCCESS) << r2->message();
  EXPECT_TRUE(from2 == payload);
}

TEST_F(ShmTest, ShutdownFailsPendingAndLaterRequests) {
  auto endpoints = job(2);
  std::vector<std::byte> buffer(128);
  auto recv = endpoints[0]->irecv(1, 1, 1, buffer);
  endpoints[0]->shutdown(HM_ERR_ABORTED, "aborted by the test", ShutdownWait::kUntilReleased);
  ASSERT_TRUE(recv->done());  // wait=true: settled before shutdown returned
  EXPECT_EQ(recv->status(), HM_ERR_ABORTED);
  EXPECT_EQ(recv->message(), "aborted by the test");
  auto later = endpoints[0]->isend(1, 2, 1, buffer);
  ASSERT_TRUE(finishes(later, 1s));
  EXPECT_EQ(later->status(), HM_ERR_ABORTED);
  // The peer learns that this endpoint is gone.
  auto theirs = endpoints[1]->irecv(0, 3, 1, buffer);
  ASSERT_TRUE(finishes(theirs, 2s));
  EXPECT_EQ(theirs->status(), HM_ERR_PEER_FAILED);
}

TEST_F(ShmTest, AbortWithoutWaitingSettlesSoon) {
  auto endpoints = job(2);
  std::vector<std::byte> buffer(128);
  auto recv = endpoints[0]->irecv(1, 1, 1, buffer);
  endpoints[0]->shutdown(HM_ERR_ABORTED, "hm_comm_abort", ShutdownWait::kReturnAtOnce);
  ASSERT_TRUE(finishes(recv, 2s));
  EXPECT_EQ(recv->status(), HM_ERR_ABORTED);
}

TEST_F(ShmTest, ConnectAllAttachesAndUnlinksNames) {
  auto endpoints = job(4);
  std::vector<CompletionPtr> connected;
  for (auto& e : endpoints) connected.push_back(e->connect_all());
  for (auto& c : connected) {
    ASSERT_TRUE(finishes(c, 5s));
    EXPECT_EQ(c->status(), HM_SUCCESS) << c->message();
  }
  // Every sender has mapped every segment: the names are gone from /dev/shm while the endpoints
  // live on, so that even a crash now would leave nothing behind.
  const auto deadline = Deadline::after(5s);
  while (!segments_of(getpid()).empty() && !deadline.expired()) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(segments_of(getpid()), std::vector<std::string>{});
  const auto payload = pattern(10, 1);
  std::vector<std::byte> received(10);
  auto recv = endpoints[3]->irecv(1, 1, 1, received);
  auto send = endpoints[1]->isend(3, 1, 1, payload);
  ASSERT_TRUE(finishes(recv));
  ASSERT_TRUE(finishes(send));
  EXPECT_TRUE(received == payload);
}

TEST_F(ShmTest, LinkDescribesTheRing) {
  auto endpoints = job(2);
  const auto link = endpoints[0]->link(1);
  EXPECT_EQ(link.transport, "shm");
  EXPECT_NE(link.description.find(endpoints[1]->listen_address()), std::string::npos)
      << link.description;
  EXPECT_NE(link.description.find("ring 2 MiB"), std::string::npos) << link.description;
  EXPECT_EQ(std::string(endpoints[0]->name()), "shm");
}

TEST_F(ShmTest, RingsShrinkForLargeCommunicators) {
  // 64 ranks: 63 rings of 512 KiB fit the 32 MiB budget (instead of 2 MiB each).
  auto e = endpoint();
  std::vector<std::string> addresses(64);
  addresses[0] = e->listen_address();
  for (int i = 1; i < 64; ++i)
    addresses[static_cast<std::size_t>(i)] = "/holmes-absent-" + std::to_string(i);
  e->set_peers(0, addresses);
  EXPECT_NE(e->link(1).description.find("ring 512 KiB"), std::string::npos)
      << e->link(1).description;
}

TEST_F(ShmTest, DestroyedBeforeItsPeersWereSet) {
  { auto unused = endpoint(); }
  {
    auto unused = endpoint();
    unused->shutdown(HM_ERR_ABORTED, "never used", ShutdownWait::kUntilReleased);
  }
}

// ---------------------------------------------------------------------------------------------
// Addresses that are not (good) segments
// ---------------------------------------------------------------------------------------------

// Connects an endpoint that believes rank 1 is at `address`; returns the outcome.
CompletionPtr connect_to(Transport& e, const std::string& address, int size = 2) {
  std::vector<std::string> addresses(static_cast<std::size_t>(size), address);
  addresses[0] = e.listen_address();
  e.set_peers(0, addresses);
  auto c = e.connect_all();
  EXPECT_TRUE(finishes(c, 10s));
  return c;
}

// A file in /dev/shm with these bytes, removed again at the end of the scope.
class ForeignSegment {
 public:
  ForeignSegment(const std::string& name, const std::vector<std::byte>& bytes) : name_(name) {
    const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    close(fd);
  }
  ~ForeignSegment() { shm_unlink(name_.c_str()); }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

TEST_F(ShmTest, GarbageAddressIsRefused) {
  auto e = endpoint();
  auto c = connect_to(*e, "not a segment\n\x01");
  EXPECT_EQ(c->status(), HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(c->message().find("is not a Holmes shm segment name"), std::string::npos)
      << c->message();
  EXPECT_NE(c->message().find("\\x01"), std::string::npos) << c->message();
}

TEST_F(ShmTest, MissingSegmentIsAPeerFailure) {
  auto e = endpoint();
  auto c = connect_to(*e, "/holmes-nobody-1-000000");
  EXPECT_EQ(c->status(), HM_ERR_PEER_FAILED);
  EXPECT_NE(c->message().find("does not exist"), std::string::npos) << c->message();
}

TEST_F(ShmTest, SegmentWithBadMagicIsRefused) {
  const ForeignSegment foreign("/holmes-foreign-" + std::to_string(getpid()) + "-x",
                               pattern(8192, 1));
  auto e = endpoint();
  auto c = connect_to(*e, foreign.name());
  EXPECT_EQ(c->status(), HM_ERR_TRANSPORT);
  EXPECT_NE(c->message().find("not a Holmes segment (bad magic"), std::string::npos)
      << c->message();
}

TEST_F(ShmTest, TooSmallSegmentIsRefused) {
  const ForeignSegment foreign("/holmes-tiny-" + std::to_string(getpid()) + "-x", pattern(100, 1));
  auto e = endpoint();
  auto c = connect_to(*e, foreign.name());
  EXPECT_EQ(c->status(), HM_ERR_TRANSPORT);
  EXPECT_NE(c->message().find("only 100 bytes"), std::string::npos) << c->message();
}

// A header that claims more than the file holds (a truncated or forged segment) is refused
// before anything past the file's end is touched.
TEST_F(ShmTest, SegmentClaimingMoreThanItHoldsIsRefused) {
  auto real = job(2);  // a genuine segment to copy the header from
  const std::string name = real[1]->listen_address();
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  ASSERT_GE(fd, 0);
  std::vector<std::byte> header(kHeaderBytes);
  ASSERT_EQ(read(fd, header.data(), header.size()), static_cast<ssize_t>(header.size()));
  close(fd);
  const ForeignSegment forged("/holmes-forged-" + std::to_string(getpid()) + "-x", header);
  auto e = endpoint();
  auto c = connect_to(*e, forged.name());
  EXPECT_EQ(c->status(), HM_ERR_TRANSPORT);
  EXPECT_NE(c->message().find("is truncated"), std::string::npos) << c->message();
}

TEST_F(ShmTest, SegmentOfAnotherVersionIsRefused) {
  auto bytes = pattern(8192, 1);
  SegmentHeader h{};
  h.magic = kSegmentMagic;
  h.version = kLayoutVersion + 1;
  h.header_bytes = kHeaderBytes;
  std::memcpy(bytes.data(), &h, sizeof(h));
  const ForeignSegment foreign("/holmes-future-" + std::to_string(getpid()) + "-x", bytes);
  auto e = endpoint();
  auto c = connect_to(*e, foreign.name());
  EXPECT_EQ(c->status(), HM_ERR_TRANSPORT);
  EXPECT_NE(c->message().find("layout version " + std::to_string(kLayoutVersion + 1)),
            std::string::npos)
      << c->message();
}

TEST_F(ShmTest, SegmentOfAnotherCommunicatorIsRefused) {
  auto other = job(2, tuning(), "another/world0");
  auto e = endpoint();
  std::vector<std::string> addresses{e->listen_address(), other[1]->listen_address()};
  e->set_peers(0, addresses);
  auto c = e->connect_all();
  ASSERT_TRUE(finishes(c, 5s));
  EXPECT_EQ(c->status(), HM_ERR_TRANSPORT);
  EXPECT_NE(c->message().find("belongs to another communicator"), std::string::npos)
      << c->message();
}

// A stranger with another token cannot verify the segment and never writes into it; the job's
// own pair keeps working.
TEST_F(ShmTest, WrongTokenIsRefusedAndJobUndisturbed) {
  auto endpoints = job(2);
  auto stranger = endpoint(tuning(), "wrong-token");
  stranger->set_peers(0, {stranger->listen_address(), endpoints[1]->listen_address()});
  const auto payload = pattern(4096, 9);
  auto intrusion = stranger->isend(1, 77, 1, payload);
  ASSERT_TRUE(finishes(intrusion, 5s));
  EXPECT_EQ(intrusion->status(), HM_ERR_AUTH);
  EXPECT_NE(intrusion->message().find("no valid proof of the job token"), std::string::npos)
      << intrusion->message();
  std::vector<std::byte> received(4096);
  auto recv = endpoints[1]->irecv(0, 77, 1, received);
  const auto real = pattern(4096, 10);
  auto send = endpoints[0]->isend(1, 77, 1, real);
  ASSERT_TRUE(finishes(send));
  ASSERT_TRUE(finishes(recv));
  EXPECT_EQ(recv->status(), HM_SUCCESS) << recv->message();
  EXPECT_TRUE(received == real);
}

// A peer whose owner never publishes its layout: connecting gives up after connect_timeout.
TEST_F(ShmTest, PeerThatNeverSetsUpTimesOut) {
  auto silent = endpoint();  // created, but set_peers never called
  TransportOptions o = options();
  o.connect_timeout = 300ms;
  auto e = make_shm_transport(o, tuning());
  const auto start = Clock::now();
  auto c = connect_to(*e, silent->listen_address());
  EXPECT_EQ(c->status(), HM_ERR_TIMEOUT);
  EXPECT_LT(Clock::now() - start, 3s);
  EXPECT_NE(c->message().find("did not set up its segment within 300 ms"), std::string::npos)
      << c->message();
}

TEST_F(ShmTest, BadArgumentsAreRefused) {
  auto endpoints = job(2);
  std::vector<std::byte> buffer(4);
  EXPECT_THROW(endpoints[0]->isend(0, 1, 1, buffer), Error);  // itself
  EXPECT_THROW(endpoints[0]->isend(2, 1, 1, buffer), Error);  // outside the communicator
  EXPECT_THROW(endpoints[0]->irecv(-1, 1, 1, buffer), Error);
  EXPECT_THROW(endpoints[0]->set_peers(0, {"a", "b"}), Error);  // twice
  ShmTuning odd = tuning();
  odd.ring_bytes = 100000;
  EXPECT_THROW(make_shm_transport(options(), odd), Error);
}

// ---------------------------------------------------------------------------------------------
// Caller threads writing into the ring, fragments held in it, moved aside and parked
// ---------------------------------------------------------------------------------------------

// Checks every received buffer against what was sent and names the first few that differ.
void expect_same_messages(const std::vector<std::vector<std::byte>>& in,
                          const std::vector<std::vector<std::byte>>& out, const std::string& what) {
  ASSERT_EQ(in.size(), out.size());
  int wrong = 0;
  for (std::size_t m = 0; m < out.size(); ++m) {
    if (in[m] != out[m] && ++wrong <= 5) {
      ADD_FAILURE() << "message " << m << " (" << out[m].size() << " bytes) arrived changed, "
                    << what;
    }
  }
  EXPECT_EQ(wrong, 0) << what;
}

// The smallest ring: its largest fragment is a quarter of it, less a record header.
constexpr std::size_t kSmallRing = kMinRingBytes;
constexpr std::size_t kSmallRingFragment = kSmallRing / 4 - kRecordHeaderBytes;

// Sizes around the small ring: empty, a few bytes, one fragment and a byte, more than the whole
// ring, and several rings.
std::size_t mixed_size(int i) {
  switch (i % 6) {
    case 0:
      return 0;
    case 1:
      return 1 + static_cast<std::size_t>(i % 13);
    case 2:
      return kSmallRingFragment + 1;
    case 3:
      return 1000 + static_cast<std::size_t>(i) * 37;
    case 4:
      return kSmallRing + 13 + static_cast<std::size_t>(i);
    default:
      return (3 * kSmallRing) + static_cast<std::size_t>(i) * 7;
  }
}

// Four caller threads send to one peer at once (each writing into the ring itself when it can,
// or handing the send to the progress thread), while the receiver posts the receives in a
// shuffled order: a third before the sends, a third while they are being made, a third after.
// Everything arrives intact, so concurrent senders never interleave a message's fragments with
// another's in a way the receiver cannot reassemble, nor lose or duplicate one. Sizes around the
// ring (mostly handed off, as the ring fills), with and without CMA; then only small messages,
// which the callers mostly write themselves, at the same time.
TEST_F(ShmTest, ConcurrentSendersToOnePeer) {
  constexpr int kThreads = 4;
  struct Shape {
    const char* name;
    bool cma;
    bool small_only;
    int per_thread;
  };
  for (const Shape& shape : {Shape{"sizes around the ring, through the ring", false, false, 60},
                             Shape{"sizes around the ring, largest by CMA", true, false, 60},
                             Shape{"small messages only", false, true, 1000}}) {
    SCOPED_TRACE(shape.name);
    const int per_thread = shape.per_thread;
    const int messages = kThreads * per_thread;
    std::vector<std::vector<std::byte>> out;
    std::vector<std::vector<std::byte>> in;
    for (int m = 0; m < messages; ++m) {
      // Message m is thread m / per_thread's (m % per_thread)-th; neighbours differ in size.
      const int i = m % per_thread + m / per_thread;
      const std::size_t bytes =
          shape.small_only ? static_cast<std::size_t>(i % 7) * 41 : mixed_size(i);
      out.push_back(pattern(bytes, m + 1));
      in.emplace_back(out.back().size(), std::byte{0xee});
    }
    std::vector<int> order(static_cast<std::size_t>(messages));
    for (int m = 0; m < messages; ++m) order[static_cast<std::size_t>(m)] = m;
    std::mt19937 random(static_cast<unsigned>(per_thread) + (shape.cma ? 7 : 11));
    std::shuffle(order.begin(), order.end(), random);

    auto t = tuning(shape.cma, kSmallRing);
    t.cma_min_bytes = 2 * kSmallRing;  // the largest messages go by CMA, the rest by ring
    auto endpoints = job(2, t);
    const auto tag_of = [](int m) { return 0x5000 + static_cast<std::uint64_t>(m); };
    std::vector<CompletionPtr> recvs(static_cast<std::size_t>(messages));
    const auto post = [&](int from, int to) {
      for (int i = from; i < to; ++i) {
        const int m = order[static_cast<std::size_t>(i)];
        recvs[static_cast<std::size_t>(m)] =
            endpoints[1]->irecv(0, tag_of(m), 3, in[static_cast<std::size_t>(m)]);
      }
    };
    post(0, messages / 3);
    std::vector<std::vector<CompletionPtr>> sends(kThreads);
    {
      std::latch start(kThreads + 1);  // all threads begin together, to overlap as much as can be
      std::vector<std::jthread> senders;
      for (int thread = 0; thread < kThreads; ++thread) {
        senders.emplace_back([&, thread] {
          start.arrive_and_wait();
          for (int k = 0; k < per_thread; ++k) {
            const int m = thread * per_thread + k;
            sends[static_cast<std::size_t>(thread)].push_back(
                endpoints[0]->isend(1, tag_of(m), 3, out[static_cast<std::size_t>(m)]));
          }
        });
      }
      start.arrive_and_wait();
      post(messages / 3, 2 * messages / 3);  // while the senders run
    }                                        // joined: every send has been made
    post(2 * messages / 3, messages);

    for (int m = 0; m < messages; ++m) {
      const auto& r = recvs[static_cast<std::size_t>(m)];
      ASSERT_TRUE(finishes(r, 10s)) << "receive of message " << m << " never completed";
      EXPECT_EQ(r->status(), HM_SUCCESS) << "message " << m << ": " << r->message();
    }
    for (int thread = 0; thread < kThreads; ++thread) {
      const auto& mine = sends[static_cast<std::size_t>(thread)];
      ASSERT_EQ(mine.size(), static_cast<std::size_t>(per_thread));
      for (const auto& s : mine) {
        ASSERT_TRUE(finishes(s, 10s)) << "a send of thread " << thread << " never completed";
        EXPECT_EQ(s->status(), HM_SUCCESS) << s->message();
      }
    }
    expect_same_messages(in, out, shape.name);
  }
}

// Many more bytes sent than a small ring holds, before any receive is posted, then received in
// the reverse order: the last messages' fragments wait in the ring, earlier ones have been moved
// aside (or, by CMA, parked and read into a temporary), and all arrive intact, with the park
// grace at zero, short and at its default.
class ShmHeldFragmentsTest
    : public ShmTest,
      public ::testing::WithParamInterface<std::tuple<std::chrono::microseconds, bool>> {};

// Makes the messages: more than eight rings' worth, sizes from 0 bytes to three rings.
std::vector<std::vector<std::byte>> messages_beyond_the_ring(int count, int seed) {
  std::vector<std::vector<std::byte>> out;
  for (int m = 0; m < count; ++m) out.push_back(pattern(mixed_size(m + seed), m + 100 * seed));
  return out;
}

// Sends all first and waits for the sends (they cannot wait for receives not yet posted), then
// receives in reverse order.
TEST_P(ShmHeldFragmentsTest, SendsCompleteFirstThenReversedReceives) {
  const auto [grace, cma] = GetParam();
  auto t = tuning(cma, kSmallRing);
  t.cma_min_bytes = 2 * kSmallRing;
  t.park_grace = grace;
  constexpr int kMessages = 36;
  const auto out = messages_beyond_the_ring(kMessages, 1);
  std::vector<std::vector<std::byte>> in;
  for (const auto& o : out) in.emplace_back(o.size(), std::byte{0xee});
  auto endpoints = job(2, t);
  std::vector<CompletionPtr> sends;
  for (int m = 0; m < kMessages; ++m) {
    sends.push_back(
        endpoints[0]->isend(1, static_cast<std::uint64_t>(m), 5, out[static_cast<std::size_t>(m)]));
  }
  for (int m = 0; m < kMessages; ++m) {
    const auto& s = sends[static_cast<std::size_t>(m)];
    ASSERT_TRUE(finishes(s, 10s)) << "send " << m << " waits for its receive";
    EXPECT_EQ(s->status(), HM_SUCCESS) << s->message();
  }
  std::vector<CompletionPtr> recvs(kMessages);
  for (int m = kMessages - 1; m >= 0; --m) {
    recvs[static_cast<std::size_t>(m)] =
        endpoints[1]->irecv(0, static_cast<std::uint64_t>(m), 5, in[static_cast<std::size_t>(m)]);
  }
  for (int m = 0; m < kMessages; ++m) {
    const auto& r = recvs[static_cast<std::size_t>(m)];
    ASSERT_TRUE(finishes(r, 10s)) << "receive " << m << " never completed";
    EXPECT_EQ(r->status(), HM_SUCCESS) << "message " << m << ": " << r->message();
  }
  expect_same_messages(in, out, "receives posted after the sends completed");
}

// Sends all, then at once receives in reverse order while most of the sends still wait for
// room: the receive posted for the last message waits behind fragments held in the ring, which
// must be moved aside (without waiting for the grace) for the producer to get through.
TEST_P(ShmHeldFragmentsTest, ReversedReceivesWhileSendsWaitForRoom) {
  const auto [grace, cma] = GetParam();
  auto t = tuning(cma, kSmallRing);
  t.cma_min_bytes = 2 * kSmallRing;
  t.park_grace = grace;
  constexpr int kMessages = 36;
  const auto out = messages_beyond_the_ring(kMessages, 2);
  std::vector<std::vector<std::byte>> in;
  for (const auto& o : out) in.emplace_back(o.size(), std::byte{0xee});
  auto endpoints = job(2, t);
  std::vector<CompletionPtr> sends;
  for (int m = 0; m < kMessages; ++m) {
    sends.push_back(
        endpoints[0]->isend(1, static_cast<std::uint64_t>(m), 5, out[static_cast<std::size_t>(m)]));
  }
  std::vector<CompletionPtr> recvs(kMessages);
  for (int m = kMessages - 1; m >= 0; --m) {
    recvs[static_cast<std::size_t>(m)] =
        endpoints[1]->irecv(0, static_cast<std::uint64_t>(m), 5, in[static_cast<std::size_t>(m)]);
  }
  for (int m = 0; m < kMessages; ++m) {
    const auto& r = recvs[static_cast<std::size_t>(m)];
    ASSERT_TRUE(finishes(r, 10s)) << "receive " << m << " never completed";
    EXPECT_EQ(r->status(), HM_SUCCESS) << "message " << m << ": " << r->message();
  }
  for (int m = 0; m < kMessages; ++m) {
    const auto& s = sends[static_cast<std::size_t>(m)];
    ASSERT_TRUE(finishes(s, 10s)) << "send " << m << " never completed";
    EXPECT_EQ(s->status(), HM_SUCCESS) << s->message();
  }
  expect_same_messages(in, out, "receives posted while the sends waited for room");
}

INSTANTIATE_TEST_SUITE_P(ParkGrace, ShmHeldFragmentsTest,
                         ::testing::Combine(::testing::Values(std::chrono::microseconds(0),
                                                              std::chrono::microseconds(50),
                                                              std::chrono::microseconds(2000)),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return "Grace" + std::to_string(std::get<0>(info.param).count()) + "us" +
                                  (std::get<1>(info.param) ? "Cma" : "RingOnly");
                         });

TEST(ShmAvailability, AvailableHere) {
  std::string why = "unset";
  EXPECT_TRUE(shm_available(&why)) << why;
  EXPECT_EQ(why, "");
}

}  // namespace
}  // namespace holmes::shm
