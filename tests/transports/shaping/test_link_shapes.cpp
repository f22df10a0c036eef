// Which links a communicator shapes, and to what, from the ranks' localities and the topology
// file: examples/topologies/emulated-two-islands.yaml (2 islands x 2 hosts x 2 ranks, scale
// 100), the same cluster at scale 1, and a job without a file. Expected rates are worked out
// here from the file's numbers.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "communicator/shaping.hpp"
#include "core/settings.hpp"
#include "core/status.hpp"
#include "topology/topology_file.hpp"

namespace holmes::detail {
namespace {

using std::chrono::nanoseconds;

const std::string kTwoIslands =
    std::string(HOLMES_EXAMPLE_TOPOLOGIES) + "/emulated-two-islands.yaml";

// The file's ranks, host by host: emu-ib-0 (ranks 0, 1), emu-ib-1, emu-roce-0, emu-roce-1.
std::vector<Locality> two_islands_job() {
  std::vector<Locality> out;
  for (const char* host : {"emu-ib-0", "emu-ib-1", "emu-roce-0", "emu-roce-1"}) {
    const bool ib = std::string(host).find("-ib-") != std::string::npos;
    for (int gpu = 0; gpu < 2; ++gpu) out.push_back({host, ib ? "ib" : "roce", ib ? "ib" : "roce"});
  }
  return out;
}

// Rates in bytes/s per rank: a link class's Gbit/s x NICs / scale / 2 ranks per host.
double per_rank(double gbit_per_s, int nics, double scale) {
  return gbit_per_s * 1e9 / 8 * nics / scale / 2;
}

// The mode HOLMES_SHAPING gives, as a communicator reads it.
ShapingMode mode() { return shaping_mode(Settings::from_environment()); }

// Scoped HOLMES_SHAPING.
class ShapingVariable {
 public:
  explicit ShapingVariable(const char* value) {
    if (const char* old = std::getenv("HOLMES_SHAPING")) old_ = old;
    if (value) {
      ::setenv("HOLMES_SHAPING", value, 1);
    } else {
      ::unsetenv("HOLMES_SHAPING");
    }
  }
  ~ShapingVariable() {
    if (old_) {
      ::setenv("HOLMES_SHAPING", old_->c_str(), 1);
    } else {
      ::unsetenv("HOLMES_SHAPING");
    }
  }

 private:
  std::optional<std::string> old_;
};

void expect_shape(const std::optional<LinkShape>& shape, double bytes_per_s, double latency_us,
                  const std::string& link_class, int peer) {
  ASSERT_TRUE(shape.has_value()) << "peer " << peer << " is not shaped";
  EXPECT_DOUBLE_EQ(shape->bytes_per_s, bytes_per_s) << "peer " << peer;
  EXPECT_EQ(shape->latency, nanoseconds(static_cast<long>(latency_us * 1000))) << "peer " << peer;
  EXPECT_NE(shape->origin.find("link class " + link_class + ":"), std::string::npos)
      << shape->origin;
}

TEST(LinkShapesTest, EmulatedTwoIslandsFromAnIbHost) {
  const auto file = topology::load_topology_file(kTwoIslands);
  const auto shapes = link_shapes(two_islands_job(), 0, &file, ShapingMode::kAuto);
  ASSERT_EQ(shapes.size(), 8u);
  EXPECT_FALSE(shapes[0]) << "this rank";
  EXPECT_FALSE(shapes[1]) << "same host: left as it is";
  // ib-hdr: 200 Gbit/s x 2 NICs of emu-ib-0 / 100 / 2 ranks = 2 Gbit/s, 2 us.
  for (int peer : {2, 3}) expect_shape(shapes[peer], per_rank(200, 2, 100), 2, "ib-hdr", peer);
  // eth-25 between islands: the host declares no NIC of it, so one: 25 / 100 / 2, 30 us.
  for (int peer : {4, 5, 6, 7})
    expect_shape(shapes[peer], per_rank(25, 1, 100), 30, "eth-25", peer);
  // One bucket per link class: the NICs a rank's traffic of that class leaves through.
  EXPECT_EQ(shapes[2]->bucket, shapes[3]->bucket);
  for (int peer : {5, 6, 7}) EXPECT_EQ(shapes[peer]->bucket, shapes[4]->bucket);
  EXPECT_NE(shapes[2]->bucket, shapes[4]->bucket);
  EXPECT_EQ(shapes[4]->origin,
            "link class eth-25: 25 Gbit/s x 1 NIC / scale 100 / 2 ranks of emu-ib-0");
  EXPECT_EQ(shapes[4]->describe(),
            "shaped to 0.125 Gbit/s + 30 us (link class eth-25: 25 Gbit/s x 1 NIC / scale 100 / "
            "2 ranks of emu-ib-0)");
}

TEST(LinkShapesTest, EmulatedTwoIslandsFromARoceHost) {
  const auto file = topology::load_topology_file(kTwoIslands);
  const auto shapes = link_shapes(two_islands_job(), 5, &file, ShapingMode::kAuto);
  for (int peer : {0, 1, 2, 3})
    expect_shape(shapes[peer], per_rank(25, 1, 100), 30, "eth-25", peer);
  EXPECT_FALSE(shapes[4]);
  EXPECT_FALSE(shapes[5]);
  // roce-100, one NIC on emu-roce-0: 100 / 100 / 2 = 0.5 Gbit/s, 4 us.
  for (int peer : {6, 7}) expect_shape(shapes[peer], per_rank(100, 1, 100), 4, "roce-100", peer);
}

TEST(LinkShapesTest, RanksOnHostOverridesTheCount) {
  const auto file = topology::load_topology_file(kTwoIslands);
  const auto shapes = link_shapes(two_islands_job(), 0, &file, ShapingMode::kAuto, 4);
  expect_shape(shapes[2], 200e9 / 8 * 2 / 100 / 4, 2, "ib-hdr", 2);
}

TEST(LinkShapesTest, OffWhenTheScaleIsOneUnlessForced) {
  auto file = topology::load_topology_file(kTwoIslands);
  file.emulation_scale = 1;
  for (const auto& s : link_shapes(two_islands_job(), 0, &file, ShapingMode::kAuto)) {
    EXPECT_FALSE(s);
  }
  const auto forced = link_shapes(two_islands_job(), 0, &file, ShapingMode::kOn);
  expect_shape(forced[2], per_rank(200, 2, 1), 2, "ib-hdr", 2);
  expect_shape(forced[7], per_rank(25, 1, 1), 30, "eth-25", 7);
}

TEST(LinkShapesTest, OffTurnsEveryLinkOff) {
  const auto file = topology::load_topology_file(kTwoIslands);
  for (const auto& s : link_shapes(two_islands_job(), 3, &file, ShapingMode::kOff)) EXPECT_FALSE(s);
}

TEST(LinkShapesTest, WithoutAFileOnlyWhenForcedWithNominalClasses) {
  const std::vector<Locality> job = {{"a", "A", "ethernet"}, {"b", "B", "ethernet"}};
  for (const auto& s : link_shapes(job, 0, nullptr, ShapingMode::kAuto)) EXPECT_FALSE(s);
  const auto forced = link_shapes(job, 0, nullptr, ShapingMode::kOn);
  EXPECT_FALSE(forced[0]);
  // The job topology's nominal ethernet: 10 Gbit/s, 50 us; one rank on host a.
  expect_shape(forced[1], 10e9 / 8, 50, "default-ethernet", 1);
}

TEST(LinkShapesTest, TheModeComesFromHolmesShaping) {
  {
    ShapingVariable v(nullptr);
    EXPECT_EQ(shaping_mode(Settings::from_environment()), ShapingMode::kAuto);
  }
  {
    ShapingVariable v("1");
    EXPECT_EQ(shaping_mode(Settings::from_environment()), ShapingMode::kOn);
  }
  {
    ShapingVariable v("0");
    EXPECT_EQ(shaping_mode(Settings::from_environment()), ShapingMode::kOff);
  }
  ShapingVariable v("yes");
  try {
    shaping_mode(Settings::from_environment());
    ADD_FAILURE() << "HOLMES_SHAPING=yes was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("HOLMES_SHAPING"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'yes'"), std::string::npos) << e.what();
  }
}

TEST(LinkShapesTest, ACommunicatorLoadsTheFileAndCountsTheJobsRanksOnItsHost) {
  ShapingVariable v(nullptr);
  const std::vector<Locality> job = two_islands_job();
  // A split of one rank per host (ranks 0, 2, 4, 6 of the job): the host's NICs are still
  // shared by the job's 2 ranks on it.
  const std::vector<Locality> members = {job[0], job[2], job[4], job[6]};
  const auto shapes =
      link_shapes(members, 0, std::optional<std::string>(kTwoIslands), mode(), &job);
  ASSERT_EQ(shapes.size(), 4u);
  EXPECT_FALSE(shapes[0]);
  expect_shape(shapes[1], per_rank(200, 2, 100), 2, "ib-hdr", 1);
  expect_shape(shapes[2], per_rank(25, 1, 100), 30, "eth-25", 2);
  // Without the job, the members alone count one rank per host.
  const auto alone = link_shapes(members, 0, std::optional<std::string>(kTwoIslands), mode());
  expect_shape(alone[1], per_rank(200, 2, 100) * 2, 2, "ib-hdr", 1);
  // No file: nothing unless forced.
  for (const auto& s : link_shapes(members, 0, std::optional<std::string>(), mode()))
    EXPECT_FALSE(s);
  ShapingVariable off("0");
  for (const auto& s :
       link_shapes(members, 0, std::optional<std::string>(kTwoIslands), mode(), &job)) {
    EXPECT_FALSE(s);
  }
}

// The cost model's island and inter-island tiers follow the same rates, per host (not per
// rank: the model shares a host's bandwidth among its ranks itself), in GB/s.
void expect_tier(const TierCosts& costs, Tier tier, double gbit_per_s_per_host, double latency_us) {
  ASSERT_TRUE(costs[tier].has_value()) << tier_name(tier);
  EXPECT_DOUBLE_EQ(costs[tier]->gbytes_per_s, gbit_per_s_per_host / 8) << tier_name(tier);
  EXPECT_DOUBLE_EQ(costs[tier]->latency_us, latency_us) << tier_name(tier);
}

TEST(TopologyTierCostsTest, TheSlowestHostOfEachTierAtTheShapedRates) {
  const auto file = topology::load_topology_file(kTwoIslands);
  const auto costs = topology_tier_costs(two_islands_job(), &file, ShapingMode::kAuto);
  EXPECT_FALSE(costs[Tier::kSameHost]) << "never shaped: left to the transport's numbers";
  // Islands: ib-hdr 200 x 2 NICs / 100 = 4 Gbit/s, roce-100 100 x 1 / 100 = 1: roce is slower;
  // its latency 4 us is the larger too.
  expect_tier(costs, Tier::kSameIsland, 1, 4);
  // Between islands: eth-25, one NIC's worth: 25 / 100, 30 us.
  expect_tier(costs, Tier::kOtherIsland, 0.25, 30);
  EXPECT_FALSE(costs.reduce_gbytes_per_s);
  // One network: every link to another host is the inter-island one.
  const auto naive = topology_tier_costs(two_islands_job(), &file, ShapingMode::kOneNetwork);
  expect_tier(naive, Tier::kSameIsland, 0.25, 30);
  expect_tier(naive, Tier::kOtherIsland, 0.25, 30);
}

TEST(TopologyTierCostsTest, OnlyWhereTheLinksRunAtTheFilesRates) {
  auto file = topology::load_topology_file(kTwoIslands);
  // Scaled, but not shaped: the file's rates are not what the links do.
  EXPECT_TRUE(topology_tier_costs(two_islands_job(), &file, ShapingMode::kOff).empty());
  // At scale 1 the file describes the real cluster: its numbers, shaped or not.
  file.emulation_scale = 1;
  for (const auto mode : {ShapingMode::kOff, ShapingMode::kAuto}) {
    const auto real = topology_tier_costs(two_islands_job(), &file, mode);
    expect_tier(real, Tier::kSameIsland, 100, 4);
    expect_tier(real, Tier::kOtherIsland, 25, 30);
  }
  // One island of one host: no tier to describe.
  const std::vector<Locality> one_host(2, Locality{"emu-ib-0", "ib", "ib"});
  EXPECT_TRUE(topology_tier_costs(one_host, &file, ShapingMode::kAuto).empty());
  // No file: nothing, unless shaping is forced on (then the nominal classes the links get).
  EXPECT_TRUE(topology_tier_costs(two_islands_job(), nullptr, ShapingMode::kAuto).empty());
  const auto forced = topology_tier_costs(two_islands_job(), nullptr, ShapingMode::kOn);
  EXPECT_TRUE(forced[Tier::kSameIsland].has_value());
  EXPECT_TRUE(forced[Tier::kOtherIsland].has_value());
}

TEST(LinkShapesTest, ABadRankIsRefused) {
  EXPECT_THROW(link_shapes(two_islands_job(), 8, nullptr, ShapingMode::kOn), Error);
}

}  // namespace
}  // namespace holmes::detail
