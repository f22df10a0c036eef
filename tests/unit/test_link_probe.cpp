// The init probe's pure parts (collectives/link_probe.hpp): which ranks measure each tier, how
// samples become a latency and a bandwidth, and how every rank's results become the same
// numbers everywhere. The probe itself runs over real processes in mp.probe.*.
#include <gtest/gtest.h>
#include <sched.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "collectives/link_probe.hpp"
#include "collectives/tuning.hpp"
#include "core/settings.hpp"
#include "core/status.hpp"
#include "core/thread_affinity.hpp"

namespace holmes {
namespace {

Hierarchy layout(const std::vector<std::string>& hosts, const std::vector<std::string>& islands) {
  const CostModel m;
  return make_hierarchy(hosts, islands, m.shm, m.island_rdma, m.inter_island);
}

void expect_group(const ProbeGroup& g, Tier tier, std::vector<int> ranks) {
  EXPECT_EQ(g.tier, tier) << tier_name(g.tier);
  EXPECT_EQ(g.ranks, ranks) << tier_name(tier);
}

TEST(ProbeGroups, OneHostsRanksThenOnePairPerOtherTierLowestRanksFirst) {
  // Ranks 0,1 and 4 on host a and 2 on host b (island X); 3 on host c (island Y).
  const auto groups = probe_groups(layout({"a", "a", "b", "c", "a"}, {"X", "X", "X", "Y", "X"}));
  ASSERT_EQ(groups.size(), 3u);
  expect_group(groups[0], Tier::kSameHost, {0, 1, 4});
  expect_group(groups[1], Tier::kSameIsland, {0, 2});
  expect_group(groups[2], Tier::kOtherIsland, {0, 3});
}

TEST(ProbeGroups, TiersWithoutRanksOnBothSidesAreLeftOut) {
  EXPECT_TRUE(probe_groups(layout({"a"}, {"X"})).empty());
  const auto one_host = probe_groups(layout({"a", "a", "a"}, {"X", "X", "X"}));
  ASSERT_EQ(one_host.size(), 1u);
  expect_group(one_host[0], Tier::kSameHost, {0, 1, 2});
  // One rank on hosts a and b, two on c and on d, two islands: host c measures for both.
  const auto spread =
      probe_groups(layout({"a", "b", "c", "c", "d", "d"}, {"X", "Y", "Y", "Y", "X", "X"}));
  ASSERT_EQ(spread.size(), 3u);
  expect_group(spread[0], Tier::kSameHost, {2, 3});
  expect_group(spread[1], Tier::kSameIsland, {0, 4});
  expect_group(spread[2], Tier::kOtherIsland, {0, 1});
}

TEST(FitSamples, LatencyIsTheMedianAndBandwidthTheSlope) {
  LinkSamples s;
  s.latency_us = {15, 10, 500, 11, 10.5};  // median 11: one outlier does not move it
  s.small_bytes = 64 << 10;
  s.large_bytes = 1 << 20;
  // 0.5 GB/s: (1 MiB - 64 KiB) more bytes take 1966.08 us more; both carry 50 us of fixed cost.
  const double extra = (s.large_bytes - s.small_bytes) / 0.5e3;
  s.small_us = {50 + s.small_bytes / 0.5e3, 51 + s.small_bytes / 0.5e3, 49 + s.small_bytes / 0.5e3};
  s.large_us = {50 + s.large_bytes / 0.5e3, 5000, 50 + s.large_bytes / 0.5e3 - 1};
  const auto link = fit_samples(s);
  ASSERT_TRUE(link.has_value());
  EXPECT_DOUBLE_EQ(link->latency_us, 11);
  EXPECT_NEAR(link->gbytes_per_s, (s.large_bytes - s.small_bytes) / (extra * 1e3), 1e-12);
  EXPECT_NEAR(link->gbytes_per_s, 0.5, 1e-12);
}

TEST(FitSamples, NoiseThatHidesTheTransferGivesNothing) {
  LinkSamples s;
  s.latency_us = {5};
  s.small_bytes = 64 << 10;
  s.large_bytes = 1 << 20;
  s.small_us = {100};
  s.large_us = {5};  // the large message took no longer than the latency: nothing to read
  EXPECT_FALSE(fit_samples(s).has_value());
  s.large_us = {4};
  EXPECT_FALSE(fit_samples(s).has_value());
  s.large_us = {200};
  EXPECT_TRUE(fit_samples(s).has_value());
  s.latency_us.clear();
  EXPECT_FALSE(fit_samples(s).has_value());
}

// Samples of the probe's sizes (64 KiB and 1 MiB), as a pair or ring measures them.
LinkSamples probe_sizes(std::vector<double> latency_us, std::vector<double> small_us,
                        std::vector<double> large_us) {
  LinkSamples s;
  s.latency_us = std::move(latency_us);
  s.small_bytes = 64 << 10;
  s.large_bytes = 1 << 20;
  s.small_us = std::move(small_us);
  s.large_us = std::move(large_us);
  return s;
}

TEST(FitSamples, LoadThatDelaysTheSmallRunsFallsBackOnTheFastest) {
  // Three of five small runs waited 2 ms for a core: their median (2040) passes the large one's.
  const LinkSamples s = probe_sizes({5}, {40, 2040, 2050, 45, 2045}, {640, 650, 660, 2700, 645});
  const auto link = fit_samples(s);
  ASSERT_TRUE(link.has_value());
  // Fastest of each: 640 - 40 = 600 us for the (1 MiB - 64 KiB) more.
  EXPECT_NEAR(link->gbytes_per_s, (s.large_bytes - s.small_bytes) / (600 * 1e3), 1e-12);
}

TEST(FitSamples, SizesOnDifferentPathsFallBackOnTheLargeMessagesAlone) {
  // As shm on a machine with CMA: 64 KiB waits on the peer's ring, 1 MiB is one copy.
  const LinkSamples s = probe_sizes({6}, {1187, 370, 1148, 361, 1030}, {195, 251, 151, 146, 1937});
  const auto link = fit_samples(s);
  ASSERT_TRUE(link.has_value());
  EXPECT_DOUBLE_EQ(link->latency_us, 6);
  EXPECT_NEAR(link->gbytes_per_s, s.large_bytes / ((195.0 - 6) * 1e3), 1e-12);
}

TEST(MembersPerCpu, AHostsRanksBeyondItsCpusShareThemAPairAcrossHostsDoesNot) {
  const ProbeGroup host{Tier::kSameHost, {0, 1, 2}};
  EXPECT_EQ(members_per_cpu(host, 2), 2);
  EXPECT_EQ(members_per_cpu(host, 3), 1);
  EXPECT_EQ(members_per_cpu(host, 16), 1);
  EXPECT_EQ(members_per_cpu(host, 1), 3);
  EXPECT_EQ(members_per_cpu(host, 0), 1);  // unknown
  const ProbeGroup pair{Tier::kOtherIsland, {0, 4}};
  EXPECT_EQ(members_per_cpu(pair, 1), 1);
}

TEST(PinnedToCpu, RunsOnTheChosenCpuThenOnAllAgain) {
  const std::vector<int> before = thread_cpus();
  ASSERT_FALSE(before.empty());
  {
    const PinnedToCpu pin(static_cast<int>(before.size()) + 1);  // the index wraps
    EXPECT_EQ(pin.choices(), static_cast<int>(before.size()));
    if (before.size() < 2) {
      EXPECT_FALSE(pin.pinned());
    } else {
      ASSERT_TRUE(pin.pinned());
      EXPECT_EQ(pin.cpu(), before[1]);
      EXPECT_EQ(thread_cpus(), std::vector<int>{before[1]});
      EXPECT_EQ(sched_getcpu(), before[1]);
    }
  }
  EXPECT_EQ(thread_cpus(), before);
  const PinnedToCpu refused(-1);
  EXPECT_FALSE(refused.pinned());
  EXPECT_EQ(thread_cpus(), before);
}

TEST(ReduceSpeed, MedianTimePerGigabyte) {
  const std::vector<double> runs = {300, 100, 250};  // median 250 us for 1 MB: 4 GB/s
  EXPECT_DOUBLE_EQ(reduce_us_per_gb(runs, 1e6), 250e3);
  EXPECT_EQ(reduce_us_per_gb({}, 1e6), 0);
}

TEST(AgreeMeasurements, EveryRankKeepsTheMedianOfTheRanksThatMeasured) {
  TierCosts a;
  a.tiers[0] = LinkCost{2, 8.0};
  a.tiers[2] = LinkCost{100, 0.125};
  a.reduce_gbytes_per_s = 4.0;
  TierCosts b;
  b.reduce_gbytes_per_s = 2.0;
  TierCosts c;
  c.reduce_gbytes_per_s = 0.5;  // one slow rank does not set everyone's number
  TierCosts none;
  std::vector<double> all;
  for (const auto& m : {a, none, b, c}) {
    const auto values = encode_measurements(m);
    all.insert(all.end(), values.begin(), values.end());
  }
  const TierCosts agreed = agree_measurements(all);
  ASSERT_TRUE(agreed.tiers[0].has_value());
  EXPECT_DOUBLE_EQ(agreed.tiers[0]->latency_us, 2);
  EXPECT_DOUBLE_EQ(agreed.tiers[0]->gbytes_per_s, 8.0);
  EXPECT_FALSE(agreed.tiers[1].has_value());
  ASSERT_TRUE(agreed.tiers[2].has_value());
  EXPECT_DOUBLE_EQ(agreed.tiers[2]->latency_us, 100);
  EXPECT_DOUBLE_EQ(agreed.tiers[2]->gbytes_per_s, 0.125);
  ASSERT_TRUE(agreed.reduce_gbytes_per_s.has_value());
  EXPECT_DOUBLE_EQ(*agreed.reduce_gbytes_per_s, 2.0);
  EXPECT_NE(agreed.describe().find("other island 100.0 us 0.125 GB/s"), std::string::npos)
      << agreed.describe();

  // The same values in another rank order give bitwise the same numbers.
  std::vector<double> reordered(all.begin() + 2 * kProbeValues, all.end());
  reordered.insert(reordered.end(), all.begin(), all.begin() + 2 * kProbeValues);
  const TierCosts again = agree_measurements(reordered);
  EXPECT_EQ(again.tiers[0]->latency_us, agreed.tiers[0]->latency_us);
  EXPECT_EQ(again.tiers[0]->gbytes_per_s, agreed.tiers[0]->gbytes_per_s);
  EXPECT_EQ(*again.reduce_gbytes_per_s, *agreed.reduce_gbytes_per_s);
}

TEST(AgreeMeasurements, HostileValuesAreIgnoredNotTrusted) {
  std::vector<double> all(kProbeValues, 0.0);
  all[0] = std::numeric_limits<double>::infinity();
  all[1] = std::numeric_limits<double>::quiet_NaN();
  all[3] = -5;
  all[5] = 1e7;  // a real number: 0.1 GB/s between islands
  const TierCosts agreed = agree_measurements(all);
  EXPECT_FALSE(agreed.tiers[0].has_value());
  EXPECT_FALSE(agreed.tiers[1].has_value());
  ASSERT_TRUE(agreed.tiers[2].has_value());
  EXPECT_DOUBLE_EQ(agreed.tiers[2]->gbytes_per_s, 0.1);
  EXPECT_EQ(agreed.tiers[2]->latency_us, 0);
  EXPECT_FALSE(agreed.reduce_gbytes_per_s.has_value());
  // A short or empty exchange measures nothing.
  EXPECT_TRUE(agree_measurements({}).empty());
  EXPECT_TRUE(agree_measurements(std::vector<double>(kProbeValues - 1, 1.0)).empty());
}

TEST(CostModel, ProbeSwitchAndWhichNumbersTheEnvironmentSet) {
  unsetenv("HOLMES_COST_PROBE");
  EXPECT_FALSE(CostModel::from_settings(Settings::from_environment()).probe);
  EXPECT_EQ(CostModel::from_settings(Settings::from_environment()).set_by_setting, 0u);
  setenv("HOLMES_COST_PROBE", "1", 1);
  setenv("HOLMES_COST_SHM", "3,9", 1);
  setenv("HOLMES_COST_REDUCE_GBPS", "5", 1);
  const auto m = CostModel::from_settings(Settings::from_environment());
  EXPECT_TRUE(m.probe);
  EXPECT_EQ(m.set_by_setting, CostModel::kSetShm | CostModel::kSetReduce);
  unsetenv("HOLMES_COST_SHM");
  unsetenv("HOLMES_COST_REDUCE_GBPS");
  for (const char* bad : {"yes", "2", "-1"}) {
    setenv("HOLMES_COST_PROBE", bad, 1);
    try {
      CostModel::from_settings(Settings::from_environment());
      ADD_FAILURE() << "accepted HOLMES_COST_PROBE=" << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(e.what()).find("HOLMES_COST_PROBE"), std::string::npos) << e.what();
    }
  }
  unsetenv("HOLMES_COST_PROBE");
}

}  // namespace
}  // namespace holmes
