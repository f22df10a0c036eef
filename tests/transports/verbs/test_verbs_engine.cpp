// The verbs transport's whole logic (transport.hpp) on an in-memory fabric (fake_fabric.hpp):
// real TCP handshakes with the job token, queue pair setup, credits, pieces, the Matcher,
// goodbyes and failures, with several endpoints in one process. Only the libibverbs calls
// themselves (ibv_nic.cpp) are not exercised here; they need a device.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "core/clock.hpp"
#include "core/parse.hpp"
#include "core/status.hpp"
#include "fake_fabric.hpp"
#include "transports/verbs/handshake.hpp"
#include "transports/verbs/transport.hpp"

namespace holmes::verbs {
namespace {

using namespace std::chrono_literals;
using testing::FakeFabric;
using testing::FakePortOptions;

VerbsConfig small_slots() {
  VerbsConfig config;
  config.data_slots = 6;
  config.slot_bytes = 1024;
  config.control_slots = 4;
  return config;
}

// A group of endpoints on one fake fabric, wired to each other; endpoint i uses port "fake<i>:1".
class Group {
 public:
  Group(int n, VerbsConfig config = {}, std::vector<FakePortOptions> ports = {},
        std::vector<std::string> tokens = {}, bool set_peers = true)
      : fabric_(FakeFabric::create()) {
    static int counter = 0;
    const std::string context =
        "verbs-test-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
    for (int i = 0; i < n; ++i) {
      TransportOptions options;
      options.listen_host = "127.0.0.1";
      options.token = tokens.empty() ? "secret" : tokens[static_cast<std::size_t>(i)];
      options.context = context;
      options.connect_timeout = 5s;
      const auto port = ports.empty() ? FakePortOptions{} : ports[static_cast<std::size_t>(i)];
      endpoints_.push_back(
          make_verbs_transport_on(options, config, fabric_->open(port_name(i), port)));
      addresses_.push_back(endpoints_.back()->listen_address());
    }
    if (set_peers) {
      for (int i = 0; i < n; ++i) wire(i);
    }
  }
  static std::string port_name(int i) { return "fake" + std::to_string(i) + ":1"; }
  void wire(int i) { endpoints_.at(static_cast<std::size_t>(i))->set_peers(i, addresses_); }
  Transport& operator[](int i) { return *endpoints_.at(static_cast<std::size_t>(i)); }
  void destroy(int i) { endpoints_.at(static_cast<std::size_t>(i)).reset(); }
  FakeFabric& fabric() { return *fabric_; }
  const std::vector<std::string>& addresses() const { return addresses_; }

 private:
  std::shared_ptr<FakeFabric> fabric_;
  std::vector<std::unique_ptr<Transport>> endpoints_;
  std::vector<std::string> addresses_;
};

std::vector<std::byte> pattern(std::size_t bytes, unsigned seed) {
  std::vector<std::byte> data(bytes);
  std::uint32_t x = seed * 2654435761u + 1;
  for (std::size_t i = 0; i < bytes; ++i) {
    x = x * 1664525u + 1013904223u;
    data[i] = static_cast<std::byte>(x >> 24);
  }
  return data;
}

void expect_done(const CompletionPtr& c, hm_status_t expected = HM_SUCCESS,
                 std::chrono::milliseconds within = 20s) {
  ASSERT_TRUE(c->wait_until(Deadline::after(within))) << "did not complete in time";
  EXPECT_EQ(c->status(), expected) << c->message();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---- connecting -------------------------------------------------------------------------------

TEST(VerbsEngine, ConnectAllCompletes) {
  Group g(4);
  for (int i = 0; i < 4; ++i) expect_done(g[i].connect_all());
  const auto link = g[0].link(2);
  EXPECT_EQ(link.transport, "verbs");
  EXPECT_EQ(link.description,
            "verbs fake0:1 (InfiniBand, 100 Gb/s) -> rank 2 fake2:1 at " + g.addresses()[2]);
  EXPECT_EQ(link.bandwidth_gbytes, 12.5);
}

TEST(VerbsEngine, ConnectionsArrivingBeforeSetPeersWait) {
  Group g(2, {}, {}, {}, /*set_peers=*/false);
  g.wire(0);
  const auto data = pattern(5000, 1);
  auto send = g[0].isend(1, 7, 3, data);  // dials rank 1, which does not know its peers yet
  std::this_thread::sleep_for(50ms);
  g.wire(1);
  std::vector<std::byte> got(5000);
  auto recv = g[1].irecv(0, 7, 3, got);
  expect_done(send);
  expect_done(recv);
  EXPECT_TRUE(got == data);
}

// ---- moving data ------------------------------------------------------------------------------

TEST(VerbsEngine, ZeroLengthMessages) {
  Group g(2);
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

// Many sizes, whichever side comes first, through default slots and through tiny ones (many
// pieces, credits exhausted all the time).
TEST(VerbsEngine, SizesArriveIntact) {
  for (const auto& config : {VerbsConfig{}, small_slots()}) {
    Group g(2, config);
    std::uint64_t tag = 0;
    for (std::size_t bytes :
         {std::size_t{1}, std::size_t{976}, std::size_t{977}, std::size_t{4096}, std::size_t{65537},
          std::size_t{1} << 20, (std::size_t{9} << 20) + 3}) {
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
        EXPECT_TRUE(got == sent) << bytes << " bytes, receive first: " << receive_first
                                 << ", slot bytes " << config.slot_bytes;
        ++tag;
      }
    }
    EXPECT_EQ(g.fabric().rnr_errors(), 0u);
  }
}

TEST(VerbsEngine, LargeMessage) {
  Group g(2);
  constexpr std::size_t kBytes = std::size_t{256} << 20;
  std::vector<std::byte> sent(kBytes);
  for (std::size_t i = 0; i < kBytes; i += 4096) sent[i] = static_cast<std::byte>(i >> 12);
  sent[kBytes - 1] = std::byte{0x5a};
  std::vector<std::byte> got(kBytes, std::byte{0});
  auto recv = g[1].irecv(0, 77, 1, got);
  auto send = g[0].isend(1, 77, 1, sent);
  expect_done(send, HM_SUCCESS, 60s);
  expect_done(recv, HM_SUCCESS, 60s);
  EXPECT_EQ(std::memcmp(got.data(), sent.data(), kBytes), 0);
  EXPECT_EQ(g.fabric().rnr_errors(), 0u);
}

TEST(VerbsEngine, TagsAreMatchedIndependentlyOfOrder) {
  Group g(2, small_slots());
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
  for (int k = 0; k < kMessages / 2; ++k) {
    const int m = order[static_cast<std::size_t>(k)];
    pending.push_back(
        g[1].irecv(0, 1000 + static_cast<std::uint64_t>(m), 3, in[static_cast<std::size_t>(m)]));
  }
  for (int m = kMessages - 1; m >= 0; --m) {
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

// Thousands of requests outstanding in both directions at once, through the smallest windows:
// the credits must never let a sender overrun the receiver (the fabric counts RNR errors).
TEST(VerbsEngine, ThousandsOutstandingBothWays) {
  VerbsConfig config = small_slots();
  config.data_slots = 4;
  config.control_slots = 4;
  Group g(2, config);
  constexpr int kMessages = 2000;
  std::vector<std::array<std::uint32_t, 100>> a(kMessages), b(kMessages), ra(kMessages),
      rb(kMessages);
  std::vector<CompletionPtr> pending;
  for (int m = 0; m < kMessages; ++m) {
    const auto i = static_cast<std::size_t>(m);
    a[i].fill(static_cast<std::uint32_t>(m));
    b[i].fill(static_cast<std::uint32_t>(m * 3));
    pending.push_back(g[0].irecv(1, i, 0, std::as_writable_bytes(std::span(rb[i]))));
    pending.push_back(g[1].irecv(0, i, 0, std::as_writable_bytes(std::span(ra[i]))));
    pending.push_back(g[0].isend(1, i, 0, std::as_bytes(std::span(a[i]))));
    pending.push_back(g[1].isend(0, i, 0, std::as_bytes(std::span(b[i]))));
  }
  for (auto& p : pending) expect_done(p);
  EXPECT_EQ(ra, a);
  EXPECT_EQ(rb, b);
  EXPECT_EQ(g.fabric().rnr_errors(), 0u);
}

TEST(VerbsEngine, FanIn) {
  constexpr int kRanks = 8;
  constexpr std::size_t kBytes = 6u << 20;
  Group g(kRanks);
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

TEST(VerbsEngine, SizeAndSignatureMismatches) {
  Group g(2);
  const auto data = pattern(1000, 1);
  std::vector<std::byte> small(999);
  auto r1 = g[1].irecv(0, 1, 4, small);
  g[0].isend(1, 1, 4, data);
  expect_done(r1, HM_ERR_MISMATCH);
  EXPECT_TRUE(contains(r1->message(), "rank 0")) << r1->message();
  std::vector<std::byte> same(1000);
  auto r2 = g[1].irecv(0, 2, 0xAAAA, same);
  g[0].isend(1, 2, 0xBBBB, data);
  expect_done(r2, HM_ERR_MISMATCH);
  // The pair still works afterwards.
  std::vector<std::byte> ok(1000);
  auto r3 = g[1].irecv(0, 3, 1, ok);
  g[0].isend(1, 3, 1, data);
  expect_done(r3);
  EXPECT_TRUE(ok == data);
}

// ---- peers going away --------------------------------------------------------------------------

TEST(VerbsEngine, PeerClosingMidMessageFailsTheReceiver) {
  Group g(2);
  constexpr std::size_t kBytes = 512u << 20;
  std::vector<std::byte> sent(kBytes, std::byte{1});
  std::vector<std::byte> got(kBytes);
  expect_done(g[0].connect_all());
  auto recv = g[1].irecv(0, 3, 1, got);
  auto send = g[0].isend(1, 3, 1, sent);
  std::this_thread::sleep_for(20ms);
  const auto start = Clock::now();
  g.destroy(0);
  ASSERT_TRUE(recv->wait_until(Deadline::after(15s))) << "receiver hangs after its peer closed";
  if (recv->status() == HM_SUCCESS) {
    EXPECT_TRUE(got == sent);
  } else {
    EXPECT_EQ(recv->status(), HM_ERR_PEER_FAILED) << recv->message();
    EXPECT_TRUE(contains(recv->message(), "rank 0 (verbs fake0:1 at")) << recv->message();
    EXPECT_TRUE(contains(recv->message(), "closed its verbs connection")) << recv->message();
  }
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_TRUE(send->done());
}

TEST(VerbsEngine, ReceiveFromAClosedPeerFailsAndSendsToItToo) {
  Group g(2);
  expect_done(g[0].connect_all());
  expect_done(g[1].connect_all());
  // A message that arrived before the close is still delivered.
  const auto data = pattern(3000, 4);
  expect_done(g[0].isend(1, 1, 1, data));
  g.destroy(0);
  std::this_thread::sleep_for(200ms);
  std::vector<std::byte> got(3000);
  expect_done(g[1].irecv(0, 1, 1, got));
  EXPECT_TRUE(got == data);
  std::vector<std::byte> buffer(16);
  auto recv = g[1].irecv(0, 2, 1, buffer);
  expect_done(recv, HM_ERR_PEER_FAILED, 5s);
  EXPECT_TRUE(contains(recv->message(), "rank 0")) << recv->message();
  auto send = g[1].isend(0, 2, 1, buffer);
  expect_done(send, HM_ERR_PEER_FAILED, 5s);
}

// Closing ends are quick: goodbyes are acknowledged at once when both ends are alive, and a
// rank that already heard its peer's goodbye sends none back.
TEST(VerbsEngine, ClosingIsQuick) {
  VerbsConfig config;
  config.goodbye_wait = 20s;  // an unacknowledged goodbye would show as a 20 s wait
  Group g(4, config);
  for (int i = 0; i < 4; ++i) expect_done(g[i].connect_all());
  for (int i = 0; i < 4; ++i) {
    const auto start = Clock::now();
    g.destroy(i);
    EXPECT_LT(Clock::now() - start, 5s) << "destroying endpoint " << i;
  }
}

// A peer whose host died: no goodbye, its queue pairs stop answering. The survivor's next send
// exhausts its retries; everything with that peer fails, naming the peer and the device.
TEST(VerbsEngine, DeadPeerFailsItsTrafficNamingPeerAndDevice) {
  VerbsConfig config;
  config.goodbye_wait = 20s;  // no goodbye may wait on the dead peer
  Group g(3, config);
  for (int i = 0; i < 3; ++i) expect_done(g[i].connect_all());
  g.fabric().kill(Group::port_name(0));
  std::vector<std::byte> buffer(64);
  auto recv = g[1].irecv(0, 1, 1, buffer);
  const auto data = pattern(64, 1);
  g[1].isend(0, 9, 1, data);  // copied and posted; the fabric then reports the dead peer
  expect_done(recv, HM_ERR_PEER_FAILED, 5s);
  EXPECT_TRUE(contains(recv->message(), "rank 0 (verbs fake0:1 at")) << recv->message();
  EXPECT_TRUE(contains(recv->message(), "on fake1:1")) << recv->message();
  EXPECT_TRUE(contains(recv->message(), "IBV_WC_RETRY_EXC_ERR")) << recv->message();
  expect_done(g[1].isend(0, 10, 1, data), HM_ERR_PEER_FAILED, 5s);
  // The others are unaffected.
  std::vector<std::byte> got(64);
  auto from2 = g[1].irecv(2, 1, 1, got);
  g[2].isend(1, 1, 1, data);
  expect_done(from2);
  EXPECT_TRUE(got == data);
  // Destroying the rank that talked to the dead one does not wait for it.
  const auto start = Clock::now();
  g.destroy(1);
  EXPECT_LT(Clock::now() - start, 5s);
}

TEST(VerbsEngine, FailPeerEndsItsTraffic) {
  Group g(3);
  std::vector<std::byte> buffer(64);
  auto from0 = g[2].irecv(0, 1, 1, buffer);
  std::vector<std::byte> other(64);
  auto from1 = g[2].irecv(1, 1, 1, other);
  g[2].fail_peer(0, HM_ERR_PEER_FAILED, "rank 0 died (control plane)");
  expect_done(from0, HM_ERR_PEER_FAILED, 5s);
  EXPECT_EQ(from0->message(), "rank 0 died (control plane)");
  const auto data = pattern(64, 3);
  g[1].isend(2, 1, 1, data);
  expect_done(from1);
  EXPECT_TRUE(other == data);
  expect_done(g[2].isend(0, 9, 1, data), HM_ERR_PEER_FAILED, 5s);
}

// The control plane may report a peer gone before its last message was read: fail_peer reads
// what already arrived first.
TEST(VerbsEngine, FailPeerDeliversWhatAlreadyArrived) {
  Group g(2);
  const auto data = pattern(2048, 8);
  for (int round = 0; round < 20; ++round) {
    expect_done(g[0].isend(1, static_cast<std::uint64_t>(round), 1, data));
  }
  std::this_thread::sleep_for(50ms);
  g[1].fail_peer(0, HM_ERR_PEER_FAILED, "gone");
  std::vector<std::byte> got(2048);
  expect_done(g[1].irecv(0, 19, 1, got));
  EXPECT_TRUE(got == data);
  expect_done(g[1].irecv(0, 99, 1, got), HM_ERR_PEER_FAILED);
}

TEST(VerbsEngine, ShutdownWithoutWaitingWakesEverything) {
  Group g(2);
  std::vector<std::byte> buffer(1 << 20);
  auto recv = g[1].irecv(0, 1, 1, buffer);
  const auto start = Clock::now();
  g[1].shutdown(HM_ERR_ABORTED, "aborted by the test", ShutdownWait::kReturnAtOnce);
  EXPECT_LT(Clock::now() - start, 1s) << "shutdown(wait=false) blocked";
  expect_done(recv, HM_ERR_ABORTED, 5s);
  EXPECT_EQ(recv->message(), "aborted by the test");
  expect_done(g[1].isend(0, 2, 1, buffer), HM_ERR_ABORTED, 5s);
  expect_done(g[1].connect_all(), HM_ERR_ABORTED, 5s);
}

TEST(VerbsEngine, ManyLifetimes) {
  for (int round = 0; round < 20; ++round) {
    Group g(3, round % 2 == 0 ? VerbsConfig{} : small_slots());
    const auto data = pattern(10000, static_cast<unsigned>(round));
    std::vector<std::byte> got(10000);
    auto r = g[2].irecv(round % 2, 1, 1, got);
    g[round % 2].isend(2, 1, 1, data);
    expect_done(r);
    ASSERT_TRUE(got == data) << "round " << round;
  }
}

// ---- refusing what cannot work ------------------------------------------------------------------

TEST(VerbsEngine, WrongTokenIsRefused) {
  Group g(2, {}, {}, {"secret", "other"});
  auto c = g[0].connect_all();
  expect_done(c, HM_ERR_AUTH, 10s);
  EXPECT_TRUE(contains(c->message(), "rank 1")) << c->message();
  std::vector<std::byte> buffer(8);
  expect_done(g[0].isend(1, 1, 1, buffer), HM_ERR_AUTH);
}

TEST(VerbsEngine, InfiniBandAndRoceCannotPair) {
  FakePortOptions ib;
  FakePortOptions roce{LinkLayer::kEthernet, GidType::kRoceV2, 3};
  Group g(2, {}, {ib, roce});
  auto c = g[0].connect_all();
  expect_done(c, HM_ERR_UNSUPPORTED, 10s);
  EXPECT_TRUE(contains(c->message(), "fake1:1 is Ethernet but fake0:1 is InfiniBand"))
      << c->message();
  EXPECT_TRUE(contains(c->message(), "rank 1")) << c->message();
  // The listening side gives up on the dialer as well.
  std::vector<std::byte> buffer(8);
  expect_done(g[1].irecv(0, 1, 1, buffer), HM_ERR_UNSUPPORTED, 5s);
}

TEST(VerbsEngine, RoceV1AndV2CannotPair) {
  FakePortOptions v2{LinkLayer::kEthernet, GidType::kRoceV2, 3};
  FakePortOptions v1{LinkLayer::kEthernet, GidType::kIbOrRoceV1, 3};
  Group g(2, {}, {v2, v1});
  auto c = g[0].connect_all();
  expect_done(c, HM_ERR_UNSUPPORTED, 10s);
  EXPECT_TRUE(contains(c->message(), "HOLMES_IB_GID_INDEX")) << c->message();
}

TEST(VerbsEngine, RocePairWorks) {
  FakePortOptions roce{LinkLayer::kEthernet, GidType::kRoceV2, 3};
  Group g(2, {}, {roce, roce});
  const auto data = pattern(200000, 2);
  std::vector<std::byte> got(200000);
  auto r = g[1].irecv(0, 1, 1, got);
  expect_done(g[0].isend(1, 1, 1, data));
  expect_done(r);
  EXPECT_TRUE(got == data);
  EXPECT_TRUE(contains(g[0].link(1).description, "fake0:1 (Ethernet"));
}

// Strangers on the handshake port (garbage, a wrong magic, a half hello) are dropped without
// disturbing the endpoint.
TEST(VerbsEngine, HostileHandshakeBytesAreRefused) {
  Group g(2);
  const auto where = parse_host_port(g.addresses()[1], "test");
  const std::vector<std::vector<std::uint8_t>> attacks = {
      std::vector<std::uint8_t>(200, 0xff),             // garbage after the challenge
      std::vector<std::uint8_t>(kHelloPrefixBytes, 0),  // zero proof, bad magic
      {1, 2, 3},                                        // a fragment, then close
  };
  for (const auto& bytes : attacks) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(where.port);
    ::inet_pton(AF_INET, where.host.c_str(), &addr.sin_addr);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    std::uint8_t challenge[40];
    ASSERT_EQ(::recv(fd, challenge, sizeof challenge, MSG_WAITALL), 40);
    [[maybe_unused]] auto n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    ::close(fd);
  }
  const auto data = pattern(4000, 5);
  std::vector<std::byte> got(4000);
  auto r = g[1].irecv(0, 1, 1, got);
  expect_done(g[0].isend(1, 1, 1, data));
  expect_done(r);
  EXPECT_TRUE(got == data);
}

// A peer that writes malformed messages into our slots (here: a forged message size) has its
// traffic failed with a message saying what it did; others are unaffected.
TEST(VerbsEngine, ForgedMessagesFailThatPeer) {
  Group g(3);
  g.fabric().tamper(Group::port_name(0), [](std::span<std::byte> message) {
    if (message.size() > 48) message[24] = std::byte{0x7f};  // low byte of `total`
  });
  const auto data = pattern(500, 1);
  std::vector<std::byte> got(500);
  auto r = g[1].irecv(0, 1, 1, got);
  g[0].isend(1, 1, 1, data);
  expect_done(r, HM_ERR_TRANSPORT, 5s);
  EXPECT_TRUE(contains(r->message(), "rank 0 (verbs fake0:1 at")) << r->message();
  EXPECT_TRUE(contains(r->message(), "broke the verbs protocol on fake1:1")) << r->message();
  EXPECT_TRUE(contains(r->message(), "lies outside its")) << r->message();
  auto r2 = g[1].irecv(2, 1, 1, got);
  g[2].isend(1, 1, 1, data);
  expect_done(r2);
  EXPECT_TRUE(got == data);
}

TEST(VerbsEngine, DeviceEventsFailTraffic) {
  Group g(3);
  for (int i = 0; i < 3; ++i) expect_done(g[i].connect_all());
  std::vector<std::byte> buffer(64);
  auto recv = g[1].irecv(0, 1, 1, buffer);
  g.fabric().raise_queue_pair_fatal(Group::port_name(1));
  expect_done(recv, HM_ERR_TRANSPORT, 5s);
  EXPECT_TRUE(contains(recv->message(), "fake1:1 reported local work queue catastrophic error"))
      << recv->message();
  EXPECT_TRUE(contains(recv->message(), "rank 0")) << recv->message();
  auto other = g[2].irecv(0, 1, 1, buffer);
  g.fabric().raise_device_fatal(Group::port_name(2));
  expect_done(other, HM_ERR_TRANSPORT, 5s);
  EXPECT_EQ(other->message(), "verbs: device fake2:1 failed: local catastrophic error");
  expect_done(g[2].isend(1, 1, 1, buffer), HM_ERR_TRANSPORT, 5s);
}

TEST(VerbsEngine, FailureListenerHearsOfAClosingPeerOnce) {
  Group g(2, {}, {}, {}, /*set_peers=*/false);
  std::mutex mutex;
  std::vector<std::pair<int, hm_status_t>> heard;
  g[1].set_peer_failure_listener([&](int peer, hm_status_t status, const std::string&) {
    std::lock_guard lock(mutex);
    heard.emplace_back(peer, status);
  });
  g.wire(0);
  g.wire(1);
  expect_done(g[0].connect_all());
  expect_done(g[1].connect_all());
  g.destroy(0);
  std::vector<std::byte> buffer(8);
  expect_done(g[1].irecv(0, 1, 1, buffer), HM_ERR_PEER_FAILED, 5s);
  std::lock_guard lock(mutex);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].first, 0);
  EXPECT_EQ(heard[0].second, HM_ERR_PEER_FAILED);
}

// Where nobody listens the dial fails at once; where a listener never answers it times out.
TEST(VerbsEngine, UnreachableAndSilentPeers) {
  auto fabric = FakeFabric::create();
  TransportOptions options;
  options.token = "t";
  options.context = "silent";
  options.connect_timeout = 300ms;
  auto endpoint = make_verbs_transport_on(options, {}, fabric->open("fake0:1"));
  // A port that was just closed, and a socket that listens but never speaks.
  const int closed = ::socket(AF_INET, SOCK_STREAM, 0);
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  ASSERT_EQ(::bind(closed, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::getsockname(closed, reinterpret_cast<sockaddr*>(&addr), &length), 0);
  const std::string closed_address = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  ::close(closed);
  addr.sin_port = 0;
  ASSERT_EQ(::bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(silent, 4), 0);
  ASSERT_EQ(::getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &length), 0);
  const std::string silent_address = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  endpoint->set_peers(0, {endpoint->listen_address(), closed_address, silent_address});
  std::vector<std::byte> buffer(8);
  auto to_closed = endpoint->isend(1, 1, 1, buffer);
  expect_done(to_closed, HM_ERR_PEER_FAILED, 5s);
  EXPECT_TRUE(contains(to_closed->message(), "cannot connect to rank 1")) << to_closed->message();
  const auto start = Clock::now();
  auto to_silent = endpoint->isend(2, 1, 1, buffer);
  expect_done(to_silent, HM_ERR_TIMEOUT, 5s);
  EXPECT_GE(Clock::now() - start, 250ms);
  EXPECT_EQ(to_silent->message(), "could not set up the verbs queue pair to rank 2 (verbs at " +
                                      silent_address + ") within 300 ms");
  endpoint.reset();
  ::close(silent);
}

TEST(VerbsEngine, BadPeerAddressFailsThatPeer) {
  Group g(2, {}, {}, {}, false);
  auto addresses = g.addresses();
  addresses[1] = "not-an-address";
  g[0].set_peers(0, addresses);
  std::vector<std::byte> buffer(8);
  auto s = g[0].isend(1, 1, 1, buffer);
  expect_done(s, HM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(s->message(), "not-an-address")) << s->message();
  EXPECT_THROW(g[0].isend(0, 1, 1, buffer), Error);  // not to itself
  EXPECT_THROW(g[0].isend(2, 1, 1, buffer), Error);  // no such rank
}

// ---- no busy polling ----------------------------------------------------------------------------

double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Connected, idle endpoints sleep: their progress threads wait in epoll.
TEST(VerbsEngine, IdleEndpointsUseNoCpu) {
  Group g(4);
  for (int i = 0; i < 4; ++i) expect_done(g[i].connect_all());
  std::vector<std::byte> got(100000);
  auto r = g[3].irecv(0, 1, 1, got);  // a receive waiting in the background
  const double before = process_cpu_seconds();
  std::this_thread::sleep_for(500ms);
  const double used = process_cpu_seconds() - before;
  EXPECT_LT(used, 0.05) << "idle endpoints used " << used << " s of CPU in 0.5 s";
  const auto data = pattern(100000, 3);
  expect_done(g[0].isend(3, 1, 1, data));
  expect_done(r);
  EXPECT_TRUE(got == data);
}

}  // namespace
}  // namespace holmes::verbs
