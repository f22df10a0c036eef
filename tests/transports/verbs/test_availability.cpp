// verbs on this machine: without an RDMA device (or kernel InfiniBand support) the transport
// says so and refuses cleanly with HM_ERR_UNSUPPORTED; with one, a pair of endpoints on the real
// device moves data (skipped where there is no device).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.hpp"
#include "core/status.hpp"
#include "transports/kinds.hpp"
#include "transports/verbs/ibv_discovery.hpp"
#include "transports/verbs/transport.hpp"

namespace holmes::verbs {
namespace {

using namespace std::chrono_literals;

bool host_has_rdma_devices() {
  std::error_code ec;
  const std::filesystem::path root("/sys/class/infiniband");
  return std::filesystem::exists(root, ec) && !std::filesystem::is_empty(root, ec);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(VerbsAvailability, NoDeviceSaysWhy) {
  if (host_has_rdma_devices()) {
    GTEST_SKIP() << "this host has RDMA devices: the no-device path cannot be observed here";
  }
  std::string why;
  EXPECT_FALSE(verbs_available(&why));
  EXPECT_TRUE(
      why.starts_with("no RDMA device found (no /sys/class/infiniband entries; "
                      "ibv_get_device_list returned none"))
      << why;
  // Asking twice is as safe as once (libibverbs without devices or providers must not crash).
  std::string again;
  EXPECT_FALSE(verbs_available(&again));
  EXPECT_EQ(again, why);
  EXPECT_FALSE(verbs_available(nullptr));
}

TEST(VerbsAvailability, QueryPortsThrowsUnsupportedWithoutDevices) {
  if (host_has_rdma_devices()) GTEST_SKIP() << "this host has RDMA devices";
  try {
    query_ports();
    ADD_FAILURE() << "query_ports found ports on a host without RDMA devices";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_UNSUPPORTED);
    EXPECT_TRUE(contains(e.what(), "no RDMA device found")) << e.what();
  }
}

TEST(VerbsAvailability, MakeThrowsUnsupportedWithTheReason) {
  std::string why;
  if (verbs_available(&why)) GTEST_SKIP() << "this host has a usable RDMA port";
  TransportOptions options;
  try {
    make_verbs_transport(options);
    ADD_FAILURE() << "created a verbs transport without a usable RDMA port";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_UNSUPPORTED);
    EXPECT_EQ(std::string(e.what()), "verbs transport unavailable: " + why);
  }
}

// The registry of transports (kinds.hpp) reports the same, and refuses the same way.
TEST(VerbsAvailability, TransportRegistryAgrees) {
  std::string why;
  const bool available = verbs_available(&why);
  std::string registry_why;
  EXPECT_EQ(transport_available(TransportKind::kVerbs, &registry_why), available);
  if (available) GTEST_SKIP() << "this host has a usable RDMA port";
  EXPECT_EQ(registry_why, why);
  try {
    make_transport(TransportKind::kVerbs, TransportOptions{});
    ADD_FAILURE() << "created";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_UNSUPPORTED);
    EXPECT_TRUE(contains(e.what(), why)) << e.what();
  }
}

TEST(VerbsAvailability, BadDeviceOverrideIsReported) {
  if (host_has_rdma_devices()) GTEST_SKIP() << "this host has RDMA devices";
  PortPreferences prefs;
  prefs.device = "mlx5_0:x";
  std::string why;
  const bool available = verbs_available(&why, prefs);
  EXPECT_FALSE(available);
  // Without devices the missing device is the first thing wrong.
  EXPECT_TRUE(contains(why, "no RDMA device found")) << why;
}

// ---- with hardware ---------------------------------------------------------------------------

std::vector<std::byte> pattern(std::size_t bytes, unsigned seed) {
  std::vector<std::byte> data(bytes);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : data) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }
  return data;
}

void expect_done(const CompletionPtr& c, hm_status_t expected = HM_SUCCESS) {
  ASSERT_TRUE(c->wait_until(Deadline::after(30s))) << "did not complete in time";
  EXPECT_EQ(c->status(), expected) << c->message();
}

// Two endpoints in this process on the real port (queue pairs loop back through the HCA).
TEST(VerbsRealDevice, PairMovesDataAndSeesItsPeerClose) {
  std::string why;
  if (!verbs_available(&why)) GTEST_SKIP() << "needs a usable RDMA port: " << why;
  TransportOptions options;
  options.listen_host = "127.0.0.1";
  options.token = "real-device-test";
  options.context = "verbs-real-" + std::to_string(::getpid());
  options.connect_timeout = 20s;
  auto a = make_verbs_transport(options);
  auto b = make_verbs_transport(options);
  const std::vector<std::string> addresses = {a->listen_address(), b->listen_address()};
  a->set_peers(0, addresses);
  b->set_peers(1, addresses);
  expect_done(a->connect_all());
  expect_done(b->connect_all());
  std::uint64_t tag = 0;
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{65536},
                            (std::size_t{9} << 20) + 3, std::size_t{64} << 20}) {
    const auto ab = pattern(bytes, static_cast<unsigned>(tag));
    const auto ba = pattern(bytes, static_cast<unsigned>(tag + 100));
    std::vector<std::byte> got_b(bytes), got_a(bytes);
    auto rb = b->irecv(0, tag, 1, got_b);
    auto ra = a->irecv(1, tag, 1, got_a);
    expect_done(a->isend(1, tag, 1, ab));
    expect_done(b->isend(0, tag, 1, ba));
    expect_done(rb);
    expect_done(ra);
    EXPECT_TRUE(got_b == ab) << bytes;
    EXPECT_TRUE(got_a == ba) << bytes;
    ++tag;
  }
  std::vector<CompletionPtr> pending;
  std::vector<std::vector<std::byte>> in(3000, std::vector<std::byte>(200));
  const auto small = pattern(200, 9);
  for (std::size_t m = 0; m < in.size(); ++m) {
    pending.push_back(b->irecv(0, 1000 + m, 2, in[m]));
    pending.push_back(a->isend(1, 1000 + m, 2, small));
  }
  for (auto& p : pending) expect_done(p);
  for (const auto& m : in) EXPECT_TRUE(m == small);
  EXPECT_EQ(a->link(1).transport, "verbs");
  std::vector<std::byte> buffer(16);
  auto waiting = b->irecv(0, 99, 1, buffer);
  const auto start = Clock::now();
  a.reset();
  expect_done(waiting, HM_ERR_PEER_FAILED);
  EXPECT_LT(Clock::now() - start, 5s);
}

}  // namespace
}  // namespace holmes::verbs
