// Locality: fabric discovery from a fake sysfs tree, and the environment overrides that let
// ranks describe an emulated cluster.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/settings.hpp"
#include "core/status.hpp"
#include "topology/locality.hpp"

namespace holmes {
namespace {

namespace fs = std::filesystem;

class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / fs::path("holmes-sysfs-" + std::to_string(::getpid()) +
                                                 "-" + std::to_string(counter_++));
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void port(const std::string& device, int number, const std::string& state,
            const std::string& layer, const std::string& gid) {
    const auto dir = root_ / "class" / "infiniband" / device / "ports" / std::to_string(number);
    fs::create_directories(dir / "gids");
    std::ofstream(dir / "state") << state << "\n";
    std::ofstream(dir / "link_layer") << layer << "\n";
    std::ofstream(dir / "gids" / "0") << gid << "\n";
  }
  fs::path root_;
  static inline int counter_ = 0;
};

TEST_F(FakeSysfs, NoDevicesMeansEthernet) {
  const auto f = discover_fabric(root_.string());
  EXPECT_EQ(f.fabric, "ethernet");
  EXPECT_EQ(f.subnet, "");
}

TEST_F(FakeSysfs, ActiveInfiniBandPort) {
  port("mlx5_0", 1, "4: ACTIVE", "InfiniBand", "fe80:0000:0000:0001:0002:c903:00a0:1234");
  const auto f = discover_fabric(root_.string());
  EXPECT_EQ(f.fabric, "ib");
  EXPECT_EQ(f.subnet, "fe80:0000:0000:0001");
}

TEST_F(FakeSysfs, RoceWhenOnlyEthernetLinkLayerIsActive) {
  port("mlx5_0", 1, "1: DOWN", "InfiniBand", "fe80:0000:0000:0000:0000:0000:0000:0001");
  port("mlx5_1", 1, "4: ACTIVE", "Ethernet", "fe80:0000:0000:0000:0a00:0002:0000:0001");
  const auto f = discover_fabric(root_.string());
  EXPECT_EQ(f.fabric, "roce");
}

TEST_F(FakeSysfs, DownPortsAreIgnored) {
  port("mlx5_0", 1, "1: DOWN", "InfiniBand", "fe80::1");
  EXPECT_EQ(discover_fabric(root_.string()).fabric, "ethernet");
}

class LocalityEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"HOLMES_HOST", "HOLMES_ISLAND", "HOLMES_FABRIC"}) ::unsetenv(v);
  }
  void TearDown() override { SetUp(); }
};

TEST_F(LocalityEnv, EnvironmentOverridesDiscovery) {
  ::setenv("HOLMES_HOST", "node-7", 1);
  ::setenv("HOLMES_ISLAND", "roce-east", 1);
  ::setenv("HOLMES_FABRIC", "roce", 1);
  const auto l = local_locality(LocalOverrides::from_settings(Settings::from_environment()));
  EXPECT_EQ(l.host, "node-7");
  EXPECT_EQ(l.island, "roce-east");
  EXPECT_EQ(l.fabric, "roce");
  EXPECT_TRUE(l.rdma());
}

TEST_F(LocalityEnv, EthernetHostIsItsOwnIsland) {
  ::setenv("HOLMES_HOST", "node-3", 1);
  ::setenv("HOLMES_FABRIC", "ethernet", 1);
  const auto l = local_locality(LocalOverrides::from_settings(Settings::from_environment()));
  EXPECT_EQ(l.island, "node-3");
  EXPECT_FALSE(l.rdma());
}

TEST_F(LocalityEnv, DefaultHostIsStableAndNonEmpty) {
  const auto a = local_locality(LocalOverrides::from_settings(Settings::from_environment()));
  const auto b = local_locality(LocalOverrides::from_settings(Settings::from_environment()));
  EXPECT_FALSE(a.host.empty());
  EXPECT_EQ(a.host, b.host);
}

TEST_F(LocalityEnv, UnknownFabricIsRefused) {
  ::setenv("HOLMES_FABRIC", "carrier-pigeon", 1);
  try {
    local_locality(LocalOverrides::from_settings(Settings::from_environment()));
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("HOLMES_FABRIC"), std::string::npos);
  }
}

}  // namespace
}  // namespace holmes
