// Port discovery and GID selection (src/transports/verbs/port_discovery.hpp) over fake
// /sys/class/infiniband trees: InfiniBand and RoCE ports, RoCE v1/v2 GID tables, down ports,
// several devices, the HOLMES_IB_DEVICE / HOLMES_IB_GID_INDEX overrides and malformed files.
#include "transports/verbs/port_discovery.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "communicator/transport_setup.hpp"
#include "core/settings.hpp"
#include "core/status.hpp"
#include "transports/verbs/config.hpp"

namespace holmes::verbs {
namespace {

namespace fs = std::filesystem;

constexpr const char* kIbGid0 = "fe80:0000:0000:0000:0002:c903:0031:7b11";
constexpr const char* kLinkLocal = "fe80:0000:0000:0000:0202:c9ff:fe31:7b11";
constexpr const char* kIpv4 = "0000:0000:0000:0000:0000:ffff:0a01:0203";  // ::ffff:10.1.2.3
constexpr const char* kIpv6 = "2001:0db8:0000:0000:0000:0000:0000:0042";
constexpr const char* kZero = "0000:0000:0000:0000:0000:0000:0000:0000";

// A fake /sys/class/infiniband in a temporary directory, removed afterwards.
class SysfsTree {
 public:
  SysfsTree() {
    static std::atomic<int> counter{0};
    root_ = fs::temp_directory_path() /
            ("holmes-verbs-sysfs-" + std::to_string(::getpid()) + "-" + std::to_string(++counter));
    fs::create_directories(root_);
  }
  ~SysfsTree() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  const fs::path& root() const { return root_; }

  void write(const fs::path& relative, const std::string& text) {
    const auto path = root_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  // A port with the files the kernel writes.
  void port(const std::string& device, int port, const std::string& state,
            const std::string& link_layer, const std::string& lid = "0x1",
            const std::string& rate = "100 Gb/sec (4X EDR)") {
    const fs::path dir = fs::path(device) / "ports" / std::to_string(port);
    write(dir / "state", state + "\n");
    write(dir / "phys_state", "5: LinkUp\n");
    write(dir / "link_layer", link_layer + "\n");
    write(dir / "lid", lid + "\n");
    write(dir / "rate", rate + "\n");
    fs::create_directories(root_ / dir / "gids");
  }
  void gid(const std::string& device, int port, int index, const std::string& gid,
           const std::string& type = "", const std::string& netdev = "") {
    const fs::path dir = fs::path(device) / "ports" / std::to_string(port);
    write(dir / "gids" / std::to_string(index), gid + "\n");
    if (!type.empty()) write(dir / "gid_attrs" / "types" / std::to_string(index), type + "\n");
    if (!netdev.empty()) write(dir / "gid_attrs" / "ndevs" / std::to_string(index), netdev + "\n");
  }
  void ib_port(const std::string& device, int port, const std::string& state = "4: ACTIVE",
               const std::string& lid = "0x1a") {
    this->port(device, port, state, "InfiniBand", lid);
    gid(device, port, 0, kIbGid0, "IB/RoCE v1");
  }
  // A RoCE port with the usual table: link-local v1/v2 at 0/1, IPv4-mapped v1/v2 at 2/3.
  void roce_port(const std::string& device, int port, const std::string& state = "4: ACTIVE") {
    this->port(device, port, state, "Ethernet", "0x0", "100 Gb/sec (4X EDR)");
    gid(device, port, 0, kLinkLocal, "IB/RoCE v1", "eth0");
    gid(device, port, 1, kLinkLocal, "RoCE v2", "eth0");
    gid(device, port, 2, kIpv4, "IB/RoCE v1", "eth0");
    gid(device, port, 3, kIpv4, "RoCE v2", "eth0");
  }

 private:
  fs::path root_;
};

// Sets an environment variable for one test and restores it afterwards.
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

template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no holmes::Error thrown";
  return Error(HM_SUCCESS, "");
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---- parsing single values -------------------------------------------------------------------

TEST(VerbsSysfsParse, PortState) {
  EXPECT_EQ(parse_port_state("4: ACTIVE\n"), 4);
  EXPECT_EQ(parse_port_state("1: DOWN"), 1);
  EXPECT_EQ(parse_port_state("2: INIT"), 2);
  EXPECT_EQ(parse_port_state("ACTIVE"), std::nullopt);
  EXPECT_EQ(parse_port_state("4"), std::nullopt);
  EXPECT_EQ(parse_port_state("4:"), std::nullopt);
  EXPECT_EQ(parse_port_state("9: WEIRD"), std::nullopt);
  EXPECT_EQ(parse_port_state(""), std::nullopt);
}

TEST(VerbsSysfsParse, LinkLayer) {
  EXPECT_EQ(parse_link_layer("InfiniBand\n"), LinkLayer::kInfiniBand);
  EXPECT_EQ(parse_link_layer("Ethernet"), LinkLayer::kEthernet);
  EXPECT_EQ(parse_link_layer("Token Ring"), std::nullopt);
  EXPECT_EQ(parse_link_layer("ethernet"), std::nullopt);
}

TEST(VerbsSysfsParse, Rate) {
  EXPECT_EQ(parse_rate("100 Gb/sec (4X EDR)\n"), 100.0);
  EXPECT_EQ(parse_rate("2.5 Gb/sec (1X SDR)"), 2.5);
  EXPECT_EQ(parse_rate("56 Gb/sec (4X FDR)"), 56.0);
  EXPECT_EQ(parse_rate("400 Gb/sec (4X NDR)"), 400.0);
  EXPECT_EQ(parse_rate("fast"), std::nullopt);
  EXPECT_EQ(parse_rate("100"), std::nullopt);
  EXPECT_EQ(parse_rate("-5 Gb/sec"), std::nullopt);
}

TEST(VerbsSysfsParse, Lid) {
  EXPECT_EQ(parse_lid("0x1a\n"), 26);
  EXPECT_EQ(parse_lid("0x0"), 0);
  EXPECT_EQ(parse_lid("0xffff"), 0xffff);
  EXPECT_EQ(parse_lid("0x10000"), std::nullopt);
  EXPECT_EQ(parse_lid("26"), std::nullopt);
  EXPECT_EQ(parse_lid("0x"), std::nullopt);
  EXPECT_EQ(parse_lid("0xzz"), std::nullopt);
}

TEST(VerbsSysfsParse, GidRoundTripAndClassification) {
  const auto ib = parse_gid(kIbGid0);
  ASSERT_TRUE(ib.has_value());
  EXPECT_EQ(format_gid(*ib), kIbGid0);
  EXPECT_EQ((*ib)[0], 0xfe);
  EXPECT_EQ((*ib)[15], 0x11);
  EXPECT_TRUE(gid_is_link_local(*ib));
  EXPECT_FALSE(gid_is_ipv4_mapped(*ib));
  EXPECT_EQ(gid_subnet_prefix(*ib), 0xfe80000000000000ull);
  const auto v4 = parse_gid(kIpv4);
  ASSERT_TRUE(v4.has_value());
  EXPECT_TRUE(gid_is_ipv4_mapped(*v4));
  EXPECT_FALSE(gid_is_link_local(*v4));
  EXPECT_EQ((*v4)[12], 10);
  EXPECT_EQ((*v4)[15], 3);
  EXPECT_TRUE(gid_is_zero(*parse_gid(kZero)));
  EXPECT_FALSE(gid_is_zero(*v4));
  EXPECT_EQ(parse_gid("fe80::1"), std::nullopt);                                  // compressed
  EXPECT_EQ(parse_gid("fe80:0000:0000:0000:0002:c903:0031:7b1"), std::nullopt);   // short
  EXPECT_EQ(parse_gid("fe80:0000:0000:0000:0002:c903:0031:7b1g"), std::nullopt);  // not hex
  EXPECT_EQ(parse_gid("fe80-0000:0000:0000:0002:c903:0031:7b11"), std::nullopt);  // separator
}

TEST(VerbsSysfsParse, GidType) {
  EXPECT_EQ(parse_gid_type("IB/RoCE v1\n"), GidType::kIbOrRoceV1);
  EXPECT_EQ(parse_gid_type("RoCE v2"), GidType::kRoceV2);
  EXPECT_EQ(parse_gid_type("RoCE v3"), std::nullopt);
}

// ---- rates and MTUs --------------------------------------------------------------------------

TEST(VerbsPortAttributes, RateFromSpeedAndWidthCodes) {
  // (active_speed, active_width) -> Gbit/s, as ibstat reports them.
  EXPECT_EQ(rate_from_codes(1, 1), 2.5);      // SDR 1x
  EXPECT_EQ(rate_from_codes(2, 2), 20.0);     // DDR 4x
  EXPECT_EQ(rate_from_codes(4, 2), 40.0);     // QDR 4x
  EXPECT_EQ(rate_from_codes(4, 8), 120.0);    // QDR 12x
  EXPECT_EQ(rate_from_codes(8, 2), 40.0);     // FDR10 4x
  EXPECT_EQ(rate_from_codes(16, 2), 56.0);    // FDR 4x
  EXPECT_EQ(rate_from_codes(32, 2), 100.0);   // EDR 4x
  EXPECT_EQ(rate_from_codes(32, 1), 25.0);    // EDR 1x (25 GbE RoCE)
  EXPECT_EQ(rate_from_codes(64, 2), 200.0);   // HDR 4x
  EXPECT_EQ(rate_from_codes(64, 16), 100.0);  // HDR 2x
  EXPECT_EQ(rate_from_codes(128, 2), 400.0);  // NDR 4x
  EXPECT_EQ(rate_from_codes(128, 4), 800.0);  // NDR 8x
  EXPECT_EQ(rate_from_codes(3, 2), std::nullopt);
  EXPECT_EQ(rate_from_codes(32, 3), std::nullopt);
  EXPECT_EQ(rate_from_codes(0, 0), std::nullopt);
}

TEST(VerbsPortAttributes, MtuCodes) {
  EXPECT_EQ(mtu_bytes(1), 256);
  EXPECT_EQ(mtu_bytes(3), 1024);
  EXPECT_EQ(mtu_bytes(5), 4096);
  EXPECT_EQ(mtu_bytes(0), 0);
  EXPECT_EQ(mtu_bytes(6), 0);
  EXPECT_STREQ(port_state_name(4), "ACTIVE");
  EXPECT_STREQ(port_state_name(1), "DOWN");
}

// ---- scanning trees --------------------------------------------------------------------------

TEST(VerbsSysfsScan, InfiniBandPort) {
  SysfsTree tree;
  tree.ib_port("mlx5_0", 1);
  const auto ports = scan_sysfs(tree.root());
  ASSERT_EQ(ports.size(), 1u);
  const auto& p = ports[0];
  EXPECT_EQ(p.name(), "mlx5_0:1");
  EXPECT_EQ(p.link_layer, LinkLayer::kInfiniBand);
  EXPECT_EQ(p.state, kPortActive);
  EXPECT_EQ(p.state_name, "ACTIVE");
  EXPECT_EQ(p.lid, 0x1a);
  EXPECT_EQ(p.rate_gbps, 100.0);
  EXPECT_EQ(p.problem, "");
  ASSERT_EQ(p.gids.size(), 1u);
  EXPECT_EQ(p.gids[0].index, 0);
  EXPECT_EQ(format_gid(p.gids[0].gid), kIbGid0);
  EXPECT_EQ(p.gids[0].type, GidType::kIbOrRoceV1);
  const auto choice = choose_port(ports, std::nullopt, std::nullopt, 0);
  EXPECT_EQ(choice.port.name(), "mlx5_0:1");
  EXPECT_EQ(choice.gid.index, 0);
}

TEST(VerbsSysfsScan, RoceGidTableSkipsEmptyEntriesAndReadsTypes) {
  SysfsTree tree;
  tree.roce_port("mlx5_0", 1);
  tree.gid("mlx5_0", 1, 4, kZero);             // an empty entry: skipped
  tree.gid("mlx5_0", 1, 5, kIpv6);             // type unreadable (no types/5 file): unknown
  tree.gid("mlx5_0", 1, 6, "not a gid");       // malformed: skipped
  tree.gid("mlx5_0", 1, 7, kIpv4, "RoCE v9");  // unknown type text: unknown
  const auto ports = scan_sysfs(tree.root());
  ASSERT_EQ(ports.size(), 1u);
  const auto& gids = ports[0].gids;
  ASSERT_EQ(gids.size(), 6u);
  EXPECT_EQ(gids[0].index, 0);
  EXPECT_EQ(gids[3].index, 3);
  EXPECT_EQ(gids[3].type, GidType::kRoceV2);
  EXPECT_EQ(gids[3].netdev, "eth0");
  EXPECT_EQ(gids[4].index, 5);
  EXPECT_EQ(gids[4].type, GidType::kUnknown);
  EXPECT_EQ(gids[4].netdev, "");
  EXPECT_EQ(gids[5].index, 7);
  EXPECT_EQ(gids[5].type, GidType::kUnknown);
  EXPECT_EQ(ports[0].lid, 0);
  EXPECT_EQ(ports[0].problem, "");
}

TEST(VerbsSysfsScan, MissingOrEmptyRootFindsNothing) {
  EXPECT_TRUE(scan_sysfs("/nonexistent/holmes/infiniband").empty());
  SysfsTree tree;
  EXPECT_TRUE(scan_sysfs(tree.root()).empty());
  const auto e = error_of([&] { choose_port({}, std::nullopt, std::nullopt, 0); });
  EXPECT_EQ(e.status(), HM_ERR_UNSUPPORTED);
  EXPECT_TRUE(contains(e.what(), "no RDMA device found")) << e.what();
}

TEST(VerbsSysfsScan, SeveralDevicesAndPortsAreSorted) {
  SysfsTree tree;
  tree.ib_port("mlx5_1", 2);
  tree.ib_port("mlx5_1", 1);
  tree.ib_port("mlx5_0", 1);
  tree.write("mlx5_0/ports/notaport/state", "4: ACTIVE\n");  // ignored
  const auto ports = scan_sysfs(tree.root());
  ASSERT_EQ(ports.size(), 3u);
  EXPECT_EQ(ports[0].name(), "mlx5_0:1");
  EXPECT_EQ(ports[1].name(), "mlx5_1:1");
  EXPECT_EQ(ports[2].name(), "mlx5_1:2");
}

TEST(VerbsSysfsScan, MalformedFilesMakeThePortUnusableWithAReason) {
  SysfsTree tree;
  tree.ib_port("bad_state", 1);
  tree.write("bad_state/ports/1/state", "garbage\n");
  tree.ib_port("bad_layer", 1);
  tree.write("bad_layer/ports/1/link_layer", "Token Ring\n");
  tree.ib_port("bad_lid", 1);
  tree.write("bad_lid/ports/1/lid", "zz\n");
  tree.ib_port("no_state", 1);
  fs::remove(tree.root() / "no_state/ports/1/state");
  tree.ib_port("bad_rate", 1);
  tree.write("bad_rate/ports/1/rate", "very fast\n");  // informational only: still usable
  const auto ports = scan_sysfs(tree.root());
  ASSERT_EQ(ports.size(), 5u);
  auto find = [&](const std::string& device) {
    for (const auto& p : ports) {
      if (p.device == device) return p;
    }
    ADD_FAILURE() << device;
    return PortInfo{};
  };
  EXPECT_EQ(find("bad_state").problem, "its state file is 'garbage'");
  EXPECT_EQ(find("bad_layer").problem, "its link_layer file is 'Token Ring'");
  EXPECT_EQ(find("bad_lid").problem, "its lid file is 'zz'");
  EXPECT_EQ(find("no_state").problem, "its state file is unreadable");
  EXPECT_EQ(find("bad_rate").problem, "");
  EXPECT_EQ(find("bad_rate").rate_gbps, 0.0);
  // Only the port with a bad rate file can be chosen.
  EXPECT_EQ(choose_port(ports, std::nullopt, std::nullopt, 0).port.device, "bad_rate");
  EXPECT_EQ(choose_port(ports, std::nullopt, std::nullopt, 3).port.device, "bad_rate");
  const auto e = error_of([&] { choose_port(ports, std::string("bad_lid:1"), std::nullopt, 0); });
  EXPECT_EQ(e.status(), HM_ERR_UNSUPPORTED);
  EXPECT_TRUE(contains(e.what(), "its lid file is 'zz'")) << e.what();
}

// ---- choosing the GID ------------------------------------------------------------------------

TEST(VerbsGidChoice, RoceV2Ipv4MappedWins) {
  SysfsTree tree;
  tree.roce_port("mlx5_0", 1);
  const auto ports = scan_sysfs(tree.root());
  const auto choice = choose_port(ports, std::nullopt, std::nullopt, 0);
  EXPECT_EQ(choice.gid.index, 3);
  EXPECT_EQ(choice.gid.type, GidType::kRoceV2);
  EXPECT_TRUE(gid_is_ipv4_mapped(choice.gid.gid));
}

TEST(VerbsGidChoice, Ipv4BeforeGlobalIpv6BeforeLinkLocal) {
  SysfsTree tree;
  tree.port("mlx5_0", 1, "4: ACTIVE", "Ethernet", "0x0");
  tree.gid("mlx5_0", 1, 0, kLinkLocal, "RoCE v2");
  tree.gid("mlx5_0", 1, 1, kIpv6, "RoCE v2");
  tree.gid("mlx5_0", 1, 2, kIpv4, "RoCE v2");
  EXPECT_EQ(choose_gid(scan_sysfs(tree.root())[0], std::nullopt).index, 2);
  fs::remove(tree.root() / "mlx5_0/ports/1/gids/2");
  EXPECT_EQ(choose_gid(scan_sysfs(tree.root())[0], std::nullopt).index, 1);
  fs::remove(tree.root() / "mlx5_0/ports/1/gids/1");
  EXPECT_EQ(choose_gid(scan_sysfs(tree.root())[0], std::nullopt).index, 0);
}

TEST(VerbsGidChoice, RoceV1OnlyStillWorks) {
  SysfsTree tree;
  tree.port("mlx4_0", 1, "4: ACTIVE", "Ethernet", "0x0");
  tree.gid("mlx4_0", 1, 0, kLinkLocal, "IB/RoCE v1");
  tree.gid("mlx4_0", 1, 1, kIpv4, "IB/RoCE v1");
  const auto gid = choose_gid(scan_sysfs(tree.root())[0], std::nullopt);
  EXPECT_EQ(gid.index, 1);
  EXPECT_EQ(gid.type, GidType::kIbOrRoceV1);
}

TEST(VerbsGidChoice, V2BeforeV1EvenAtAHigherIndex) {
  SysfsTree tree;
  tree.port("mlx5_0", 1, "4: ACTIVE", "Ethernet", "0x0");
  tree.gid("mlx5_0", 1, 0, kIpv4, "IB/RoCE v1");
  tree.gid("mlx5_0", 1, 9, kLinkLocal, "RoCE v2");
  EXPECT_EQ(choose_gid(scan_sysfs(tree.root())[0], std::nullopt).index, 9);
}

TEST(VerbsGidChoice, InfiniBandUsesGidZero) {
  SysfsTree tree;
  tree.ib_port("mlx5_0", 1);
  tree.gid("mlx5_0", 1, 1, kIpv6, "IB/RoCE v1");
  EXPECT_EQ(choose_gid(scan_sysfs(tree.root())[0], std::nullopt).index, 0);
}

TEST(VerbsGidChoice, IndexOverride) {
  SysfsTree tree;
  tree.roce_port("mlx5_0", 1);
  const auto ports = scan_sysfs(tree.root());
  EXPECT_EQ(choose_port(ports, std::nullopt, 2, 0).gid.index, 2);  // v1 on request
  EXPECT_EQ(choose_port(ports, std::nullopt, 0, 0).gid.index, 0);
  const auto e = error_of([&] { choose_port(ports, std::nullopt, 7, 0); });
  EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(e.what()),
            "HOLMES_IB_GID_INDEX=7: mlx5_0:1 has no non-zero GID at that index (non-zero "
            "entries: 0, 1, 2, 3)");
}

TEST(VerbsGidChoice, RocePortWithoutAddressIsUnusable) {
  SysfsTree tree;
  tree.port("mlx5_0", 1, "4: ACTIVE", "Ethernet", "0x0");
  tree.gid("mlx5_0", 1, 0, kZero, "IB/RoCE v1");
  const auto ports = scan_sysfs(tree.root());
  const auto e = error_of([&] { choose_port(ports, std::nullopt, std::nullopt, 0); });
  EXPECT_EQ(e.status(), HM_ERR_UNSUPPORTED);
  EXPECT_TRUE(contains(e.what(), "mlx5_0:1 has no non-zero GID (RoCE needs an IP address"))
      << e.what();
}

// ---- choosing the port -----------------------------------------------------------------------

TEST(VerbsPortChoice, DownPortsAreSkipped) {
  SysfsTree tree;
  tree.ib_port("mlx5_0", 1, "1: DOWN");
  tree.ib_port("mlx5_1", 1);
  EXPECT_EQ(choose_port(scan_sysfs(tree.root()), std::nullopt, std::nullopt, 0).port.name(),
            "mlx5_1:1");
}

TEST(VerbsPortChoice, NoActivePortSaysWhichPortsExist) {
  SysfsTree tree;
  tree.ib_port("mlx5_0", 1, "1: DOWN");
  tree.ib_port("mlx5_1", 1, "2: INIT");
  const auto e =
      error_of([&] { choose_port(scan_sysfs(tree.root()), std::nullopt, std::nullopt, 0); });
  EXPECT_EQ(e.status(), HM_ERR_UNSUPPORTED);
  EXPECT_EQ(std::string(e.what()),
            "no usable ACTIVE RDMA port (mlx5_0:1 (InfiniBand, DOWN): not ACTIVE; mlx5_1:1 "
            "(InfiniBand, INIT): not ACTIVE)");
}

TEST(VerbsPortChoice, InfiniBandWithoutLidIsUnusable) {
  SysfsTree tree;
  tree.ib_port("mlx5_0", 1, "4: ACTIVE", "0x0");
  const auto e =
      error_of([&] { choose_port(scan_sysfs(tree.root()), std::nullopt, std::nullopt, 0); });
  EXPECT_TRUE(contains(e.what(), "no LID (is a subnet manager running?)")) << e.what();
}

TEST(VerbsPortChoice, LocalRanksSpreadOverPorts) {
  SysfsTree tree;
  for (int i = 0; i < 4; ++i) tree.ib_port("mlx5_" + std::to_string(i), 1);
  tree.ib_port("mlx5_4", 1, "1: DOWN");
  const auto ports = scan_sysfs(tree.root());
  EXPECT_EQ(choose_port(ports, std::nullopt, std::nullopt, 0).port.device, "mlx5_0");
  EXPECT_EQ(choose_port(ports, std::nullopt, std::nullopt, 1).port.device, "mlx5_1");
  EXPECT_EQ(choose_port(ports, std::nullopt, std::nullopt, 3).port.device, "mlx5_3");
  EXPECT_EQ(choose_port(ports, std::nullopt, std::nullopt, 5).port.device, "mlx5_1");
  EXPECT_EQ(choose_port(ports, std::nullopt, std::nullopt, -2).port.device, "mlx5_0");
}

TEST(VerbsPortChoice, InfiniBandPreferredOverRoce) {
  SysfsTree tree;
  tree.roce_port("mlx5_0", 1);
  tree.ib_port("mlx5_1", 1);
  tree.ib_port("mlx5_2", 1);
  const auto ports = scan_sysfs(tree.root());
  EXPECT_EQ(choose_port(ports, std::nullopt, std::nullopt, 0).port.device, "mlx5_1");
  EXPECT_EQ(choose_port(ports, std::nullopt, std::nullopt, 1).port.device, "mlx5_2");
  // A RoCE-only host uses RoCE.
  SysfsTree roce;
  roce.roce_port("mlx5_0", 1);
  roce.ib_port("mlx5_1", 1, "1: DOWN");
  EXPECT_EQ(choose_port(scan_sysfs(roce.root()), std::nullopt, std::nullopt, 1).port.device,
            "mlx5_0");
}

TEST(VerbsPortChoice, DeviceOverride) {
  SysfsTree tree;
  tree.ib_port("mlx5_0", 1);
  tree.ib_port("mlx5_1", 1, "1: DOWN");
  tree.ib_port("mlx5_1", 2);
  tree.roce_port("mlx5_2", 1);
  tree.ib_port("mlx5_3", 1);
  const auto ports = scan_sysfs(tree.root());
  EXPECT_EQ(choose_port(ports, std::string("mlx5_3:1"), std::nullopt, 0).port.name(), "mlx5_3:1");
  // A device without a port: its first usable port.
  EXPECT_EQ(choose_port(ports, std::string("mlx5_1"), std::nullopt, 0).port.name(), "mlx5_1:2");
  // A list: spread by local rank, RoCE allowed when named.
  EXPECT_EQ(choose_port(ports, std::string("mlx5_2,mlx5_3"), std::nullopt, 0).port.name(),
            "mlx5_2:1");
  EXPECT_EQ(choose_port(ports, std::string("mlx5_2, mlx5_3:1"), std::nullopt, 3).port.name(),
            "mlx5_3:1");
  EXPECT_EQ(choose_port(ports, std::string("mlx5_2"), std::nullopt, 0).gid.index, 3);
}

TEST(VerbsPortChoice, DeviceOverrideErrors) {
  SysfsTree tree;
  tree.ib_port("mlx5_0", 1);
  tree.ib_port("mlx5_1", 1, "1: DOWN");
  const auto ports = scan_sysfs(tree.root());
  auto e = error_of([&] { choose_port(ports, std::string("mlx5_9"), std::nullopt, 0); });
  EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(e.what()),
            "HOLMES_IB_DEVICE names mlx5_9, which is not an RDMA device of this host (found: "
            "mlx5_0, mlx5_1)");
  e = error_of([&] { choose_port(ports, std::string("mlx5_0:2"), std::nullopt, 0); });
  EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(e.what()), "HOLMES_IB_DEVICE names mlx5_0:2, but mlx5_0 has ports 1");
  e = error_of([&] { choose_port(ports, std::string("mlx5_1:1"), std::nullopt, 0); });
  EXPECT_EQ(e.status(), HM_ERR_UNSUPPORTED);
  EXPECT_EQ(std::string(e.what()),
            "HOLMES_IB_DEVICE names mlx5_1:1 (InfiniBand, DOWN), which cannot be used: not ACTIVE");
  e = error_of([&] { choose_port(ports, std::string("mlx5_1"), std::nullopt, 0); });
  EXPECT_EQ(e.status(), HM_ERR_UNSUPPORTED);
  EXPECT_EQ(std::string(e.what()),
            "HOLMES_IB_DEVICE names mlx5_1, which has no usable ACTIVE port: mlx5_1:1 "
            "(InfiniBand, DOWN): not ACTIVE");
}

TEST(VerbsPortChoice, MalformedDeviceSpecs) {
  for (const char* bad : {"", ",", "mlx5_0,", "mlx5_0:x", "mlx5_0:0", "mlx5_0:256", ":1", "mlx5 0",
                          "mlx5_0:1:2", "mlx5_0;1"}) {
    const auto e = error_of([&] { parse_device_spec(bad); });
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_TRUE(contains(e.what(), "HOLMES_IB_DEVICE")) << e.what();
  }
  const auto specs = parse_device_spec("mlx5_0:1,bnxt_re0, mlx5_bond_0");
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].device, "mlx5_0");
  EXPECT_EQ(specs[0].port, 1);
  EXPECT_EQ(specs[1].device, "bnxt_re0");
  EXPECT_EQ(specs[1].port, 0);
  EXPECT_EQ(specs[2].device, "mlx5_bond_0");
}

// ---- the environment (read by the communicator's settings, handed to the transport) ---------

PortPreferences read_port_preferences() {
  return detail::port_preferences(Settings::from_environment());
}
VerbsConfig read_verbs_config() { return detail::verbs_config(Settings::from_environment()); }

TEST(VerbsEnvironment, PortPreferencesComeFromTheEnvironment) {
  ScopedEnv device("HOLMES_IB_DEVICE", "mlx5_2:1");
  ScopedEnv gid("HOLMES_IB_GID_INDEX", "3");
  ScopedEnv holmes_local("HOLMES_LOCAL_RANK", "5");
  const auto prefs = read_port_preferences();
  EXPECT_EQ(prefs.device, "mlx5_2:1");
  EXPECT_EQ(prefs.gid_index, 3);
  EXPECT_EQ(prefs.local_rank, 5);
}

TEST(VerbsEnvironment, UnsetMeansAutomatic) {
  ScopedEnv device("HOLMES_IB_DEVICE", nullptr);
  ScopedEnv gid("HOLMES_IB_GID_INDEX", nullptr);
  const auto prefs = read_port_preferences();
  EXPECT_EQ(prefs.device, std::nullopt);
  EXPECT_EQ(prefs.gid_index, std::nullopt);
}

TEST(VerbsEnvironment, MalformedValuesNameTheVariable) {
  {
    ScopedEnv gid("HOLMES_IB_GID_INDEX", "three");
    const auto e = error_of([] { read_port_preferences(); });
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(e.what(), "HOLMES_IB_GID_INDEX")) << e.what();
  }
  {
    ScopedEnv slots("HOLMES_IB_SLOTS", "2");
    const auto e = error_of([] { read_verbs_config(); });
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(e.what(), "HOLMES_IB_SLOTS")) << e.what();
  }
  ScopedEnv slots("HOLMES_IB_SLOTS", "64");
  ScopedEnv bytes("HOLMES_IB_SLOT_BYTES", "131072");
  ScopedEnv timeout("HOLMES_IB_TIMEOUT", "14");
  const auto config = read_verbs_config();
  EXPECT_EQ(config.data_slots, 64u);
  EXPECT_EQ(config.slot_bytes, 131072u);
  EXPECT_EQ(config.ack_timeout, 14);
  EXPECT_EQ(config.retry_count, 7);
}

}  // namespace
}  // namespace holmes::verbs
