// Tests of src/transports/tcp/congestion.hpp: which congestion control the tcp transport sets on
// a connection, checked on real loopback sockets with getsockopt(TCP_CONGESTION).
#include "transports/tcp/congestion.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <string>
#include <vector>

#include "core/asio.hpp"
#include "core/status.hpp"

namespace holmes::tcp {
namespace {

namespace ip = boost::asio::ip;

// A connected pair of loopback sockets.
struct LoopbackPair {
  boost::asio::io_context io;
  ip::tcp::acceptor acceptor{io, ip::tcp::endpoint(ip::make_address("127.0.0.1"), 0)};
  ip::tcp::socket client{io};
  ip::tcp::socket server{io};
  LoopbackPair() {
    client.connect(acceptor.local_endpoint());
    acceptor.accept(server);
  }
};

std::string congestion_of(ip::tcp::socket& socket) {
  char name[16] = {};
  socklen_t length = sizeof name;
  if (::getsockopt(socket.native_handle(), IPPROTO_TCP, TCP_CONGESTION, name, &length) != 0) {
    return "getsockopt failed";
  }
  return std::string(name);
}

// The kernel's default for new connections (what "system" leaves).
std::string kernel_default() {
  LoopbackPair pair;
  return congestion_of(pair.client);
}

hm_status_t status_of_resolving(const std::string& request, std::string* message) {
  try {
    CongestionPolicy::resolve(request);
    return HM_SUCCESS;
  } catch (const Error& e) {
    *message = e.what();
    return e.status();
  }
}

const ip::address kLoopback = ip::make_address("127.0.0.1");
const ip::address kHostA = ip::make_address("10.9.0.1");
const ip::address kHostB = ip::make_address("10.9.0.2");

TEST(TcpCongestion, AutoGivesSameHostLinksALossBasedAlgorithmAndLeavesOthers) {
  const auto policy = CongestionPolicy::resolve("auto");
  const std::string same_host(policy.choose(kLoopback, kLoopback));
  // Every kernel permits reno to every process, so auto always finds one of its two.
  EXPECT_TRUE(same_host == "cubic" || same_host == "reno") << same_host;
  EXPECT_EQ(policy.choose(kHostA, kHostA), same_host);  // this host's own address
  EXPECT_EQ(policy.choose(kHostA, ip::make_address("::1")), same_host);
  EXPECT_EQ(policy.choose(kHostA, kHostB), "");  // another host (or namespace): the default
  EXPECT_EQ(CongestionPolicy::resolve("").choose(kLoopback, kLoopback), same_host);

  LoopbackPair pair;
  policy.apply(pair.client.native_handle(), kLoopback, kLoopback);
  EXPECT_EQ(congestion_of(pair.client), same_host);
}

TEST(TcpCongestion, SystemNeverSetsAnything) {
  const auto policy = CongestionPolicy::resolve("system");
  EXPECT_EQ(policy.choose(kLoopback, kLoopback), "");
  EXPECT_EQ(policy.choose(kHostA, kHostB), "");
  const std::string before = kernel_default();
  LoopbackPair pair;
  policy.apply(pair.client.native_handle(), kLoopback, kLoopback);
  EXPECT_EQ(congestion_of(pair.client), before);
}

TEST(TcpCongestion, ANamedAlgorithmGoesOnEveryLink) {
  const auto policy = CongestionPolicy::resolve("reno");  // always permitted
  EXPECT_EQ(policy.choose(kLoopback, kLoopback), "reno");
  EXPECT_EQ(policy.choose(kHostA, kHostB), "reno");
  LoopbackPair pair;
  policy.apply(pair.server.native_handle(), kLoopback, kLoopback);
  EXPECT_EQ(congestion_of(pair.server), "reno");
}

TEST(TcpCongestion, MalformedOrUnknownNamesAreRefusedByName) {
  const std::vector<std::string> malformed{
      "Cubic",           "cubic;rm", "a very long algorithm", "x/y", std::string("bb\0r", 4),
      "0123456789abcdef"};
  for (const auto& bad : malformed) {
    std::string message;
    EXPECT_EQ(status_of_resolving(bad, &message), HM_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(message.find("HOLMES_TCP_CONGESTION"), std::string::npos) << message;
    EXPECT_NE(message.find("expected auto, system or"), std::string::npos) << message;
  }
  std::string message;
  EXPECT_EQ(status_of_resolving("no_such_cc", &message), HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("'no_such_cc'"), std::string::npos) << message;
  EXPECT_NE(message.find("allowed here: "), std::string::npos) << message;
  EXPECT_NE(message.find("reno"), std::string::npos) << message;  // the list names what works
}

}  // namespace
}  // namespace holmes::tcp
