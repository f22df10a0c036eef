// The planner on a running job (run under islands.sh: 8 ranks, two islands of two hosts of two
// ranks, interleaved): the C API plans, every rank's place follows the Holmes rules, the plan's
// communicators group the right ranks and run exact collectives, and ranks that disagree or ask
// for the impossible fail together with a message.
#include <holmes/holmes.h>

#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "world.hpp"

namespace holmes::test {
namespace {

// A C world built from the same environment (the n-th hm_init_from_env meets the others' n-th).
struct CWorld {
  hm_comm_t handle = nullptr;
  CWorld() { EXPECT_EQ(hm_init_from_env(&handle), HM_SUCCESS) << hm_last_error_message(); }
  ~CWorld() {
    if (handle != nullptr) hm_comm_destroy(handle);
  }
};

struct CPlan {
  hm_plan_t handle = nullptr;
  ~CPlan() {
    if (handle != nullptr) hm_plan_destroy(handle);
  }
};

std::string my_host() { return std::getenv("HOLMES_HOST"); }
std::string my_island() { return my_host().substr(4, my_host().rfind('-') - 4); }

// Every member's host name through `comm` (fixed 32-byte slots).
std::vector<std::string> hosts_in(hm_comm_t comm) {
  int size = 0;
  EXPECT_EQ(hm_comm_size(comm, &size), HM_SUCCESS);
  std::array<char, 32> mine{};
  std::strncpy(mine.data(), my_host().c_str(), mine.size() - 1);
  std::vector<char> all(32 * static_cast<std::size_t>(size));
  EXPECT_EQ(hm_allgather(comm, mine.data(), all.data(), 32, HM_INT8), HM_SUCCESS)
      << hm_last_error_message();
  std::vector<std::string> out;
  for (int i = 0; i < size; ++i) out.emplace_back(all.data() + 32 * i);
  return out;
}

hm_model_t tiny(int tp, int pp) {
  hm_model_t model = HM_MODEL_INITIALIZER;
  model.preset = "tiny";
  model.tp = tp;
  model.pp = pp;
  return model;
}

TEST(PlanTest, LayoutIsTheOneTheTestExpects) {
  ASSERT_EQ(world().size(), 8) << "run with holmes-run -n 8 -- islands.sh MODE ...";
  ASSERT_NE(std::getenv("HOLMES_HOST"), nullptr) << "run under islands.sh";
}

TEST(PlanTest, GroupsFollowHostsAndIslands) {
  CWorld c;
  CPlan plan;
  const hm_model_t model = tiny(2, 2);
  ASSERT_EQ(hm_plan_create(c.handle, &model, &plan.handle), HM_SUCCESS) << hm_last_error_message();
  hm_plan_rank_t me{};
  ASSERT_EQ(hm_plan_get_rank(plan.handle, &me), HM_SUCCESS);
  EXPECT_EQ(me.num_stages, 2);
  EXPECT_EQ(me.tp_size, 2);
  EXPECT_EQ(me.dp_size, 2);
  // Stage 0 on the first island the ranks name (ib: rank 0's), stage 1 on the other.
  EXPECT_EQ(me.stage, my_island() == "ib" ? 0 : 1);
  EXPECT_EQ(me.first_layer, me.stage == 0 ? 0 : 8 - me.num_layers);
  EXPECT_GE(me.num_layers, 1);

  hm_comm_t tp = nullptr, dp = nullptr, pp = nullptr;
  ASSERT_EQ(hm_plan_comm_create(plan.handle, HM_GROUP_TENSOR, &tp), HM_SUCCESS)
      << hm_last_error_message();
  ASSERT_EQ(hm_plan_comm_create(plan.handle, HM_GROUP_DATA, &dp), HM_SUCCESS)
      << hm_last_error_message();
  ASSERT_EQ(hm_plan_comm_create(plan.handle, HM_GROUP_PIPELINE, &pp), HM_SUCCESS)
      << hm_last_error_message();
  int rank = -1, size = 0;
  EXPECT_EQ(hm_comm_rank(tp, &rank), HM_SUCCESS);
  EXPECT_EQ(rank, me.tp_rank);
  EXPECT_EQ(hm_comm_rank(dp, &rank), HM_SUCCESS);
  EXPECT_EQ(rank, me.dp_rank);
  EXPECT_EQ(hm_comm_rank(pp, &rank), HM_SUCCESS);
  EXPECT_EQ(rank, me.stage);
  EXPECT_EQ(hm_comm_size(pp, &size), HM_SUCCESS);
  EXPECT_EQ(size, 2);
  // TP inside one host; DP inside one island, across its two hosts; PP across the islands.
  for (const std::string& h : hosts_in(tp)) EXPECT_EQ(h, my_host());
  const auto dp_hosts = hosts_in(dp);
  ASSERT_EQ(dp_hosts.size(), 2u);
  EXPECT_NE(dp_hosts[0], dp_hosts[1]);
  for (const std::string& h : dp_hosts) EXPECT_EQ(h.substr(0, 6), my_host().substr(0, 6));
  const auto pp_hosts = hosts_in(pp);
  ASSERT_EQ(pp_hosts.size(), 2u);
  EXPECT_EQ(pp_hosts[0].rfind("emu-ib-", 0), 0u) << pp_hosts[0];
  EXPECT_EQ(pp_hosts[1].rfind("emu-roce-", 0), 0u) << pp_hosts[1];

  // Exact sums over each group: world rank + 1 summed over its members.
  int world_rank = 0;
  EXPECT_EQ(hm_comm_rank(c.handle, &world_rank), HM_SUCCESS);
  for (hm_comm_t g : {tp, dp, pp}) {
    std::int64_t mine = world_rank + 1, sum = 0;
    EXPECT_EQ(hm_allreduce(g, &mine, &sum, 1, HM_INT64, HM_SUM), HM_SUCCESS);
    std::int64_t ranks[2] = {0, 0};
    EXPECT_EQ(hm_allgather(g, &mine, ranks, 1, HM_INT64), HM_SUCCESS);
    EXPECT_EQ(sum, ranks[0] + ranks[1]);
    EXPECT_NE(ranks[0], ranks[1]);
  }
  for (hm_comm_t g : {tp, dp, pp}) EXPECT_EQ(hm_comm_destroy(g), HM_SUCCESS);

  // The JSON: asked for its size first, then read whole.
  size_t length = 0;
  ASSERT_EQ(hm_plan_get_json(plan.handle, nullptr, 0, &length), HM_SUCCESS);
  std::string json(length, '\0');
  ASSERT_EQ(hm_plan_get_json(plan.handle, json.data(), json.size(), nullptr), HM_SUCCESS);
  EXPECT_NE(json.find("\"naive\""), std::string::npos);
  EXPECT_NE(json.find("\"transport\":\"roce\""), std::string::npos);
  char small[8];
  EXPECT_EQ(hm_plan_get_json(plan.handle, small, sizeof(small), nullptr), HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hm_last_error_message()).find("too small"), std::string::npos);
  double step = 0, naive = 0;
  EXPECT_EQ(hm_plan_get_prediction(plan.handle, &step, &naive), HM_SUCCESS);
  EXPECT_GT(step, 0);
  EXPECT_GE(naive, step);
}

TEST(PlanTest, RanksThatDescribeDifferentModelsFailTogether) {
  CWorld c;
  CPlan plan;
  hm_model_t model = tiny(2, 2);
  int rank = 0;
  EXPECT_EQ(hm_comm_rank(c.handle, &rank), HM_SUCCESS);
  if (rank == 3) model.global_batch = 128;
  EXPECT_EQ(hm_plan_create(c.handle, &model, &plan.handle), HM_ERR_MISMATCH);
  EXPECT_NE(std::string(hm_last_error_message()).find("planned differently"), std::string::npos)
      << hm_last_error_message();
  EXPECT_EQ(plan.handle, nullptr);
}

TEST(PlanTest, ImpossibleRequestSaysWhyOnEveryRank) {
  CWorld c;
  CPlan plan;
  const hm_model_t model = tiny(4, 0);  // hosts have 2 GPUs: TP groups of 4 cannot stay inside
  EXPECT_EQ(hm_plan_create(c.handle, &model, &plan.handle), HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hm_last_error_message()).find("not a multiple of tp 4"), std::string::npos)
      << hm_last_error_message();
}

// With the topology file (islands.sh file), the cost model holds the file's link classes at the
// emulated rates the shaping layer holds the links to: between islands eth-25 (25 Gbit/s / 100,
// 30 us), inside islands the slower of ib-hdr (2 NICs x 200 / 100) and roce-100 (100 / 100, 4
// us), per host. Without it (islands.sh env), other numbers.
TEST(PlanTest, TheCostModelHoldsTheTopologyFilesRates) {
  const bool file = std::getenv("HOLMES_TOPOLOGY") != nullptr;
  auto& comm = world();
  int checked = 0;
  for (int peer = 0; peer < comm.size(); ++peer) {
    if (peer == comm.rank()) continue;
    const std::string reason = comm.peer_transport(peer).reason;
    const auto link = comm.query_link(peer);
    double gbit = 0;
    double latency = 0;
    if (reason.rfind("other island", 0) == 0) {
      gbit = 0.25;
      latency = 30;
    } else if (reason.rfind("same island", 0) == 0) {
      gbit = 1;
      latency = 4;
    } else {
      continue;
    }
    ++checked;
    if (file) {
      EXPECT_DOUBLE_EQ(link.gbytes_per_s, gbit / 8) << "peer " << peer << ": " << reason;
      EXPECT_DOUBLE_EQ(link.latency_us, latency) << "peer " << peer << ": " << reason;
    } else {
      EXPECT_NE(link.gbytes_per_s, gbit / 8) << "peer " << peer << ": " << reason;
    }
  }
  EXPECT_EQ(checked, 6) << "two peers on the other host of this island, four on the other island";
}

TEST(PlanTest, BadArgumentsAreRefusedLocally) {
  CWorld c;
  hm_plan_t plan = nullptr;
  EXPECT_EQ(hm_plan_create(c.handle, nullptr, &plan), HM_ERR_INVALID_ARGUMENT);
  hm_model_t model = tiny(0, 0);
  EXPECT_EQ(hm_plan_create(c.handle, &model, nullptr), HM_ERR_INVALID_ARGUMENT);
  model.size = 3;
  EXPECT_EQ(hm_plan_create(c.handle, &model, &plan), HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hm_last_error_message()).find("HM_MODEL_INITIALIZER"), std::string::npos);
  model = tiny(0, 0);
  model.file = "model.yaml";
  EXPECT_EQ(hm_plan_create(c.handle, &model, &plan), HM_ERR_INVALID_ARGUMENT);
  model = tiny(-1, 0);
  EXPECT_EQ(hm_plan_create(c.handle, &model, &plan), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(plan, nullptr);
  EXPECT_EQ(hm_plan_get_rank(nullptr, nullptr), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_plan_comm_create(nullptr, HM_GROUP_DATA, nullptr), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_plan_destroy(nullptr), HM_ERR_INVALID_ARGUMENT);
}

// Survivors of `lost` (world ranks), as hm_comm_shrink would give them: a split keeping the rank
// order; the lost ranks get NULL.
hm_comm_t survivors_of(hm_comm_t world, int lost) {
  int rank = -1;
  EXPECT_EQ(hm_comm_rank(world, &rank), HM_SUCCESS);
  hm_comm_t out = nullptr;
  EXPECT_EQ(hm_comm_split(world, rank == lost ? HM_COLOR_UNDEFINED : 0, 0, &out), HM_SUCCESS)
      << hm_last_error_message();
  return out;
}

std::vector<hm_layer_source_t> sources_of(hm_plan_t plan, int rank) {
  std::size_t count = 0;
  EXPECT_EQ(hm_plan_get_layer_sources(plan, rank, nullptr, 0, &count), HM_SUCCESS)
      << hm_last_error_message();
  std::vector<hm_layer_source_t> out(count);
  EXPECT_EQ(hm_plan_get_layer_sources(plan, rank, out.data(), out.size(), &count), HM_SUCCESS);
  return out;
}

TEST(PlanTest, ReplanOnSurvivorsDropsTheLostReplica) {
  CWorld c;
  CPlan old;
  const hm_model_t model = tiny(1, 2);
  ASSERT_EQ(hm_plan_create(c.handle, &model, &old.handle), HM_SUCCESS) << hm_last_error_message();
  hm_plan_rank_t before{};
  ASSERT_EQ(hm_plan_get_rank(old.handle, &before), HM_SUCCESS);
  ASSERT_EQ(before.dp_size, 4);
  // World rank 3's replica (dp index) is taken out; gather every rank's dp index to know it.
  std::int64_t mine = before.dp_rank, dps[8] = {};
  ASSERT_EQ(hm_allgather(c.handle, &mine, dps, 1, HM_INT64), HM_SUCCESS);
  hm_comm_t survivors = survivors_of(c.handle, 3);
  if (survivors == nullptr) return;  // the lost rank
  CPlan now;
  ASSERT_EQ(hm_plan_replan(old.handle, survivors, &now.handle), HM_SUCCESS)
      << hm_last_error_message();
  hm_plan_rank_t after{};
  ASSERT_EQ(hm_plan_get_rank(now.handle, &after), HM_SUCCESS);
  EXPECT_EQ(after.dp_size, 3);
  EXPECT_EQ(after.num_stages, 2);
  if (before.dp_rank == dps[3]) {
    EXPECT_EQ(after.stage, -1) << "the lost replica's survivor is spare";
    EXPECT_EQ(after.num_layers, 0);
  } else {
    EXPECT_EQ(after.stage, before.stage);
    EXPECT_EQ(after.first_layer, before.first_layer);
    EXPECT_EQ(after.num_layers, before.num_layers);
    // 16 micro-batches over 3 replicas: 6, 5, 5.
    EXPECT_EQ(after.micro_batches, after.dp_rank == 0 ? 6 : 5);
  }
  EXPECT_TRUE(sources_of(now.handle, 0).empty());
  // The new plan's groups work on the survivors: a DP allreduce sums exactly.
  hm_comm_t dp = nullptr;
  ASSERT_EQ(hm_plan_comm_create(now.handle, HM_GROUP_DATA, &dp), HM_SUCCESS)
      << hm_last_error_message();
  if (after.stage < 0) {
    EXPECT_EQ(dp, nullptr);
  } else {
    ASSERT_NE(dp, nullptr);
    std::int64_t one = 1, sum = 0;
    EXPECT_EQ(hm_allreduce(dp, &one, &sum, 1, HM_INT64, HM_SUM), HM_SUCCESS);
    EXPECT_EQ(sum, 3);
    EXPECT_EQ(hm_comm_destroy(dp), HM_SUCCESS);
  }
  EXPECT_EQ(hm_comm_destroy(survivors), HM_SUCCESS);
}

TEST(PlanTest, ReplanOfAPipelineNamesSourcesThatHeldTheLayers) {
  CWorld c;
  CPlan old;
  const hm_model_t model = tiny(1, 8);
  ASSERT_EQ(hm_plan_create(c.handle, &model, &old.handle), HM_SUCCESS) << hm_last_error_message();
  hm_plan_rank_t before{};
  ASSERT_EQ(hm_plan_get_rank(old.handle, &before), HM_SUCCESS);
  hm_comm_t survivors = survivors_of(c.handle, 2);
  if (survivors == nullptr) return;
  // Every survivor's old layer range, by new rank.
  std::int64_t mine[2] = {before.first_layer, before.num_layers}, ranges[14] = {};
  ASSERT_EQ(hm_allgather(survivors, mine, ranges, 2, HM_INT64), HM_SUCCESS);
  CPlan now;
  ASSERT_EQ(hm_plan_replan(old.handle, survivors, &now.handle), HM_SUCCESS)
      << hm_last_error_message();
  hm_plan_rank_t after{};
  ASSERT_EQ(hm_plan_get_rank(now.handle, &after), HM_SUCCESS);
  EXPECT_EQ(after.num_stages, 7);
  EXPECT_EQ(after.micro_batches, 16);
  int lost = 0;
  for (int r = 0; r < 7; ++r) {
    for (const hm_layer_source_t& s : sources_of(now.handle, r)) {
      if (s.rank < 0) {
        lost += s.num_layers;
        continue;
      }
      ASSERT_LT(s.rank, 7);
      EXPECT_GE(s.first_layer, ranges[2 * s.rank]) << "rank " << r << " from " << s.rank;
      EXPECT_LE(s.first_layer + s.num_layers, ranges[2 * s.rank] + ranges[2 * s.rank + 1]);
    }
  }
  EXPECT_GE(lost, 1) << "the lost rank's layers had no replica";
  EXPECT_EQ(hm_comm_destroy(survivors), HM_SUCCESS);
}

TEST(PlanTest, ReplanRefusesBadArguments) {
  CWorld c;
  CPlan old;
  const hm_model_t model = tiny(1, 2);
  ASSERT_EQ(hm_plan_create(c.handle, &model, &old.handle), HM_SUCCESS) << hm_last_error_message();
  hm_plan_t out = nullptr;
  EXPECT_EQ(hm_plan_replan(nullptr, c.handle, &out), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_plan_replan(old.handle, nullptr, &out), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_plan_replan(old.handle, c.handle, nullptr), HM_ERR_INVALID_ARGUMENT);
  std::size_t count = 0;
  EXPECT_EQ(hm_plan_get_layer_sources(old.handle, 8, nullptr, 0, &count), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_plan_get_layer_sources(old.handle, 0, nullptr, 0, &count), HM_SUCCESS);
  EXPECT_EQ(count, 0u);
  // A world in reverse order is not the plan's ranks in their order.
  int rank = -1;
  ASSERT_EQ(hm_comm_rank(c.handle, &rank), HM_SUCCESS);
  hm_comm_t reversed = nullptr;
  ASSERT_EQ(hm_comm_split(c.handle, 0, 8 - rank, &reversed), HM_SUCCESS);
  EXPECT_EQ(hm_plan_replan(old.handle, reversed, &out), HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hm_last_error_message()).find("not the plan's world's ranks in their"),
            std::string::npos)
      << hm_last_error_message();
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(hm_comm_destroy(reversed), HM_SUCCESS);
}

}  // namespace
}  // namespace holmes::test
