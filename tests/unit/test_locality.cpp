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

// The machine and its CPUs are discovered whatever the overrides say: emulated hosts of one
// machine share its cores.
TEST_F(LocalityEnv, MachineAndCpusIgnoreTheOverrides) {
  const auto real = local_locality(LocalOverrides::from_settings(Settings::from_environment()));
  ::setenv("HOLMES_HOST", "emulated-7", 1);
  const auto emulated = local_locality(LocalOverrides::from_settings(Settings::from_environment()));
  EXPECT_EQ(emulated.host, "emulated-7");
  EXPECT_FALSE(real.machine.empty());
  EXPECT_EQ(emulated.machine, real.machine);
  EXPECT_EQ(real.host, real.machine);
  EXPECT_FALSE(emulated.cpus.empty());
  EXPECT_EQ(emulated.cpus, real.cpus);
}

Locality on(const std::string& machine, std::vector<int> cpus) {
  Locality l{"h", "i", "ethernet"};
  l.machine = machine;
  l.cpus = std::move(cpus);
  return l;
}

TEST(RanksPerCore, CountsTheMostCrowdedMachine) {
  // Six ranks on a 2-core machine (the emulated clusters here).
  EXPECT_DOUBLE_EQ(ranks_per_core(std::vector<Locality>(6, on("m", {0, 1}))), 3.0);
  // Eight ranks, each pinned to its own core: none waits.
  std::vector<Locality> pinned;
  for (int c = 0; c < 8; ++c) pinned.push_back(on("m", {c}));
  EXPECT_DOUBLE_EQ(ranks_per_core(pinned), 1.0);
  // Two machines: 4 ranks on 2 cores, 2 ranks on 4 cores.
  std::vector<Locality> mixed(4, on("a", {0, 1}));
  mixed.push_back(on("b", {0, 1, 2, 3}));
  mixed.push_back(on("b", {0, 1, 2, 3}));
  EXPECT_DOUBLE_EQ(ranks_per_core(mixed), 2.0);
  // Fewer ranks than cores, or nothing known: 1.
  EXPECT_DOUBLE_EQ(ranks_per_core({on("m", {0, 1, 2, 3})}), 1.0);
  EXPECT_DOUBLE_EQ(ranks_per_core(std::vector<Locality>(6, on("", {}))), 1.0);
  EXPECT_DOUBLE_EQ(ranks_per_core(std::vector<Locality>(6, on("m", {}))), 1.0);
  EXPECT_DOUBLE_EQ(ranks_per_core({}), 1.0);
}

}  // namespace
}  // namespace holmes
