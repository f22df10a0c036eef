// The tcp transport on its own, several endpoints in one process over real loopback sockets:
// messages of every shape arrive intact whichever side comes first, a stranger without the job
// token is refused without disturbing the pair, and failures surface as named errors.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <thread>
#include <tuple>
#include <vector>

#include "combining_receive.hpp"
#include "core/clock.hpp"
#include "core/parse.hpp"
#include "core/status.hpp"
#include "transports/capabilities.hpp"
#include "transports/combine.hpp"
#include "transports/tcp/transport.hpp"

namespace holmes {
namespace {

using namespace std::chrono_literals;

// Options of a loopback endpoint; tests set the rest (checksum, fused reduce) themselves.
tcp::TcpOptions test_options(const std::string& token, int sockets = 2,
                             const std::string& context = "test") {
  tcp::TcpOptions options;
  options.listen_host = "127.0.0.1";
  options.sockets_per_peer = sockets;
  options.token = token;
  options.context = context;
  options.connect_timeout = 5s;
  return options;
}

std::unique_ptr<Transport> endpoint(const std::string& token, int sockets = 2,
                                    const std::string& context = "test") {
  return tcp::make_tcp_transport(test_options(token, sockets, context));
}

// A job of `n` endpoints that know each other.
std::vector<std::unique_ptr<Transport>> job(int n, const tcp::TcpOptions& options) {
  std::vector<std::unique_ptr<Transport>> all;
  std::vector<std::string> addresses;
  for (int i = 0; i < n; ++i) {
    all.push_back(tcp::make_tcp_transport(options));
    addresses.push_back(all.back()->listen_address());
  }
  for (int i = 0; i < n; ++i) all[static_cast<std::size_t>(i)]->set_peers(i, addresses);
  return all;
}

std::vector<std::unique_ptr<Transport>> job(int n, const std::string& token, int sockets = 2) {
  return job(n, test_options(token, sockets));
}

std::vector<std::byte> pattern(std::size_t bytes, int seed) {
  std::vector<std::byte> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) {
    data[i] = static_cast<std::byte>((i * 131 + static_cast<std::size_t>(seed) * 7) & 0xff);
  }
  return data;
}

bool finishes(const CompletionPtr& c, std::chrono::milliseconds within = 10s) {
  return c->wait_until(Deadline::after(within));
}

class TcpSizesTest : public ::testing::TestWithParam<std::tuple<std::size_t, int, bool>> {};

// Every size arrives intact, split over 1..4 sockets, whether the receive is posted before the
// message arrives or after.
TEST_P(TcpSizesTest, MessageArrivesIntact) {
  const auto [bytes, sockets, receive_first] = GetParam();
  auto endpoints = job(2, "secret", sockets);
  const auto sent = pattern(bytes, 3);
  std::vector<std::byte> received(bytes, std::byte{0});
  CompletionPtr recv;
  if (receive_first) recv = endpoints[1]->irecv(0, 42, 7, received);
  auto send = endpoints[0]->isend(1, 42, 7, sent);
  ASSERT_TRUE(finishes(send));
  EXPECT_EQ(send->status(), HM_SUCCESS) << send->message();
  if (!receive_first) {
    std::this_thread::sleep_for(20ms);  // let it arrive unexpected
    recv = endpoints[1]->irecv(0, 42, 7, received);
  }
  ASSERT_TRUE(finishes(recv));
  EXPECT_EQ(recv->status(), HM_SUCCESS) << recv->message();
  EXPECT_EQ(received, sent);
}

INSTANTIATE_TEST_SUITE_P(Shapes, TcpSizesTest,
                         ::testing::Combine(::testing::Values(0, 1, 4096, 65536, 65537, 1 << 20,
                                                              (20 << 20) + 3),
                                            ::testing::Values(1, 2, 4), ::testing::Bool()));

TEST(TcpTransportTest, ManyTagsInAnyOrder) {
  auto endpoints = job(3, "t");
  constexpr int kMessages = 64;
  std::vector<std::vector<std::byte>> out;
  std::vector<std::vector<std::byte>> in(kMessages);
  std::vector<CompletionPtr> pending;
  for (int m = 0; m < kMessages; ++m) {
    out.push_back(pattern(static_cast<std::size_t>(m) * 3001 + 1, m));
    in[static_cast<std::size_t>(m)].resize(out.back().size());
  }
  // Post half the receives first, in reverse; send all; post the rest.
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
  EXPECT_EQ(in, out);
}

TEST(TcpTransportTest, SizeMismatchIsReported) {
  auto endpoints = job(2, "t");
  const auto sent = pattern(1000, 1);
  std::vector<std::byte> too_small(500);
  auto recv = endpoints[1]->irecv(0, 5, 9, too_small);
  auto send = endpoints[0]->isend(1, 5, 9, sent);
  ASSERT_TRUE(finishes(recv));
  // `sent` is freed before the endpoints: the send must be over first (ASan saw it still going).
  ASSERT_TRUE(finishes(send));
  EXPECT_EQ(recv->status(), HM_ERR_MISMATCH);
  EXPECT_NE(recv->message().find("1000 bytes"), std::string::npos) << recv->message();
  EXPECT_NE(recv->message().find("rank 0"), std::string::npos) << recv->message();
}

TEST(TcpTransportTest, SignatureMismatchIsReported) {
  auto endpoints = job(2, "t");
  const auto sent = pattern(64, 1);
  std::vector<std::byte> received(64);
  auto send = endpoints[0]->isend(1, 5, 0x1111, sent);
  ASSERT_TRUE(finishes(send));
  std::this_thread::sleep_for(20ms);
  auto recv = endpoints[1]->irecv(0, 5, 0x2222, received);  // arrived before: checked at post
  ASSERT_TRUE(finishes(recv));
  EXPECT_EQ(recv->status(), HM_ERR_MISMATCH);
  EXPECT_NE(recv->message().find("different operation"), std::string::npos) << recv->message();
}

// A stranger with another token is refused with HM_ERR_AUTH; the job's own traffic goes on.
TEST(TcpTransportTest, WrongTokenIsRefusedAndJobUndisturbed) {
  auto endpoints = job(2, "right-token");
  // The stranger claims to be rank 0 of a job whose rank 1 is our endpoint 1.
  auto stranger = endpoint("wrong-token");
  stranger->set_peers(0, {stranger->listen_address(), endpoints[1]->listen_address()});
  const auto payload = pattern(4096, 9);
  auto intrusion = stranger->isend(1, 77, 1, payload);
  ASSERT_TRUE(finishes(intrusion));
  EXPECT_EQ(intrusion->status(), HM_ERR_AUTH);
  EXPECT_NE(intrusion->message().find("refused"), std::string::npos) << intrusion->message();
  // Nothing from the stranger was delivered under that tag, and the real pair still talks.
  std::vector<std::byte> received(4096);
  auto recv = endpoints[1]->irecv(0, 77, 1, received);
  const auto real = pattern(4096, 10);
  auto send = endpoints[0]->isend(1, 77, 1, real);
  ASSERT_TRUE(finishes(send));
  ASSERT_TRUE(finishes(recv));
  EXPECT_EQ(recv->status(), HM_SUCCESS);
  EXPECT_EQ(received, real);
}

// A proof for another communicator (same token, other context) is refused as well.
TEST(TcpTransportTest, OtherCommunicatorIsRefused) {
  auto endpoints = job(2, "token");
  auto other = endpoint("token", 2, "another-communicator");
  other->set_peers(0, {other->listen_address(), endpoints[1]->listen_address()});
  const auto payload = pattern(16, 1);
  auto send = other->isend(1, 1, 1, payload);
  ASSERT_TRUE(finishes(send));
  EXPECT_EQ(send->status(), HM_ERR_AUTH);
}

// Raw garbage on the listening port is dropped; the endpoint keeps working.
TEST(TcpTransportTest, GarbageConnectionIsDropped) {
  auto endpoints = job(2, "t");
  const auto where = parse_host_port(endpoints[1]->listen_address(), "test");
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(where.port);
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  std::vector<unsigned char> junk(4096, 0xAB);
  EXPECT_EQ(::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL), static_cast<ssize_t>(junk.size()));
  // The endpoint answers with its challenge and then hangs up on the bad proof.
  unsigned char buffer[256];
  ssize_t total = 0;
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    total += n;
  }
  EXPECT_GT(total, 0);
  ::close(fd);
  const auto sent = pattern(100000, 4);
  std::vector<std::byte> received(sent.size());
  auto recv = endpoints[1]->irecv(0, 1, 1, received);
  auto send = endpoints[0]->isend(1, 1, 1, sent);
  ASSERT_TRUE(finishes(recv));
  EXPECT_EQ(recv->status(), HM_SUCCESS);
  EXPECT_EQ(received, sent);
  // `sent` is freed before the endpoints: the send must be over first. The receive can finish
  // while the sender's io thread has yet to return from its last write (ASan saw that write).
  ASSERT_TRUE(finishes(send));
  EXPECT_EQ(send->status(), HM_SUCCESS) << send->message();
}

// A man in the middle that forwards every connection to `target` and flips one byte of the
// stream from the connecting side at `flip_at` (counted per connection): a fault on the wire.
class TamperingProxy {
 public:
  TamperingProxy(const std::string& target, std::size_t flip_at)
      : target_(parse_host_port(target, "proxy target")), flip_at_(flip_at) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(listener_, 16);
    socklen_t len = sizeof(addr);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~TamperingProxy() {
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    acceptor_.join();
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    for (auto& t : pumps_) t.join();
    for (int fd : fds_) ::close(fd);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  void accept_loop() {
    for (;;) {
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      const int server = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(target_.port);
      ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
      if (::connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        ::close(client);
        ::close(server);
        continue;
      }
      fds_.push_back(client);
      fds_.push_back(server);
      pumps_.emplace_back([this, client, server] { pump(client, server, true); });
      pumps_.emplace_back([this, client, server] { pump(server, client, false); });
    }
  }
  void pump(int from, int to, bool tamper) {
    std::vector<unsigned char> buffer(65536);
    std::size_t seen = 0;
    for (;;) {
      const ssize_t n = ::recv(from, buffer.data(), buffer.size(), 0);
      if (n <= 0) break;
      if (tamper && seen <= flip_at_ && flip_at_ < seen + static_cast<std::size_t>(n)) {
        buffer[flip_at_ - seen] ^= 0x10;
      }
      seen += static_cast<std::size_t>(n);
      if (::send(to, buffer.data(), static_cast<std::size_t>(n), MSG_NOSIGNAL) != n) break;
    }
    ::shutdown(to, SHUT_WR);
  }

  HostPort target_;
  std::size_t flip_at_;
  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::thread acceptor_;
  std::vector<int> fds_;  // written by the acceptor only, read after it has joined
  std::vector<std::thread> pumps_;
};

// One byte flipped on the wire inside a 1 MiB message: with HOLMES_CHECKSUM's CRC32C the
// receive fails, naming the peer and the chunk; without it the corruption goes unnoticed (which
// is why the tcp tier across islands has the option).
TEST(TcpTransportTest, CorruptedChunkIsReportedWithChecksumNotWithout) {
  for (const bool checksum : {true, false}) {
    SCOPED_TRACE(checksum ? "checksum" : "no checksum");
    auto options = test_options("wire", 1, "tamper");
    options.checksum = checksum;
    auto sender = tcp::make_tcp_transport(options);
    auto receiver = tcp::make_tcp_transport(options);
    // Far past the handshake, inside the message's payload.
    TamperingProxy proxy(receiver->listen_address(), 300000);
    sender->set_peers(0, {sender->listen_address(), proxy.address()});
    receiver->set_peers(1, {sender->listen_address(), receiver->listen_address()});
    const auto sent = pattern(1 << 20, 9);
    std::vector<std::byte> received(sent.size());
    auto recv = receiver->irecv(0, 5, 1, received);
    auto send = sender->isend(1, 5, 1, sent);
    ASSERT_TRUE(finishes(recv));
    if (checksum) {
      EXPECT_EQ(recv->status(), HM_ERR_TRANSPORT) << recv->message();
      EXPECT_NE(recv->message().find("corrupted chunk"), std::string::npos) << recv->message();
      EXPECT_NE(recv->message().find("rank 0"), std::string::npos) << recv->message();
    } else {
      EXPECT_EQ(recv->status(), HM_SUCCESS) << recv->message();
      EXPECT_NE(received, sent);
    }
    sender->shutdown(HM_ERR_ABORTED, "test over", ShutdownWait::kUntilReleased);
    receiver->shutdown(HM_ERR_ABORTED, "test over", ShutdownWait::kUntilReleased);
  }
}

// A peer that goes away while we wait for it: HM_ERR_PEER_FAILED, promptly, naming it.
TEST(TcpTransportTest, PeerGoneFailsPostedReceive) {
  auto endpoints = job(2, "t");
  // Make the connection exist, then wait for a second message that never comes.
  const auto first = pattern(10, 1);
  std::vector<std::byte> got(10);
  auto r1 = endpoints[1]->irecv(0, 1, 1, got);
  endpoints[0]->isend(1, 1, 1, first);
  ASSERT_TRUE(finishes(r1));
  std::vector<std::byte> never(10);
  auto r2 = endpoints[1]->irecv(0, 2, 1, never);
  const auto start = Clock::now();
  endpoints[0].reset();  // rank 0's endpoint closes all its connections
  ASSERT_TRUE(finishes(r2, 5s));
  EXPECT_EQ(r2->status(), HM_ERR_PEER_FAILED);
  EXPECT_NE(r2->message().find("rank 0"), std::string::npos) << r2->message();
  EXPECT_LT(Clock::now() - start, 2s);
}

// Sending to an address where nobody listens fails with HM_ERR_PEER_FAILED.
TEST(TcpTransportTest, ConnectToNobodyFails) {
  auto lonely = endpoint("t");
  auto gone = endpoint("t");
  const std::string dead_address = gone->listen_address();
  gone.reset();
  lonely->set_peers(0, {lonely->listen_address(), dead_address});
  const auto payload = pattern(8, 1);
  auto send = lonely->isend(1, 1, 1, payload);
  ASSERT_TRUE(finishes(send));
  EXPECT_EQ(send->status(), HM_ERR_PEER_FAILED);
}

// shutdown without waiting (hm_comm_abort) wakes a posted receive with HM_ERR_ABORTED at once;
// later operations fail the same way.
TEST(TcpTransportTest, ShutdownWakesPostedReceive) {
  auto endpoints = job(2, "t");
  std::vector<std::byte> buffer(16);
  auto recv = endpoints[1]->irecv(0, 1, 1, buffer);
  std::this_thread::sleep_for(20ms);
  endpoints[1]->shutdown(HM_ERR_ABORTED, "aborted by test", ShutdownWait::kReturnAtOnce);
  ASSERT_TRUE(finishes(recv, 1s));
  EXPECT_EQ(recv->status(), HM_ERR_ABORTED);
  EXPECT_EQ(recv->message(), "aborted by test");
  auto later = endpoints[1]->isend(0, 2, 1, buffer);
  ASSERT_TRUE(finishes(later, 1s));
  EXPECT_EQ(later->status(), HM_ERR_ABORTED);
}

TEST(TcpTransportTest, BadArgumentsAreRefused) {
  auto endpoints = job(2, "t");
  std::vector<std::byte> buffer(4);
  EXPECT_THROW(endpoints[0]->isend(0, 1, 1, buffer), Error);  // self
  EXPECT_THROW(endpoints[0]->isend(2, 1, 1, buffer), Error);  // out of range
  EXPECT_THROW(endpoints[0]->irecv(-1, 1, 1, buffer), Error);
  EXPECT_THROW(endpoints[0]->set_peers(0, {"a", "b"}), Error);  // already set
  tcp::TcpOptions options;
  options.listen_host = "not-an-ip";
  EXPECT_THROW(tcp::make_tcp_transport(options), Error);
  options.listen_host = "127.0.0.1";
  options.sockets_per_peer = 0;
  EXPECT_THROW(tcp::make_tcp_transport(options), Error);
}

// Several NICs (HOLMES_TCP_NICS): loopback aliases stand in for them, 127.0.0.1 and 127.0.0.2,
// each its own listener and lane. The endpoints' per-NIC counters come from the sockets the
// payload really went out of and came in on.

tcp::TcpOptions nic_options(const std::string& nics) {
  auto options = test_options("nics", 2, "nics");
  options.tcp_nics = nics;
  return options;
}

std::vector<tcp::NicTraffic> traffic(const std::unique_ptr<Transport>& t) {
  return dynamic_cast<const tcp::TcpTransport&>(*t).nic_traffic();
}

// Sends `bytes` from `from` to `to` and checks that every byte arrived as sent.
void exchange_exactly(std::vector<std::unique_ptr<Transport>>& all, int from, int to,
                      std::size_t bytes, std::uint64_t tag) {
  const auto sent = pattern(bytes, static_cast<int>(tag));
  std::vector<std::byte> received(bytes, std::byte{0});
  auto recv = all[static_cast<std::size_t>(to)]->irecv(from, tag, 3, received);
  auto send = all[static_cast<std::size_t>(from)]->isend(to, tag, 3, sent);
  ASSERT_TRUE(finishes(send));
  ASSERT_TRUE(finishes(recv));
  EXPECT_EQ(send->status(), HM_SUCCESS) << send->message();
  EXPECT_EQ(recv->status(), HM_SUCCESS) << recv->message();
  EXPECT_TRUE(received == sent) << "payload of " << bytes << " bytes differs";
}

TEST(TcpMultiNic, StripesEveryLargeMessageOverBothNics) {
  std::vector<std::unique_ptr<Transport>> all;
  all.push_back(tcp::make_tcp_transport(nic_options("127.0.0.1@1,127.0.0.2@1")));
  all.push_back(tcp::make_tcp_transport(nic_options("127.0.0.1,127.0.0.2")));
  const std::vector<std::string> cards = {all[0]->listen_address(), all[1]->listen_address()};
  // The card lists both listeners after the listen address.
  EXPECT_EQ(std::count(cards[0].begin(), cards[0].end(), ';'), 2) << cards[0];
  for (int i = 0; i < 2; ++i) all[static_cast<std::size_t>(i)]->set_peers(i, cards);
  constexpr std::size_t kBytes = (16u << 20) + 5;
  exchange_exactly(all, 0, 1, kBytes, 1);
  exchange_exactly(all, 1, 0, kBytes, 2);
  exchange_exactly(all, 0, 1, 100, 3);  // small: one fragment, one connection
  for (int i = 0; i < 2; ++i) {
    const auto nics = traffic(all[static_cast<std::size_t>(i)]);
    ASSERT_EQ(nics.size(), 2u);
    EXPECT_EQ(nics[0].nic.ip, "127.0.0.1");
    EXPECT_EQ(nics[1].nic.ip, "127.0.0.2");
    // Every payload byte went out of one of the NICs and came in on one, and each NIC carried
    // part of it both ways.
    EXPECT_EQ(nics[0].sent + nics[1].sent, kBytes + (i == 0 ? 100 : 0));
    EXPECT_EQ(nics[0].received + nics[1].received, kBytes + (i == 1 ? 100 : 0));
    for (const auto& n : nics) {
      EXPECT_GT(n.sent, kBytes / 8) << "rank " << i << " sent little on " << n.nic.ip;
      EXPECT_GT(n.received, kBytes / 8) << "rank " << i << " received little on " << n.nic.ip;
    }
  }
  EXPECT_NE(all[0]->link(1).description.find("over lo -> 127.0.0.1:"), std::string::npos)
      << all[0]->link(1).description;
}

// A rank with one address and a rank with two NICs: each reaches the other, the two-NIC rank
// over both of its NICs (loopback: both are on the one-NIC rank's network), the other over its
// one connection set to the two-NIC rank's listen address.
TEST(TcpMultiNic, APeerWithOneNicTalksToOneWithTwo) {
  std::vector<std::unique_ptr<Transport>> all;
  all.push_back(tcp::make_tcp_transport(nic_options("127.0.0.1,127.0.0.2")));
  all.push_back(tcp::make_tcp_transport(test_options("nics", 2, "nics")));
  const std::vector<std::string> cards = {all[0]->listen_address(), all[1]->listen_address()};
  EXPECT_EQ(cards[1].find(';'), std::string::npos) << cards[1];  // one NIC: the address alone
  for (int i = 0; i < 2; ++i) all[static_cast<std::size_t>(i)]->set_peers(i, cards);
  constexpr std::size_t kBytes = (8u << 20) + 3;
  exchange_exactly(all, 0, 1, kBytes, 1);
  exchange_exactly(all, 1, 0, kBytes, 2);
  exchange_exactly(all, 1, 0, 7, 3);
  const auto nics = traffic(all[0]);
  ASSERT_EQ(nics.size(), 2u);
  EXPECT_GT(nics[0].sent, 0u);
  EXPECT_GT(nics[1].sent, 0u);
  EXPECT_EQ(nics[0].sent + nics[1].sent, kBytes);
  // The one-NIC rank dials the listen address: 127.0.0.1's listener took it all.
  EXPECT_EQ(nics[0].received, kBytes + 7);
  EXPECT_EQ(nics[1].received, 0u);
  EXPECT_TRUE(traffic(all[1]).empty());
}

TEST(TcpMultiNic, ABadNicListIsRefusedNamingTheSetting) {
  for (const std::string bad : {"hs-no-such-nic0", "127.0.0.1@x", "192.0.2.254"}) {
    try {
      tcp::make_tcp_transport(nic_options(bad));
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(e.what()).find("HOLMES_TCP_NICS"), std::string::npos) << e.what();
    }
  }
}

// Combining receives (CombiningReceive::irecv_reduce): each fragment is reduced into the buffer as
// it lands, from a fragment-sized staging buffer, so the buffer ends as in + message.

// in + message as uint32, element by element (tests/support/uint32_sum.hpp).
using test::uint32_sum;

tcp::TcpOptions combine_options(int sockets, bool checksum, bool fused) {
  auto options = test_options("combine", sockets, "combine");
  options.checksum = checksum;
  options.tcp_fused_reduce = fused;
  return options;
}

class TcpCombineTest
    : public ::testing::TestWithParam<std::tuple<std::size_t, int, bool, bool, bool>> {};

// Sizes of one element, of a fragment and a bit, and of several fragments (spread over the
// sockets); the receive posted first (fragments reduced as they land) or last (kept as
// unexpected pieces, reduced when it is posted); a separate input or the buffer itself; with and
// without a checksum after every fragment.
TEST_P(TcpCombineTest, EndsAsInputPlusMessage) {
  const auto [bytes, sockets, receive_first, in_place, checksum] = GetParam();
  auto endpoints = job(2, combine_options(sockets, checksum, true));
  test::expect_combining_receive(*endpoints[0], *endpoints[1], pattern(bytes, 3), pattern(bytes, 4),
                                 receive_first, in_place);
}

INSTANTIATE_TEST_SUITE_P(Shapes, TcpCombineTest,
                         ::testing::Combine(::testing::Values(4, 262148, (3 << 20) + 12),
                                            ::testing::Values(1, 2), ::testing::Bool(),
                                            ::testing::Bool(), ::testing::Bool()));

// Many combining receives in a row reuse their staging buffers; every result stays exact.
TEST(TcpCombine, ManyReceivesInARow) {
  auto endpoints = job(2, combine_options(2, false, true));
  for (int round = 0; round < 40; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::size_t bytes = (std::size_t{1} << 18) * static_cast<std::size_t>(1 + round % 3);
    test::expect_combining_receive(*endpoints[0], *endpoints[1], pattern(bytes, round),
                                   pattern(bytes, round + 1), true, false);
    if (HasFailure()) return;  // the first round that fails says enough
  }
}

// HOLMES_TCP_FUSED_REDUCE=0: the transport refuses, and the collective reduces by itself.
TEST(TcpCombine, TheSwitchTurnsItOff) {
  auto endpoints = job(2, combine_options(1, false, false));
  std::vector<std::byte> buffer(64);
  const auto own = pattern(64, 1);
  EXPECT_EQ(capability<CombiningReceive>(*endpoints[1])
                ->irecv_reduce(0, 1, 1, buffer, {own.data(), HM_UINT32, HM_SUM}),
            nullptr);
}

// A corrupted fragment fails the combining receive (checksum on) and is never reduced into it.
TEST(TcpCombine, CorruptedChunkIsNeverReduced) {
  const auto options = combine_options(1, true, true);
  auto sender = tcp::make_tcp_transport(options);
  auto receiver = tcp::make_tcp_transport(options);
  TamperingProxy proxy(receiver->listen_address(), 300000);  // inside the payload
  sender->set_peers(0, {sender->listen_address(), proxy.address()});
  receiver->set_peers(1, {sender->listen_address(), receiver->listen_address()});
  const auto sent = pattern(1 << 20, 9);
  const auto own = pattern(1 << 20, 10);
  std::vector<std::byte> buffer(sent.size(), std::byte{0});
  auto recv = capability<CombiningReceive>(*receiver)->irecv_reduce(
      0, 5, 1, buffer, {own.data(), HM_UINT32, HM_SUM});
  ASSERT_NE(recv, nullptr);
  auto send = sender->isend(1, 5, 1, sent);
  ASSERT_TRUE(finishes(recv));
  EXPECT_EQ(recv->status(), HM_ERR_TRANSPORT) << recv->message();
  EXPECT_NE(recv->message().find("corrupted chunk"), std::string::npos) << recv->message();
  // Whatever was reduced is exact: no element holds anything but 0 or in + message.
  const auto expected = uint32_sum(own, sent);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < buffer.size(); i += 4) {
    const bool untouched = std::memcmp(buffer.data() + i, "\0\0\0\0", 4) == 0;
    if (!untouched && std::memcmp(buffer.data() + i, expected.data() + i, 4) != 0) ++wrong;
  }
  EXPECT_EQ(wrong, 0u);
  sender->shutdown(HM_ERR_ABORTED, "test over", ShutdownWait::kUntilReleased);
  receiver->shutdown(HM_ERR_ABORTED, "test over", ShutdownWait::kUntilReleased);
}

}  // namespace
}  // namespace holmes
