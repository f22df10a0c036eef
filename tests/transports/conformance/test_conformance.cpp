// The transport contract (src/transports/transport.hpp), checked the same way for every
// transport this build can run on this machine: endpoints in one process over the real medium
// (loopback sockets, shared memory, UCX), messages of every shape, ordering, load, fan-in, and
// failures that must end in an error instead of a hang.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "core/clock.hpp"
#include "core/status.hpp"
#include "transports/capabilities.hpp"
#include "transports/kinds.hpp"

namespace holmes {
namespace {

using namespace std::chrono_literals;

// A communicator-sized group of endpoints of one kind, wired to each other.
class Group {
 public:
  Group(TransportKind kind, int n, const std::string& token = "conformance") {
    static int counter = 0;
    TransportOptions options;
    options.listen_host = "127.0.0.1";
    options.token = token;
    options.context = "conformance-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
    options.connect_timeout = 10s;
    std::vector<std::string> addresses;
    for (int i = 0; i < n; ++i) {
      endpoints_.push_back(make_transport(kind, options));
      addresses.push_back(endpoints_.back()->listen_address());
    }
    for (int i = 0; i < n; ++i) endpoints_[static_cast<std::size_t>(i)]->set_peers(i, addresses);
  }
  Transport& operator[](int i) { return *endpoints_.at(static_cast<std::size_t>(i)); }
  void destroy(int i) { endpoints_.at(static_cast<std::size_t>(i)).reset(); }
  int size() const { return static_cast<int>(endpoints_.size()); }

 private:
  std::vector<std::unique_ptr<Transport>> endpoints_;
};

std::vector<std::byte> pattern(std::size_t bytes, unsigned seed) {
  std::vector<std::byte> data(bytes);
  std::uint32_t x = seed * 2654435761u + 1;
  for (std::size_t i = 0; i < bytes; ++i) {
    x = x * 1664525u + 1013904223u;  // cheap, deterministic, not periodic in small strides
    data[i] = static_cast<std::byte>(x >> 24);
  }
  return data;
}

// The caller-drive calls a small collective makes, on a transport that has them
// (capabilities.hpp); on one that has not (verbs) a drive is nothing and a wait sleeps at once.
struct Drive {
  explicit Drive(Transport& t) : caller(capability<CallerDrive>(t)) {}
  void begin() const {
    if (caller != nullptr) caller->begin_caller_drive();
  }
  void end() const {
    if (caller != nullptr) caller->end_caller_drive();
  }
  std::chrono::microseconds yield(int peer) const {
    return caller != nullptr ? caller->yield_before_sleep(peer) : 0us;
  }
  CallerDrive* caller;
};

void expect_done(const CompletionPtr& c, hm_status_t expected = HM_SUCCESS,
                 std::chrono::milliseconds within = 60s) {
  ASSERT_TRUE(c->wait_until(Deadline::after(within))) << "did not complete in time";
  EXPECT_EQ(c->status(), expected) << c->message();
}

class Conformance : public ::testing::TestWithParam<TransportKind> {};

}  // namespace

// gtest prints parameters with this (the kind's name instead of its bytes).
void PrintTo(TransportKind kind, std::ostream* os) { *os << transport_name(kind); }

namespace {

std::string kind_name(const ::testing::TestParamInfo<TransportKind>& info) {
  return transport_name(info.param);
}

TEST_P(Conformance, ConnectAllCompletes) {
  Group g(GetParam(), 4);
  for (int i = 0; i < 4; ++i) expect_done(g[i].connect_all());
}

TEST_P(Conformance, ZeroLengthMessages) {
  Group g(GetParam(), 2);
  auto early = g[1].irecv(0, 1, 5, {});
  auto s1 = g[0].isend(1, 1, 5, {});
  auto s2 = g[0].isend(1, 2, 5, {});
  expect_done(s1);
  expect_done(s2);
  expect_done(early);
  std::this_thread::sleep_for(10ms);
  auto late = g[1].irecv(0, 2, 5, {});
  expect_done(late);
}

// Messages of many sizes, whichever side comes first.
TEST_P(Conformance, SizesArriveIntact) {
  Group g(GetParam(), 2);
  std::uint64_t tag = 0;
  for (std::size_t bytes :
       {std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{65537}, std::size_t{1} << 20,
        (std::size_t{9} << 20) + 3, std::size_t{64} << 20}) {
    for (bool receive_first : {true, false}) {
      const auto sent = pattern(bytes, static_cast<unsigned>(tag));
      std::vector<std::byte> got(bytes);
      CompletionPtr recv;
      if (receive_first) recv = g[1].irecv(0, tag, 9, got);
      auto send = g[0].isend(1, tag, 9, sent);
      if (!receive_first) {
        std::this_thread::sleep_for(5ms);
        recv = g[1].irecv(0, tag, 9, got);
      }
      expect_done(send);
      expect_done(recv);
      EXPECT_TRUE(got == sent) << bytes << " bytes, receive first: " << receive_first;
      ++tag;
    }
  }
}

TEST_P(Conformance, OneGibibyteMessage) {
  Group g(GetParam(), 2);
  constexpr std::size_t kBytes = std::size_t{1} << 30;
  std::vector<std::byte> sent(kBytes);
  for (std::size_t i = 0; i < kBytes; i += 4096) sent[i] = static_cast<std::byte>(i >> 12);
  sent[kBytes - 1] = std::byte{0x5a};
  std::vector<std::byte> got(kBytes, std::byte{0});
  auto recv = g[1].irecv(0, 77, 1, got);
  auto send = g[0].isend(1, 77, 1, sent);
  expect_done(send, HM_SUCCESS, 300s);
  expect_done(recv, HM_SUCCESS, 300s);
  EXPECT_EQ(std::memcmp(got.data(), sent.data(), kBytes), 0);
}

// Messages with different tags are told apart whatever order they are posted and sent in.
TEST_P(Conformance, TagsAreMatchedIndependentlyOfOrder) {
  Group g(GetParam(), 2);
  constexpr int kMessages = 200;
  std::vector<std::vector<std::byte>> out, in(kMessages);
  std::vector<CompletionPtr> pending;
  std::vector<int> order(kMessages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  for (int m = 0; m < kMessages; ++m) {
    out.push_back(pattern(static_cast<std::size_t>(m % 13) * 997 + 3, static_cast<unsigned>(m)));
    in[static_cast<std::size_t>(m)].resize(out.back().size());
  }
  for (int k = 0; k < kMessages / 2; ++k) {  // half the receives first, shuffled
    const int m = order[static_cast<std::size_t>(k)];
    pending.push_back(
        g[1].irecv(0, 1000 + static_cast<std::uint64_t>(m), 3, in[static_cast<std::size_t>(m)]));
  }
  for (int m = kMessages - 1; m >= 0; --m) {  // sends in reverse
    pending.push_back(
        g[0].isend(1, 1000 + static_cast<std::uint64_t>(m), 3, out[static_cast<std::size_t>(m)]));
  }
  for (int k = kMessages / 2; k < kMessages; ++k) {
    const int m = order[static_cast<std::size_t>(k)];
    pending.push_back(
        g[1].irecv(0, 1000 + static_cast<std::uint64_t>(m), 3, in[static_cast<std::size_t>(m)]));
  }
  for (auto& p : pending) expect_done(p);
  EXPECT_TRUE(in == out);
}

// Many requests outstanding at once in both directions.
TEST_P(Conformance, ThousandsOutstanding) {
  Group g(GetParam(), 2);
  constexpr int kMessages = 2000;
  std::vector<std::array<std::uint32_t, 16>> a(kMessages), b(kMessages), ra(kMessages),
      rb(kMessages);
  std::vector<CompletionPtr> pending;
  for (int m = 0; m < kMessages; ++m) {
    a[static_cast<std::size_t>(m)].fill(static_cast<std::uint32_t>(m));
    b[static_cast<std::size_t>(m)].fill(static_cast<std::uint32_t>(m * 3));
    pending.push_back(
        g[0].irecv(1, static_cast<std::uint64_t>(m), 0,
                   std::as_writable_bytes(std::span(rb[static_cast<std::size_t>(m)]))));
    pending.push_back(
        g[1].irecv(0, static_cast<std::uint64_t>(m), 0,
                   std::as_writable_bytes(std::span(ra[static_cast<std::size_t>(m)]))));
    pending.push_back(g[0].isend(1, static_cast<std::uint64_t>(m), 0,
                                 std::as_bytes(std::span(a[static_cast<std::size_t>(m)]))));
    pending.push_back(g[1].isend(0, static_cast<std::uint64_t>(m), 0,
                                 std::as_bytes(std::span(b[static_cast<std::size_t>(m)]))));
  }
  for (auto& p : pending) expect_done(p);
  EXPECT_EQ(ra, a);
  EXPECT_EQ(rb, b);
}

// Seven senders into one receiver at once.
TEST_P(Conformance, FanIn) {
  constexpr int kRanks = 8;
  constexpr std::size_t kBytes = 6u << 20;
  Group g(GetParam(), kRanks);
  std::vector<std::vector<std::byte>> sent, got;
  std::vector<CompletionPtr> pending;
  for (int i = 1; i < kRanks; ++i) {
    sent.push_back(pattern(kBytes, static_cast<unsigned>(i)));
    got.emplace_back(kBytes);
  }
  for (int i = 1; i < kRanks; ++i) {
    pending.push_back(g[0].irecv(i, 5, 2, got[static_cast<std::size_t>(i - 1)]));
  }
  for (int i = 1; i < kRanks; ++i) {
    pending.push_back(g[i].isend(0, 5, 2, sent[static_cast<std::size_t>(i - 1)]));
  }
  for (auto& p : pending) expect_done(p);
  EXPECT_TRUE(got == sent);
}

TEST_P(Conformance, SizeAndSignatureMismatches) {
  Group g(GetParam(), 2);
  const auto data = pattern(1000, 1);
  std::vector<std::byte> small(999);
  auto r1 = g[1].irecv(0, 1, 4, small);
  auto s1 = g[0].isend(1, 1, 4, data);
  expect_done(r1, HM_ERR_MISMATCH);
  std::vector<std::byte> same(1000);
  auto r2 = g[1].irecv(0, 2, 0xAAAA, same);
  auto s2 = g[0].isend(1, 2, 0xBBBB, data);
  expect_done(r2, HM_ERR_MISMATCH);
  // The sends end too (their data left this rank); `data` must outlive them.
  EXPECT_TRUE(s1->wait_until(Deadline::after(30s)));
  EXPECT_TRUE(s2->wait_until(Deadline::after(30s)));
  EXPECT_NE(r2->message().find("rank 0"), std::string::npos) << r2->message();
}

// A peer that goes away in the middle of a large message: the receiver gets an error, promptly.
TEST_P(Conformance, PeerClosingMidMessageFailsTheReceiver) {
  Group g(GetParam(), 2);
  constexpr std::size_t kBytes = 512u << 20;
  std::vector<std::byte> sent(kBytes, std::byte{1});
  std::vector<std::byte> got(kBytes);
  expect_done(g[0].connect_all());
  auto recv = g[1].irecv(0, 3, 1, got);
  auto send = g[0].isend(1, 3, 1, sent);
  std::this_thread::sleep_for(20ms);  // let part of it move
  const auto start = Clock::now();
  g.destroy(0);  // its pending send ends; the receiver must hear of it
  ASSERT_TRUE(recv->wait_until(Deadline::after(15s))) << "receiver hangs after its peer closed";
  if (recv->status() == HM_SUCCESS) {
    // The whole message made it before the close: also correct.
    EXPECT_TRUE(got == sent);
  } else {
    EXPECT_EQ(recv->status(), HM_ERR_PEER_FAILED) << recv->message();
    EXPECT_NE(recv->message().find("rank 0"), std::string::npos) << recv->message();
  }
  EXPECT_LT(Clock::now() - start, 15s);
  EXPECT_TRUE(send->done());
}

// After a peer has closed, new receives from it fail at once instead of waiting forever.
TEST_P(Conformance, ReceiveFromAClosedPeerFails) {
  Group g(GetParam(), 2);
  expect_done(g[0].connect_all());
  expect_done(g[1].connect_all());
  g.destroy(0);
  std::this_thread::sleep_for(200ms);
  std::vector<std::byte> buffer(16);
  auto recv = g[1].irecv(0, 1, 1, buffer);
  expect_done(recv, HM_ERR_PEER_FAILED, 15s);
}

TEST_P(Conformance, FailPeerEndsItsTraffic) {
  Group g(GetParam(), 3);
  std::vector<std::byte> buffer(64);
  auto from0 = g[2].irecv(0, 1, 1, buffer);
  std::vector<std::byte> other(64);
  auto from1 = g[2].irecv(1, 1, 1, other);
  g[2].fail_peer(0, HM_ERR_PEER_FAILED, "rank 0 died (control plane)");
  expect_done(from0, HM_ERR_PEER_FAILED, 5s);
  EXPECT_EQ(from0->message(), "rank 0 died (control plane)");
  // Traffic with other peers continues.
  const auto data = pattern(64, 3);
  auto sent = g[1].isend(2, 1, 1, data);
  expect_done(from1);
  expect_done(sent);
  EXPECT_TRUE(other == data);
  auto later = g[2].isend(0, 9, 1, data);
  expect_done(later, HM_ERR_PEER_FAILED, 5s);
}

TEST_P(Conformance, ShutdownWithoutWaitingWakesEverything) {
  Group g(GetParam(), 2);
  std::vector<std::byte> buffer(1 << 20);
  auto recv = g[1].irecv(0, 1, 1, buffer);
  const auto start = Clock::now();
  g[1].shutdown(HM_ERR_ABORTED, "aborted by the test", ShutdownWait::kReturnAtOnce);
  EXPECT_LT(Clock::now() - start, 1s) << "shutdown(wait=false) blocked";
  expect_done(recv, HM_ERR_ABORTED, 5s);
  EXPECT_EQ(recv->message(), "aborted by the test");
  auto later = g[1].isend(0, 2, 1, buffer);
  expect_done(later, HM_ERR_ABORTED, 5s);
}

// Endpoints come and go many times in one process (communicators are created and destroyed).
TEST_P(Conformance, ManyLifetimes) {
  for (int round = 0; round < 20; ++round) {
    Group g(GetParam(), 3);
    const auto data = pattern(10000, static_cast<unsigned>(round));
    std::vector<std::byte> got(10000);
    auto r = g[2].irecv(round % 2, 1, 1, got);
    auto s = g[round % 2].isend(2, 1, 1, data);
    expect_done(r);
    expect_done(s);
    ASSERT_TRUE(got == data) << "round " << round;
  }
}

// What a rank's thread does during a small collective (CallerDrive::begin_caller_drive): it posts,
// then waits polling the transport itself. Both endpoints drive, each from its own thread, and
// play ping-pong; every few rounds the sender pauses past the driver's poll window, so that the
// waiter goes to sleep and the transport's own thread must take over (tcp: the io thread leaves
// its lease and reads the socket), and the next round drives again.
TEST_P(Conformance, CallersThatDriveExchangeSmallMessages) {
  Group g(GetParam(), 2);
  expect_done(g[0].connect_all());
  expect_done(g[1].connect_all());
  constexpr int kRounds = 400;
  constexpr int kPauseEvery = 50;
  auto play = [&g](int self) {
    const int other = 1 - self;
    Transport& t = g[self];
    const Drive drive(t);
    for (int round = 0; round < kRounds; ++round) {
      drive.begin();
      const auto tag = static_cast<std::uint64_t>(round);
      const bool sends_first = (round % 2) == self;
      std::array<std::uint64_t, 1> out{static_cast<std::uint64_t>(round * 2 + self)};
      std::array<std::uint64_t, 1> in{~std::uint64_t{0}};
      auto wait = [&](const CompletionPtr& c) {
        ASSERT_TRUE(c->wait_until(Deadline::after(30s), drive.yield(other)))
            << "rank " << self << " round " << round;
        ASSERT_EQ(c->status(), HM_SUCCESS) << c->message();
      };
      if (sends_first && round % kPauseEvery == 0) std::this_thread::sleep_for(5ms);
      auto recv = t.irecv(other, tag, 1, std::as_writable_bytes(std::span(in)));
      if (sends_first) wait(t.isend(other, tag, 1, std::as_bytes(std::span(out))));
      wait(recv);
      if (!sends_first) wait(t.isend(other, tag, 1, std::as_bytes(std::span(out))));
      drive.end();
      ASSERT_EQ(in[0], static_cast<std::uint64_t>(round * 2 + other)) << "round " << round;
    }
  };
  std::thread peer([&] { play(1); });
  play(0);
  peer.join();
  // After the drives, a wait that does not poll is still served (the transport's own thread is
  // back): the message comes well after the last call ended.
  std::array<std::uint32_t, 4> got{};
  auto late = g[1].irecv(0, 9999, 2, std::as_writable_bytes(std::span(got)));
  std::this_thread::sleep_for(20ms);
  const std::array<std::uint32_t, 4> sent{1, 2, 3, 4};
  expect_done(g[0].isend(1, 9999, 2, std::as_bytes(std::span(sent))), HM_SUCCESS, 10s);
  expect_done(late, HM_SUCCESS, 10s);
  EXPECT_EQ(got, sent);
}

// The point of a drive: the caller takes its messages in itself, so no other thread of this
// process has to wake for them. Over many ping-pong rounds, receives must complete on the waiting
// caller's own thread (Completion::on_complete runs where the completion happens). Not all: on a
// busy machine a partner may miss the poll window, and then the transport's thread takes over.
// So the ranks play until kWanted receives completed on rank 0's caller, or kMaxRounds: a loaded
// machine takes more rounds, a transport that does not drive never gets there. Rank 0 says in its
// message which round is the last, so both end after the same one.
TEST_P(Conformance, ADrivingCallerCompletesItsReceivesOnItsOwnThread) {
  Group g(GetParam(), 2);
  expect_done(g[0].connect_all());
  expect_done(g[1].connect_all());
  constexpr int kWanted = 20;
  constexpr int kMaxRounds = 2000;
  constexpr std::uint64_t kLast = std::uint64_t{1} << 63;
  std::atomic<int> on_caller{0};
  std::atomic<int> rounds{0};
  auto play = [&](int self) {
    const int other = 1 - self;
    Transport& t = g[self];
    const Drive drive(t);
    bool last = false;
    for (int round = 0; !last; ++round) {
      drive.begin();
      const auto tag = static_cast<std::uint64_t>(round);
      if (self == 0) last = on_caller.load() >= kWanted || round + 1 == kMaxRounds;
      std::array<std::uint64_t, 1> out{static_cast<std::uint64_t>(round) | (last ? kLast : 0)};
      std::array<std::uint64_t, 1> in{};
      auto recv = t.irecv(other, tag, 1, std::as_writable_bytes(std::span(in)));
      // Counted only when it completes in this thread's waits below, not already during
      // on_complete (then the callback runs at once, here, whoever completed the receive).
      const auto me = std::this_thread::get_id();
      std::atomic<bool> registering{true};
      std::atomic<bool> here{false};
      recv->on_complete([&here, &registering, me](const Completion&) {
        here.store(std::this_thread::get_id() == me && !registering.load());
      });
      registering.store(false);
      auto send = t.isend(other, tag, 1, std::as_bytes(std::span(out)));
      for (const auto& c : {send, recv}) {
        ASSERT_TRUE(c->wait_until(Deadline::after(30s), drive.yield(other)))
            << "rank " << self << " round " << round;
        ASSERT_EQ(c->status(), HM_SUCCESS) << c->message();
      }
      drive.end();
      ASSERT_EQ(in[0] & ~kLast, static_cast<std::uint64_t>(round));
      if (self == 1) last = (in[0] & kLast) != 0;
      if (self == 0) {
        if (here.load()) on_caller.fetch_add(1);
        rounds.store(round + 1);
      }
    }
  };
  std::thread peer([&] { play(1); });
  play(0);
  peer.join();
  EXPECT_GE(on_caller.load(), kWanted)
      << "of " << rounds.load() << " receives, only " << on_caller.load()
      << " completed on the driving caller's thread: the caller does not drive "
      << transport_name(GetParam());
}

// A thread in the middle of a drive shuts its endpoint down (an error in the collective): the
// waiting shutdown must not depend on that thread running the transport, and the peer's pending
// receive ends.
TEST_P(Conformance, ADrivingCallerCanShutDown) {
  Group g(GetParam(), 2);
  expect_done(g[0].connect_all());
  expect_done(g[1].connect_all());
  std::array<std::uint64_t, 1> in{};
  Drive(g[0]).begin();
  auto pending = g[0].irecv(1, 7, 1, std::as_writable_bytes(std::span(in)));
  std::this_thread::sleep_for(5ms);  // the transport's own thread has stepped aside by now
  const auto start = Clock::now();
  g[0].shutdown(HM_ERR_ABORTED, "stopped while driving", ShutdownWait::kUntilReleased);
  EXPECT_LT(Clock::now() - start, 5s);
  Drive(g[0]).end();
  expect_done(pending, HM_ERR_ABORTED, 5s);
  std::array<std::uint64_t, 1> from0{};
  auto peer_side = g[1].irecv(0, 8, 1, std::as_writable_bytes(std::span(from0)));
  g.destroy(0);
  ASSERT_TRUE(peer_side->wait_until(Deadline::after(15s)));
  EXPECT_NE(peer_side->status(), HM_SUCCESS);
}

// A driving thread that blocks somewhere else, without polling the transport (a collective
// waiting for a staging buffer, say), must not stall the transport: its receive still completes.
TEST_P(Conformance, ADrivingCallerThatStopsPollingIsStillServed) {
  Group g(GetParam(), 2);
  expect_done(g[0].connect_all());
  expect_done(g[1].connect_all());
  std::array<std::uint64_t, 2> in{};
  const std::array<std::uint64_t, 2> sent{0x1122334455667788ull, 42};
  Drive(g[0]).begin();
  auto recv = g[0].irecv(1, 5, 3, std::as_writable_bytes(std::span(in)));
  auto send = g[1].isend(0, 5, 3, std::as_bytes(std::span(sent)));
  // Neither wait_until nor any poll on this thread: only looks, sleeping in between.
  const auto until = Clock::now() + 10s;
  while (!recv->done() && Clock::now() < until) std::this_thread::sleep_for(1ms);
  Drive(g[0]).end();
  ASSERT_TRUE(recv->done()) << "the receive stalled while its caller drove without polling";
  EXPECT_EQ(recv->status(), HM_SUCCESS) << recv->message();
  EXPECT_EQ(in, sent);
  expect_done(send);
}

INSTANTIATE_TEST_SUITE_P(Available, Conformance, ::testing::ValuesIn(available_transports()),
                         kind_name);

// Built transports that this machine cannot run say so cleanly (verbs here: no RDMA device).
TEST(TransportAvailability, UnavailableKindsFailCleanly) {
  for (auto kind : kAllTransportKinds) {
    std::string why;
    if (transport_available(kind, &why)) continue;
    EXPECT_FALSE(why.empty()) << transport_name(kind);
    TransportOptions options;
    try {
      make_transport(kind, options);
      ADD_FAILURE() << transport_name(kind) << " was created although unavailable";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), HM_ERR_UNSUPPORTED) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
  std::string why;
  EXPECT_TRUE(transport_available(TransportKind::kTcp, &why));
}

}  // namespace
}  // namespace holmes
