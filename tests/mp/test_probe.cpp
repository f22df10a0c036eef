// The init probe over real processes (HOLMES_COST_PROBE=1, collectives/link_probe.hpp): a
// communicator created with it holds measured numbers for every tier it has (not the nominal
// ones the world, created without it, holds), every rank holds the same numbers per tier, a
// split inherits them, a HOLMES_COST_<TIER> variable keeps its tier's numbers, and collectives
// on the probed communicator still give exact results. Run on one host (shm) and on
// layout.sh's three hosts and two islands.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "world.hpp"

namespace holmes::test {
namespace {

// A communicator created with the environment `vars` set for its init only.
Communicator init_with(const std::vector<std::pair<const char*, const char*>>& vars) {
  for (const auto& [name, value] : vars) setenv(name, value, 1);
  Communicator comm = Communicator::init_from_env();
  for (const auto& [name, value] : vars) unsetenv(name);
  return comm;
}

enum Tier : std::uint64_t { kSameHost = 0, kSameIsland = 1, kOtherIsland = 2, kUnknown = 3 };

Tier tier_of(const Communicator& comm, int peer) {
  const std::string reason = comm.peer_transport(peer).reason;
  if (reason.rfind("same host", 0) == 0) return kSameHost;
  if (reason.rfind("same island", 0) == 0) return kSameIsland;
  if (reason.rfind("other island", 0) == 0) return kOtherIsland;
  return kUnknown;
}

std::uint64_t bits(double x) {
  std::uint64_t b = 0;
  static_assert(sizeof b == sizeof x);
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// Every rank's view of every link: [from][to] = {tier, latency bits, bandwidth bits}.
struct LinkMatrix {
  int n = 0;
  std::vector<std::uint64_t> cells;  // n x n x 3
  const std::uint64_t* at(int from, int to) const {
    return &cells[(static_cast<std::size_t>(from) * n + to) * 3];
  }
};

LinkMatrix gather_links(Communicator& comm) {
  LinkMatrix m;
  m.n = comm.size();
  std::vector<std::uint64_t> mine(static_cast<std::size_t>(m.n) * 3, 0);
  for (int p = 0; p < m.n; ++p) {
    if (p == comm.rank()) continue;
    const auto link = comm.query_link(p);
    mine[p * 3] = tier_of(comm, p);
    mine[p * 3 + 1] = bits(link.latency_us);
    mine[p * 3 + 2] = bits(link.gbytes_per_s);
  }
  m.cells.resize(mine.size() * m.n);
  comm.allgather(mine.data(), m.cells.data(), mine.size(), HM_UINT64);
  return m;
}

TEST(CostProbe, MeasuredNumbersReplaceTheNominalOnesAndEveryRankHoldsTheSame) {
  Communicator& nominal = world();
  Communicator probed = init_with({{"HOLMES_COST_PROBE", "1"}});
  const int n = probed.size();
  const int me = probed.rank();
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const auto measured = probed.query_link(p);
    const auto before = nominal.query_link(p);
    EXPECT_TRUE(measured.latency_us >= 0 && std::isfinite(measured.latency_us)) << "peer " << p;
    EXPECT_TRUE(measured.gbytes_per_s > 0 && std::isfinite(measured.gbytes_per_s)) << "peer " << p;
    EXPECT_TRUE(measured.latency_us != before.latency_us ||
                measured.gbytes_per_s != before.gbytes_per_s)
        << "rank " << me << " still holds the nominal numbers for peer " << p << ": "
        << before.latency_us << " us, " << before.gbytes_per_s << " GB/s";
  }

  // The same tier has bitwise the same numbers on every rank and in both directions.
  const LinkMatrix links = gather_links(probed);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      const auto* ab = links.at(a, b);
      const auto* ba = links.at(b, a);
      EXPECT_TRUE(ab[1] == ba[1] && ab[2] == ba[2]) << "link " << a << "-" << b;
      for (int c = 0; c < n; ++c) {
        for (int d = 0; d < n; ++d) {
          if (c == d || ab[0] == kUnknown || links.at(c, d)[0] != ab[0]) continue;
          EXPECT_TRUE(ab[1] == links.at(c, d)[1] && ab[2] == links.at(c, d)[2])
              << "links " << a << "-" << b << " and " << c << "-" << d << " share a tier";
        }
      }
    }
  }

  // A split keeps the numbers (it does not probe again).
  Communicator split = probed.split(0, me);
  ASSERT_TRUE(split.valid());
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    EXPECT_EQ(bits(split.query_link(p).latency_us), bits(probed.query_link(p).latency_us));
    EXPECT_EQ(bits(split.query_link(p).gbytes_per_s), bits(probed.query_link(p).gbytes_per_s));
  }

  // Every rank makes the same choices from them, and the calls they choose are exact.
  for (const std::size_t count : {std::size_t{2}, std::size_t{1} << 16, std::size_t{1} << 20}) {
    const auto choice = probed.query_algorithm(HM_COLL_ALLREDUCE, count, HM_FLOAT32);
    std::uint64_t key[2] = {static_cast<std::uint64_t>(choice.algorithm),
                            bits(choice.predicted_us)};
    const auto all = gather_all(fingerprint(key, sizeof key));
    for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], all[0]) << "count " << count << ", rank " << r;

    std::vector<float> data(count);
    for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<float>((me + 1) * (i % 7 + 1));
    probed.allreduce(data.data(), data.data(), count, HM_FLOAT32, HM_SUM);
    const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) {
      if (data[i] != ranks_sum * static_cast<float>(i % 7 + 1)) ++wrong;
    }
    EXPECT_EQ(wrong, 0u) << "allreduce of " << count << " floats with "
                         << hm_algorithm_name(choice.algorithm);
  }
}

TEST(CostProbe, ATierSetByItsVariableKeepsItsNumbers) {
  Communicator probed = init_with({{"HOLMES_COST_PROBE", "1"},
                                   {"HOLMES_COST_SHM", "3,9"},
                                   {"HOLMES_COST_INTER_ISLAND", "77,0.5"}});
  for (int p = 0; p < probed.size(); ++p) {
    if (p == probed.rank()) continue;
    const auto link = probed.query_link(p);
    const Tier tier = tier_of(probed, p);
    if (tier == kSameHost && probed.peer_transport(p).transport == "shm") {
      EXPECT_EQ(link.latency_us, 3) << "peer " << p;
      EXPECT_EQ(link.gbytes_per_s, 9) << "peer " << p;
    } else if (tier == kOtherIsland) {
      EXPECT_EQ(link.latency_us, 77) << "peer " << p;
      EXPECT_EQ(link.gbytes_per_s, 0.5) << "peer " << p;
    } else {
      const auto before = world().query_link(p);
      EXPECT_TRUE(link.latency_us != before.latency_us || link.gbytes_per_s != before.gbytes_per_s)
          << "peer " << p << " kept the nominal numbers";
    }
  }
}

TEST(CostProbe, BadArgumentsAreNamed) {
  double latency = 0;
  EXPECT_THROW(world().query_link(world().size()), Error);
  EXPECT_THROW(world().query_link(-1), Error);
  EXPECT_EQ(hm_comm_query_link(nullptr, 0, &latency, nullptr), HM_ERR_INVALID_ARGUMENT);
  const std::string message = hm_last_error_message();
  EXPECT_NE(message.find("hm_comm_query_link"), std::string::npos) << message;
}

}  // namespace
}  // namespace holmes::test
