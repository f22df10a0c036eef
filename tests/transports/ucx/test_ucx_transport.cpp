// The ucx transport with several endpoints in one process, over whatever UCX finds on this
// machine (shared memory and cma between workers of one host; tcp when UCX_TLS asks for it):
// messages of every size whichever side comes first, eager and rendezvous, many tags and many
// requests at once, fan-in, mismatches, peers that close or fail, bad addresses, and endpoints
// that come and go without leaking threads or file descriptors.
#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.hpp"
#include "core/status.hpp"
#include "process_threads.hpp"
#include "transports/ucx/transport.hpp"

namespace holmes {
namespace {

using namespace std::chrono_literals;

TransportOptions options_for(const std::string& token = "secret") {
  static int counter = 0;
  TransportOptions options;
  options.listen_host = "127.0.0.1";
  options.token = token;
  options.context = "ucx-test-" + std::to_string(++counter);
  options.connect_timeout = 10s;
  return options;
}

// `n` endpoints of one communicator that know each other.
std::vector<std::unique_ptr<Transport>> job(int n, const std::string& token = "secret",
                                            bool same_host_peers = true,
                                            const ucx::UcxChoices& choices = {}) {
  auto options = options_for(token);
  options.ucx_same_host_peers = same_host_peers;
  std::vector<std::unique_ptr<Transport>> all;
  std::vector<std::string> addresses;
  for (int i = 0; i < n; ++i) {
    all.push_back(ucx::make_ucx_transport(options, choices));
    addresses.push_back(all.back()->listen_address());
  }
  for (int i = 0; i < n; ++i) all[static_cast<std::size_t>(i)]->set_peers(i, addresses);
  return all;
}

std::vector<std::byte> pattern(std::size_t bytes, unsigned seed) {
  std::vector<std::byte> data(bytes);
  std::uint32_t x = seed * 2654435761u + 7;
  for (std::size_t i = 0; i < bytes; ++i) {
    x = x * 1664525u + 1013904223u;
    data[i] = static_cast<std::byte>(x >> 24);
  }
  return data;
}

::testing::AssertionResult ends(const CompletionPtr& c, hm_status_t expected = HM_SUCCESS,
                                std::chrono::milliseconds within = 30s) {
  if (!c->wait_until(Deadline::after(within))) {
    return ::testing::AssertionFailure() << "did not complete within " << within.count() << " ms";
  }
  if (c->status() != expected) {
    return ::testing::AssertionFailure()
           << "status " << c->status() << " (expected " << expected << "): " << c->message();
  }
  return ::testing::AssertionSuccess();
}

std::size_t entries(const char* directory) {
  std::size_t count = 0;
  if (DIR* dir = ::opendir(directory)) {
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] != '.') ++count;
    }
    ::closedir(dir);
  }
  return count;
}

// Sets (or, given nullptr, unsets) an environment variable for one test and restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(UcxTransport, IsAvailableHere) {
  std::string why;
  EXPECT_TRUE(ucx::ucx_available(&why)) << why;
  EXPECT_TRUE(why.empty()) << why;
}

// ---------------------------------------------------------------------------------------------
// Sizes: eager (short and bcopy) and rendezvous, receive posted before or after the message.
// ---------------------------------------------------------------------------------------------

class UcxSizes : public ::testing::TestWithParam<std::tuple<std::size_t, bool>> {};

TEST_P(UcxSizes, MessageArrivesIntact) {
  const auto [bytes, receive_first] = GetParam();
  auto endpoints = job(2);
  const auto sent = pattern(bytes, static_cast<unsigned>(bytes));
  std::vector<std::byte> got(bytes, std::byte{0});
  CompletionPtr recv;
  if (receive_first) recv = endpoints[1]->irecv(0, 42, 7, got);
  auto send = endpoints[0]->isend(1, 42, 7, sent);
  if (!receive_first) {
    std::this_thread::sleep_for(20ms);  // let it arrive unexpected
    recv = endpoints[1]->irecv(0, 42, 7, got);
  }
  ASSERT_TRUE(ends(send));
  ASSERT_TRUE(ends(recv));
  EXPECT_TRUE(got == sent) << bytes << " bytes";
}

INSTANTIATE_TEST_SUITE_P(
    EagerAndRendezvous, UcxSizes,
    ::testing::Combine(::testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{93},
                                         std::size_t{94}, std::size_t{8191}, std::size_t{8256},
                                         std::size_t{8257}, std::size_t{65536},
                                         (std::size_t{1} << 20) + 3, std::size_t{16} << 20,
                                         std::size_t{64} << 20),
                       ::testing::Bool()),
    [](const auto& info) {
      return std::to_string(std::get<0>(info.param)) + "B_" +
             (std::get<1>(info.param) ? "receive_first" : "send_first");
    });

TEST(UcxTransport, OneGibibyte) {
  auto endpoints = job(2);
  constexpr std::size_t kBytes = std::size_t{1} << 30;
  std::vector<std::byte> sent(kBytes);
  for (std::size_t i = 0; i < kBytes; i += 4093) sent[i] = static_cast<std::byte>(i * 7 >> 12);
  sent[kBytes - 1] = std::byte{0xa5};
  std::vector<std::byte> got(kBytes, std::byte{0});
  auto recv = endpoints[1]->irecv(0, 1, 1, got);
  auto send = endpoints[0]->isend(1, 1, 1, sent);
  ASSERT_TRUE(ends(send, HM_SUCCESS, 120s));
  ASSERT_TRUE(ends(recv, HM_SUCCESS, 120s));
  EXPECT_EQ(std::memcmp(got.data(), sent.data(), kBytes), 0);
}

// The same sizes over UCX's tcp transport alone (what ranks on different hosts without RDMA
// use): rendezvous then moves through tcp instead of cma.
TEST(UcxTransport, OverTcpOnly) {
  ScopedEnv tls("UCX_TLS", "tcp,self");
  auto endpoints = job(2);
  ASSERT_TRUE(ends(endpoints[0]->connect_all()));
  EXPECT_NE(endpoints[0]->link(1).description.find("tcp/lo"), std::string::npos)
      << endpoints[0]->link(1).description;
  unsigned tag = 0;
  for (std::size_t bytes : {std::size_t{0}, std::size_t{100}, std::size_t{70000},
                            std::size_t{3} << 20, std::size_t{32} << 20}) {
    for (bool receive_first : {true, false}) {
      const auto sent = pattern(bytes, ++tag);
      std::vector<std::byte> got(bytes);
      CompletionPtr recv;
      if (receive_first) recv = endpoints[1]->irecv(0, tag, 3, got);
      auto send = endpoints[0]->isend(1, tag, 3, sent);
      if (!receive_first) {
        std::this_thread::sleep_for(20ms);
        recv = endpoints[1]->irecv(0, tag, 3, got);
      }
      ASSERT_TRUE(ends(send)) << bytes;
      ASSERT_TRUE(ends(recv)) << bytes;
      EXPECT_TRUE(got == sent) << bytes << " bytes, receive first " << receive_first;
    }
  }
}

// A transport whose peers are all on other hosts (what the communicator says when it wires one
// up for the links between hosts of an RDMA island) does not let UCX use shared memory, even
// when UCX sees the peer on its own machine (namespaces emulating hosts): its lanes are network
// lanes, and messages of both protocols still arrive.
TEST(UcxTransport, PeersOnOtherHostsGetNoSharedMemoryLanes) {
  ScopedEnv tls("UCX_TLS", nullptr);
  auto endpoints = job(2, "secret", /*same_host_peers=*/false);
  ASSERT_TRUE(ends(endpoints[0]->connect_all()));
  const auto description = endpoints[0]->link(1).description;
  EXPECT_NE(description.find("tcp/lo"), std::string::npos) << description;
  for (const char* shm : {"memory", "sysv", "posix", "cma"}) {
    EXPECT_EQ(description.find(shm), std::string::npos) << description;
  }
  unsigned tag = 0;
  for (std::size_t bytes : {std::size_t{8}, std::size_t{3} << 20}) {
    const auto sent = pattern(bytes, ++tag);
    std::vector<std::byte> got(bytes);
    auto recv = endpoints[1]->irecv(0, tag, 3, got);
    auto send = endpoints[0]->isend(1, tag, 3, sent);
    ASSERT_TRUE(ends(send)) << bytes;
    ASSERT_TRUE(ends(recv)) << bytes;
    EXPECT_TRUE(got == sent) << bytes;
  }
}

// The user's UCX_TLS (HOLMES_UCX_TLS; the communicator reads UCX_TLS as its alias) wins over
// that choice.
TEST(UcxTransport, UserTransportListWinsForPeersOnOtherHosts) {
  ScopedEnv tls("UCX_TLS", nullptr);
  auto endpoints =
      job(2, "secret", /*same_host_peers=*/false, {.tls = "sm,self", .net_devices = std::nullopt});
  ASSERT_TRUE(ends(endpoints[0]->connect_all()));
  const auto description = endpoints[0]->link(1).description;
  EXPECT_NE(description.find("memory"), std::string::npos) << description;
  EXPECT_EQ(description.find("tcp"), std::string::npos) << description;
}

// ---------------------------------------------------------------------------------------------
// Many messages
// ---------------------------------------------------------------------------------------------

// Tags are matched whatever order messages are sent and receives posted in, and a tag can be
// used again once its message has arrived.
TEST(UcxTransport, ManyTagsInAnyOrder) {
  auto endpoints = job(2);
  constexpr int kMessages = 300;
  std::vector<std::vector<std::byte>> out;
  std::vector<std::vector<std::byte>> in(kMessages);
  for (int m = 0; m < kMessages; ++m) {
    // Sizes on both sides of the rendezvous threshold.
    out.push_back(pattern(static_cast<std::size_t>(m % 7) * 5003 + 1, static_cast<unsigned>(m)));
    in[static_cast<std::size_t>(m)].resize(out.back().size());
  }
  std::vector<int> order(kMessages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(11));
  std::vector<CompletionPtr> pending;
  for (int k = 0; k < kMessages / 3; ++k) {
    const auto m = static_cast<std::size_t>(order[static_cast<std::size_t>(k)]);
    pending.push_back(endpoints[1]->irecv(0, 5000 + m, 1, in[m]));
  }
  for (int m = kMessages - 1; m >= 0; --m) {
    pending.push_back(endpoints[0]->isend(1, 5000 + static_cast<std::uint64_t>(m), 1,
                                          out[static_cast<std::size_t>(m)]));
  }
  for (int k = kMessages / 3; k < kMessages; ++k) {
    const auto m = static_cast<std::size_t>(order[static_cast<std::size_t>(k)]);
    pending.push_back(endpoints[1]->irecv(0, 5000 + m, 1, in[m]));
  }
  for (const auto& p : pending) ASSERT_TRUE(ends(p));
  EXPECT_TRUE(in == out);
  // Same tag again, after the first use has completed.
  const auto again = pattern(20000, 99);
  std::vector<std::byte> got(again.size());
  auto r = endpoints[1]->irecv(0, 5000, 1, got);
  ASSERT_TRUE(ends(endpoints[0]->isend(1, 5000, 1, again)));
  ASSERT_TRUE(ends(r));
  EXPECT_TRUE(got == again);
}

// Hundreds of requests outstanding in both directions at once, eager and rendezvous mixed.
TEST(UcxTransport, HundredsOutstanding) {
  auto endpoints = job(2);
  constexpr int kMessages = 600;
  std::vector<std::vector<std::byte>> a, b, ra(kMessages), rb(kMessages);
  std::vector<CompletionPtr> pending;
  for (int m = 0; m < kMessages; ++m) {
    const std::size_t bytes = m % 10 == 0 ? 100000 : static_cast<std::size_t>(m) * 13;
    a.push_back(pattern(bytes, static_cast<unsigned>(m)));
    b.push_back(pattern(bytes, static_cast<unsigned>(m + kMessages)));
    ra[static_cast<std::size_t>(m)].resize(bytes);
    rb[static_cast<std::size_t>(m)].resize(bytes);
  }
  for (int m = 0; m < kMessages; ++m) {
    const auto i = static_cast<std::size_t>(m);
    const auto tag = static_cast<std::uint64_t>(m);
    if (m % 2 == 0) pending.push_back(endpoints[1]->irecv(0, tag, 0, ra[i]));
    pending.push_back(endpoints[0]->isend(1, tag, 0, a[i]));
    pending.push_back(endpoints[1]->isend(0, tag, 0, b[i]));
    pending.push_back(endpoints[0]->irecv(1, tag, 0, rb[i]));
    if (m % 2 == 1) pending.push_back(endpoints[1]->irecv(0, tag, 0, ra[i]));
  }
  for (const auto& p : pending) ASSERT_TRUE(ends(p));
  EXPECT_TRUE(ra == a);
  EXPECT_TRUE(rb == b);
}

// Seven senders into one receiver at once, each with a rendezvous and an eager message.
TEST(UcxTransport, FanInOfSeven) {
  constexpr int kRanks = 8;
  auto endpoints = job(kRanks);
  std::vector<std::vector<std::byte>> big, small, got_big(kRanks), got_small(kRanks);
  std::vector<CompletionPtr> pending;
  for (int i = 0; i < kRanks; ++i) {
    big.push_back(pattern(4u << 20, static_cast<unsigned>(i)));
    small.push_back(pattern(300, static_cast<unsigned>(100 + i)));
    got_big[static_cast<std::size_t>(i)].resize(big.back().size());
    got_small[static_cast<std::size_t>(i)].resize(small.back().size());
  }
  for (int i = 1; i < kRanks; ++i) {
    const auto k = static_cast<std::size_t>(i);
    pending.push_back(endpoints[0]->irecv(i, 1, 2, got_big[k]));
  }
  for (int i = 1; i < kRanks; ++i) {
    const auto k = static_cast<std::size_t>(i);
    pending.push_back(endpoints[k]->isend(0, 1, 2, big[k]));
    pending.push_back(endpoints[k]->isend(0, 2, 2, small[k]));
  }
  for (int i = 1; i < kRanks; ++i) {  // the small ones arrive before they are asked for
    const auto k = static_cast<std::size_t>(i);
    pending.push_back(endpoints[0]->irecv(i, 2, 2, got_small[k]));
  }
  for (const auto& p : pending) ASSERT_TRUE(ends(p));
  for (int i = 1; i < kRanks; ++i) {
    const auto k = static_cast<std::size_t>(i);
    EXPECT_TRUE(got_big[k] == big[k]) << "from rank " << i;
    EXPECT_TRUE(got_small[k] == small[k]) << "from rank " << i;
  }
}

// Every pair of four endpoints exchanges a message in both directions.
TEST(UcxTransport, AllPairsOfFour) {
  constexpr int kRanks = 4;
  auto endpoints = job(kRanks);
  for (auto& e : endpoints) ASSERT_TRUE(ends(e->connect_all()));
  std::vector<std::vector<std::byte>> out(kRanks * kRanks), in(kRanks * kRanks);
  std::vector<CompletionPtr> pending;
  for (int from = 0; from < kRanks; ++from) {
    for (int to = 0; to < kRanks; ++to) {
      if (from == to) continue;
      const auto k = static_cast<std::size_t>(from * kRanks + to);
      out[k] =
          pattern(static_cast<std::size_t>(1000 + 40000 * from + to), static_cast<unsigned>(k));
      in[k].resize(out[k].size());
      pending.push_back(endpoints[static_cast<std::size_t>(to)]->irecv(from, 9, 9, in[k]));
      pending.push_back(endpoints[static_cast<std::size_t>(from)]->isend(to, 9, 9, out[k]));
    }
  }
  for (const auto& p : pending) ASSERT_TRUE(ends(p));
  EXPECT_TRUE(in == out);
}

// Messages may reach an endpoint before it knows its peers; they wait for their receives.
TEST(UcxTransport, MessagesBeforeSetPeersWait) {
  const auto options = options_for();
  auto a = ucx::make_ucx_transport(options);
  auto b = ucx::make_ucx_transport(options);
  const std::vector<std::string> addresses{a->listen_address(), b->listen_address()};
  a->set_peers(0, addresses);
  const auto small = pattern(64, 1);
  const auto big = pattern(1 << 20, 2);
  auto s1 = a->isend(1, 1, 1, small);
  auto s2 = a->isend(1, 2, 1, big);
  std::this_thread::sleep_for(50ms);
  b->set_peers(1, addresses);
  std::vector<std::byte> got_small(64), got_big(1 << 20);
  auto r1 = b->irecv(0, 1, 1, got_small);
  auto r2 = b->irecv(0, 2, 1, got_big);
  ASSERT_TRUE(ends(s1));
  ASSERT_TRUE(ends(s2));
  ASSERT_TRUE(ends(r1));
  ASSERT_TRUE(ends(r2));
  EXPECT_TRUE(got_small == small);
  EXPECT_TRUE(got_big == big);
}

// ---------------------------------------------------------------------------------------------
// Mismatches
// ---------------------------------------------------------------------------------------------

class UcxMismatch : public ::testing::TestWithParam<std::tuple<std::size_t, bool>> {};

TEST_P(UcxMismatch, SizeAndSignatureAreChecked) {
  const auto [bytes, receive_first] = GetParam();
  auto endpoints = job(2);
  const auto data = pattern(bytes, 1);
  const auto post = [&](std::uint64_t tag, std::uint32_t signature, std::vector<std::byte>& buf,
                        std::uint32_t sent_signature) {
    CompletionPtr recv;
    if (receive_first) recv = endpoints[1]->irecv(0, tag, signature, buf);
    auto send = endpoints[0]->isend(1, tag, sent_signature, data);
    EXPECT_TRUE(ends(send));  // the sender is not at fault: its send completes
    if (!receive_first) {
      std::this_thread::sleep_for(20ms);
      recv = endpoints[1]->irecv(0, tag, signature, buf);
    }
    return recv;
  };
  std::vector<std::byte> shorter(bytes - 1, std::byte{0x11});
  auto r1 = post(1, 4, shorter, 4);
  ASSERT_TRUE(ends(r1, HM_ERR_MISMATCH));
  EXPECT_NE(r1->message().find("rank 0"), std::string::npos) << r1->message();
  EXPECT_NE(r1->message().find(std::to_string(bytes) + " bytes"), std::string::npos)
      << r1->message();
  EXPECT_TRUE(std::all_of(shorter.begin(), shorter.end(), [](std::byte b) {
    return b == std::byte{0x11};
  })) << "a mismatched receive buffer was written";

  std::vector<std::byte> same(bytes);
  auto r2 = post(2, 0xAAAA, same, 0xBBBB);
  ASSERT_TRUE(ends(r2, HM_ERR_MISMATCH));
  EXPECT_NE(r2->message().find("signature"), std::string::npos) << r2->message();

  // The pair still works afterwards.
  std::vector<std::byte> good(bytes);
  auto r3 = post(3, 5, good, 5);
  ASSERT_TRUE(ends(r3));
  EXPECT_TRUE(good == data);
}

INSTANTIATE_TEST_SUITE_P(EagerAndRendezvous, UcxMismatch,
                         ::testing::Combine(::testing::Values(std::size_t{1000},
                                                              std::size_t{3} << 20),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "B_" +
                                  (std::get<1>(info.param) ? "receive_first" : "send_first");
                         });

// ---------------------------------------------------------------------------------------------
// Failures
// ---------------------------------------------------------------------------------------------

// A peer destroyed while it sends a large message: the receiver's receive of that message either
// completes intact or fails, and its other pending receive from that peer fails, promptly.
TEST(UcxTransport, PeerDestroyedMidMessageFailsPendingReceives) {
  auto endpoints = job(2);
  ASSERT_TRUE(ends(endpoints[0]->connect_all()));
  const auto sent = pattern(64u << 20, 5);
  std::vector<std::byte> got(sent.size());
  std::vector<std::byte> never(4096);
  auto big = endpoints[1]->irecv(0, 1, 1, got);
  auto other = endpoints[1]->irecv(0, 2, 1, never);
  auto send = endpoints[0]->isend(1, 1, 1, sent);
  const auto start = Clock::now();
  endpoints[0].reset();  // shuts down: its send ends, it says goodbye
  EXPECT_TRUE(send->done()) << "a destroyed transport left its send pending";
  ASSERT_TRUE(ends(other, HM_ERR_PEER_FAILED, 5s));
  EXPECT_NE(other->message().find("rank 0"), std::string::npos) << other->message();
  EXPECT_LT(Clock::now() - start, 3s);
  ASSERT_TRUE(big->wait_until(Deadline::after(5s)));
  if (big->status() == HM_SUCCESS) {
    EXPECT_TRUE(got == sent);
  } else {
    EXPECT_EQ(big->status(), HM_ERR_PEER_FAILED) << big->message();
  }
  // Later receives from the closed peer fail at once; sends to it too.
  auto later = endpoints[1]->irecv(0, 3, 1, never);
  EXPECT_TRUE(ends(later, HM_ERR_PEER_FAILED, 2s));
  EXPECT_TRUE(ends(endpoints[1]->isend(0, 4, 1, never), HM_ERR_PEER_FAILED, 2s));
}

// The Router's verdict (tcp saw the peer die) ends that peer's traffic and only that.
TEST(UcxTransport, FailPeerEndsOnlyThatPeer) {
  auto endpoints = job(3);
  std::vector<std::byte> from0(1 << 20), from1(1 << 20);
  auto r0 = endpoints[2]->irecv(0, 1, 1, from0);
  auto r1 = endpoints[2]->irecv(1, 1, 1, from1);
  endpoints[2]->fail_peer(0, HM_ERR_PEER_FAILED, "rank 0 is gone (control plane)");
  ASSERT_TRUE(ends(r0, HM_ERR_PEER_FAILED, 2s));
  EXPECT_EQ(r0->message(), "rank 0 is gone (control plane)");
  const auto data = pattern(1 << 20, 8);
  ASSERT_TRUE(ends(endpoints[1]->isend(2, 1, 1, data)));
  ASSERT_TRUE(ends(r1));
  EXPECT_TRUE(from1 == data);
  EXPECT_TRUE(ends(endpoints[2]->isend(0, 2, 1, data), HM_ERR_PEER_FAILED, 2s));
  EXPECT_TRUE(ends(endpoints[2]->irecv(0, 2, 1, from0), HM_ERR_PEER_FAILED, 2s));
}

// A message from an endpoint of another job (other token) is dropped, never matched.
TEST(UcxTransport, StrangerMessagesAreDropped) {
  const auto ours = options_for("ours");
  auto theirs = ours;
  theirs.token = "theirs";
  auto a = ucx::make_ucx_transport(ours);
  auto b = ucx::make_ucx_transport(ours);
  auto stranger = ucx::make_ucx_transport(theirs);
  a->set_peers(0, {a->listen_address(), b->listen_address()});
  b->set_peers(1, {a->listen_address(), b->listen_address()});
  // The stranger learns b's address and claims to be rank 0.
  stranger->set_peers(0, {stranger->listen_address(), b->listen_address()});
  std::vector<std::byte> got(100, std::byte{0x33});
  auto recv = b->irecv(0, 1, 1, got);
  const auto fake = pattern(100, 1);
  stranger->isend(1, 1, 1, fake)->wait_until(Deadline::after(2s));
  EXPECT_FALSE(recv->wait_until(Deadline::after(200ms))) << "a stranger's message was matched";
  EXPECT_TRUE(
      std::all_of(got.begin(), got.end(), [](std::byte x) { return x == std::byte{0x33}; }));
  const auto real = pattern(100, 2);
  ASSERT_TRUE(ends(a->isend(1, 1, 1, real)));
  ASSERT_TRUE(ends(recv));
  EXPECT_TRUE(got == real);
}

TEST(UcxTransport, GarbageAddressIsRefused) {
  const auto options = options_for();
  auto a = ucx::make_ucx_transport(options);
  try {
    a->set_peers(0, {a->listen_address(), "not-a-ucx-address"});
    FAIL() << "a garbage address was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("rank 1's ucx address 'not-a-ucx-address' is not a ucx "
                                         "worker address"),
              std::string::npos)
        << e.what();
  }
  // A real address, damaged: the checksum catches it before UCX parses it.
  auto b = ucx::make_ucx_transport(options);
  auto damaged = b->listen_address();
  damaged[damaged.size() - 7] = damaged[damaged.size() - 7] == 'a' ? 'b' : 'a';
  try {
    a->set_peers(0, {a->listen_address(), damaged});
    FAIL() << "a damaged address was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
  // The refused set_peers left the endpoint usable.
  a->set_peers(0, {a->listen_address(), b->listen_address()});
  b->set_peers(1, {a->listen_address(), b->listen_address()});
  const auto data = pattern(10, 1);
  std::vector<std::byte> got(10);
  auto r = b->irecv(0, 1, 1, got);
  ASSERT_TRUE(ends(a->isend(1, 1, 1, data)));
  ASSERT_TRUE(ends(r));
  EXPECT_TRUE(got == data);
}

// ---------------------------------------------------------------------------------------------
// Connections, links, shutdown, lifetimes
// ---------------------------------------------------------------------------------------------

TEST(UcxTransport, ConnectAllAndLinkNameUcxLanes) {
  auto endpoints = job(3);
  EXPECT_EQ(endpoints[0]->link(1).transport, "ucx");
  for (auto& e : endpoints) ASSERT_TRUE(ends(e->connect_all()));
  for (int peer : {1, 2}) {
    const auto link = endpoints[0]->link(peer);
    EXPECT_EQ(link.transport, "ucx");
    // e.g. "ucx sysv/memory (am, am_bw) + cma/memory (rma_bw)": transport/device of each lane.
    EXPECT_TRUE(link.description.starts_with("ucx ")) << link.description;
    EXPECT_NE(link.description.find('/'), std::string::npos) << link.description;
    EXPECT_NE(link.description.find("am"), std::string::npos) << link.description;
    EXPECT_EQ(link.description.find("not connected"), std::string::npos) << link.description;
  }
}

TEST(UcxTransport, ShutdownFailsPendingAndLaterRequests) {
  auto endpoints = job(2);
  std::vector<std::byte> buffer(1 << 20);
  auto pending = endpoints[1]->irecv(0, 1, 1, buffer);
  endpoints[1]->shutdown(HM_ERR_ABORTED, "stopped by the test", ShutdownWait::kUntilReleased);
  ASSERT_TRUE(pending->done()) << "shutdown(wait) returned with a receive pending";
  EXPECT_EQ(pending->status(), HM_ERR_ABORTED);
  EXPECT_EQ(pending->message(), "stopped by the test");
  EXPECT_TRUE(ends(endpoints[1]->isend(0, 2, 1, buffer), HM_ERR_ABORTED, 1s));
  EXPECT_TRUE(ends(endpoints[1]->irecv(0, 3, 1, buffer), HM_ERR_ABORTED, 1s));
  EXPECT_TRUE(ends(endpoints[1]->connect_all(), HM_ERR_ABORTED, 1s));
  // The peer heard the goodbye.
  auto from1 = endpoints[0]->irecv(1, 4, 1, buffer);
  EXPECT_TRUE(ends(from1, HM_ERR_PEER_FAILED, 2s));
}

TEST(UcxTransport, AbortReturnsAtOnce) {
  auto endpoints = job(2);
  std::vector<std::byte> buffer(1 << 20);
  auto recv = endpoints[1]->irecv(0, 1, 1, buffer);
  const auto start = Clock::now();
  endpoints[1]->shutdown(HM_ERR_ABORTED, "aborted", ShutdownWait::kReturnAtOnce);
  EXPECT_LT(Clock::now() - start, 100ms) << "shutdown(wait=false) blocked";
  EXPECT_TRUE(ends(recv, HM_ERR_ABORTED, 2s));
}

// Progress threads sleep while they wait: endpoints with receives pending and nothing arriving
// use (almost) no CPU.
TEST(UcxTransport, WaitingDoesNotSpin) {
  const auto cpu_seconds = [] {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
           1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
  };
  std::vector<std::byte> buffer(1 << 20);  // outlives the endpoints that hold it
  auto endpoints = job(4);
  for (auto& e : endpoints) ASSERT_TRUE(ends(e->connect_all()));
  std::vector<CompletionPtr> pending;
  for (int i = 1; i < 4; ++i) pending.push_back(endpoints[0]->irecv(i, 1, 1, buffer));
  const double before = cpu_seconds();
  std::this_thread::sleep_for(1s);
  const double used = cpu_seconds() - before;
  EXPECT_LT(used, 0.1) << "4 idle endpoints used " << used << " s of CPU in 1 s";
  for (const auto& p : pending) EXPECT_FALSE(p->done());
}

// Fifty transports created and destroyed leave no thread and no file descriptor behind.
TEST(UcxTransport, FiftyLifetimesLeakNothing) {
  const auto cycle = [](int round) {
    auto endpoints = job(2);
    const auto data = pattern(20000, static_cast<unsigned>(round));
    std::vector<std::byte> got(data.size());
    auto r = endpoints[1]->irecv(0, 1, 1, got);
    EXPECT_TRUE(ends(endpoints[0]->isend(1, 1, 1, data)));
    EXPECT_TRUE(ends(r));
    EXPECT_TRUE(got == data) << "round " << round;
  };
  cycle(-1);  // UCX opens some process-wide resources once
  const auto fds = entries("/proc/self/fd");
  const auto threads = test::thread_ids();
  for (int round = 0; round < 25; ++round) cycle(round);  // 2 transports per round
  EXPECT_EQ(entries("/proc/self/fd"), fds);
  const auto left = test::threads_started_since(threads);
  EXPECT_TRUE(left.empty()) << "threads left behind: " << test::describe_threads(left);
}

}  // namespace
}  // namespace holmes
