// The pieces of the ucx transport that need no UCX worker: the worker address text that travels
// in peer cards, the active message header, the choice of network devices, and the reading of
// the lanes UCX chose for an endpoint.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "transports/ucx/ucx_address.hpp"
#include "transports/ucx/ucx_context.hpp"
#include "transports/ucx/ucx_devices.hpp"
#include "transports/ucx/ucx_wire.hpp"

namespace holmes::ucx {
namespace {

const UcxVersion kVersion{1, 13};

std::vector<std::uint8_t> sample_address() {
  std::vector<std::uint8_t> bytes(186);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 37 + 5);
  return bytes;
}

// Runs `action`, expecting a holmes::Error with `status` whose message contains `needle`.
template <typename Action>
void expect_error(Action&& action, hm_status_t status, const std::string& needle) {
  try {
    action();
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(WorkerAddress, RoundTrips) {
  const auto bytes = sample_address();
  const auto text = encode_worker_address(bytes, kVersion);
  EXPECT_TRUE(text.starts_with("ucx1-1.13-")) << text;
  EXPECT_EQ(text.find_first_of(" \n\t"), std::string::npos);
  EXPECT_EQ(decode_worker_address(text, kVersion, "rank 1's ucx address"), bytes);
}

TEST(WorkerAddress, GarbageIsRefusedWithItsReason) {
  const auto good = encode_worker_address(sample_address(), kVersion);
  expect_error([&] { decode_worker_address("garbage", kVersion, "rank 1's ucx address"); },
               HM_ERR_INVALID_ARGUMENT,
               "rank 1's ucx address 'garbage' is not a ucx worker address");
  expect_error([&] { decode_worker_address("127.0.0.1:4000", kVersion, "x"); },
               HM_ERR_INVALID_ARGUMENT, "does not start with 'ucx1-'");
  expect_error([&] { decode_worker_address("ucx1-1.13-0123", kVersion, "x"); },
               HM_ERR_INVALID_ARGUMENT, "expected ucx1-<version>-<checksum>-<hex bytes>");
  expect_error([&] { decode_worker_address("ucx1-one.13-0000000000000000-00", kVersion, "x"); },
               HM_ERR_INVALID_ARGUMENT, "bad UCX version 'one.13'");
  expect_error([&] { decode_worker_address("ucx1-1.13-00000000-00", kVersion, "x"); },
               HM_ERR_INVALID_ARGUMENT, "checksum is not 16 hex digits");
  expect_error([&] { decode_worker_address(good.substr(0, good.size() - 1), kVersion, "x"); },
               HM_ERR_INVALID_ARGUMENT, "odd number of hex digits");
  expect_error([&] { decode_worker_address(good.substr(0, good.size() - 2), kVersion, "x"); },
               HM_ERR_INVALID_ARGUMENT, "checksum does not match");
  auto flipped = good;
  flipped[flipped.size() - 5] = flipped[flipped.size() - 5] == '0' ? '1' : '0';
  expect_error([&] { decode_worker_address(flipped, kVersion, "x"); }, HM_ERR_INVALID_ARGUMENT,
               "checksum does not match");
  auto not_hex = good;
  not_hex[not_hex.size() - 3] = 'z';
  expect_error([&] { decode_worker_address(not_hex, kVersion, "x"); }, HM_ERR_INVALID_ARGUMENT,
               "is not a hex digit");
  expect_error([&] { decode_worker_address("ucx1-1.13-0000000000000000-", kVersion, "x"); },
               HM_ERR_INVALID_ARGUMENT, "holds no address bytes");
  const std::string huge = "ucx1-1.13-0000000000000000-" + std::string(2 * (65u << 10), 'a');
  expect_error([&] { decode_worker_address(huge, kVersion, "x"); }, HM_ERR_INVALID_ARGUMENT,
               "longer than 65536 bytes");
}

TEST(WorkerAddress, AnotherUcxVersionIsNamed) {
  const auto text = encode_worker_address(sample_address(), UcxVersion{1, 12});
  expect_error([&] { decode_worker_address(text, kVersion, "rank 2's ucx address"); },
               HM_ERR_UNSUPPORTED,
               "rank 2's ucx address comes from UCX 1.12 and this rank runs UCX 1.13");
}

TEST(AmHeader, RoundTrips) {
  AmHeader h;
  h.cookie = 0x0123456789abcdefull;
  h.sender = 7;
  h.kind = AmKind::kData;
  h.tag = 0xfedcba9876543210ull;
  h.signature = 0xdeadbeef;
  h.total = (1ull << 30) + 5;
  const auto bytes = h.encode();
  ASSERT_EQ(bytes.size(), kAmHeaderBytes);
  const auto back = AmHeader::decode(bytes);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->cookie, h.cookie);
  EXPECT_EQ(back->sender, 7u);
  EXPECT_EQ(back->kind, AmKind::kData);
  EXPECT_EQ(back->tag, h.tag);
  EXPECT_EQ(back->signature, h.signature);
  EXPECT_EQ(back->total, h.total);
}

TEST(AmHeader, MalformedHeadersAreRefused) {
  AmHeader h;
  h.kind = AmKind::kGoodbye;
  const auto good = h.encode();
  EXPECT_TRUE(AmHeader::decode(good).has_value());
  EXPECT_FALSE(AmHeader::decode(std::span(good).first(kAmHeaderBytes - 1)).has_value());
  std::vector<std::uint8_t> longer(good.begin(), good.end());
  longer.push_back(0);
  EXPECT_FALSE(AmHeader::decode(longer).has_value());
  auto bad_kind = good;
  bad_kind[12] = 9;
  EXPECT_FALSE(AmHeader::decode(bad_kind).has_value());
  auto bad_version = good;
  bad_version[14] = 2;
  EXPECT_FALSE(AmHeader::decode(bad_version).has_value());
  auto bad_reserved = good;
  bad_reserved[30] = 1;
  EXPECT_FALSE(AmHeader::decode(bad_reserved).has_value());
  auto huge_rank = good;
  huge_rank[11] = 0xff;
  EXPECT_FALSE(AmHeader::decode(huge_rank).has_value());
}

TEST(AmHeader, CookieBindsTokenAndContext) {
  const auto a = am_cookie("token", "comm-1");
  EXPECT_EQ(a, am_cookie("token", "comm-1"));
  EXPECT_NE(a, am_cookie("token", "comm-2"));
  EXPECT_NE(a, am_cookie("other", "comm-1"));
}

TEST(NetDevices, LoopbackAddressIsOnLo) {
  EXPECT_EQ(interface_holding("127.0.0.1"), std::optional<std::string>("lo"));
  EXPECT_EQ(interface_holding("0.0.0.0"), std::nullopt);
  EXPECT_EQ(interface_holding("::"), std::nullopt);
  EXPECT_EQ(interface_holding("not-an-address"), std::nullopt);
  EXPECT_EQ(interface_holding("203.0.113.254"), std::nullopt);  // TEST-NET-3: nobody's
  EXPECT_EQ(default_net_devices("127.0.0.1", {}), std::optional<std::string>("lo"));
  EXPECT_EQ(default_net_devices("127.0.0.1", {"mlx5_0:1", "mlx5_1:1"}),
            std::optional<std::string>("lo,mlx5_0:1,mlx5_1:1"));
  EXPECT_EQ(default_net_devices("203.0.113.254", {"mlx5_0:1"}), std::nullopt);
}

TEST(NetDevices, RendezvousIsOffWhereUcxCarriesTcpOnly) {
  EXPECT_EQ(default_rndv_thresh(false, {}), std::optional<std::string>("inf"));
  EXPECT_EQ(default_rndv_thresh(false, {"mlx5_0:1"}), std::nullopt);  // RDMA: zero-copy reads
  EXPECT_EQ(default_rndv_thresh(true, {}), std::nullopt);             // peers on this host: cma
}

TEST(NetDevices, RdmaPortsAreReadFromSysfs) {
  const auto root =
      std::filesystem::temp_directory_path() / ("holmes-ucx-ib-" + std::to_string(::getpid()));
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root / "mlx5_1" / "ports" / "1");
  std::filesystem::create_directories(root / "mlx5_0" / "ports" / "1");
  std::filesystem::create_directories(root / "mlx5_0" / "ports" / "2");
  std::filesystem::create_directories(root / "no_ports_dir");
  EXPECT_EQ(rdma_device_ports(root),
            (std::vector<std::string>{"mlx5_0:1", "mlx5_0:2", "mlx5_1:1"}));
  std::filesystem::remove_all(root);
  EXPECT_TRUE(rdma_device_ports(root).empty());  // no such directory: no devices
}

TEST(Lanes, PrintInfoIsSummarised) {
  const std::string shared_memory =
      "#\n# UCP endpoint \n#\n#               peer: <no debug data>\n"
      "#                 lane[0]:  2:sysv/memory.0 md[2]           -> md[2]/sysv/sysdev[255] am "
      "am_bw#0\n"
      "#                 lane[1]:  4:cma/memory.0 md[4]            -> md[4]/cma/sysdev[255] "
      "rma_bw#0\n#\n"
      "#                 am_send: 0..<egr/short>..93..<egr/bcopy>..8256..<rndv>..(inf)\n";
  EXPECT_EQ(describe_lanes(shared_memory), "sysv/memory (am, am_bw) + cma/memory (rma_bw)");
  const std::string infiniband =
      "#                 lane[0]:  6:rc_mlx5/mlx5_0:1.0 md[4]      -> md[4]/ib/sysdev[255] "
      "rma_bw#0 "
      "am am_bw#0 wireup\n"
      "#                 lane[1]:  9:ud_mlx5/mlx5_0:1.0 md[4]      -> md[4]/ib/sysdev[255] "
      "wireup{ud}\n";
  EXPECT_EQ(describe_lanes(infiniband),
            "rc_mlx5/mlx5_0:1 (rma_bw, am, am_bw, wireup) + ud_mlx5/mlx5_0:1 (wireup{ud})");
  EXPECT_EQ(describe_lanes("# UCP endpoint\n#  peer: <no debug data>\n"), "");
  EXPECT_EQ(describe_lanes(""), "");
}

TEST(Lanes, VersionIsTheLibraryVersion) {
  const auto version = ucx_version();
  EXPECT_GE(version.major, 1u);
  EXPECT_EQ(version, (UcxVersion{UCP_API_MAJOR, UCP_API_MINOR}));
}

}  // namespace
}  // namespace holmes::ucx
