// Re-planning after a loss (planner/replan.hpp) on hand-built topologies: a lost rank takes
// its data-parallel replica out, a single-replica pipeline has its stages re-cut, a whole island
// can go, the global batch is kept, every layer a rank must fetch names a survivor that held it
// (or none when nobody did), and a loss the model cannot survive says why.
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "core/status.hpp"
#include "hand_topology.hpp"
#include "planner/plan_report.hpp"
#include "planner/replan.hpp"

namespace holmes::planner {
namespace {

using topology::Fabric;
using topology::Topology;

// Two islands (ib, roce) of two hosts with two GPUs each: 8 ranks, ib's first.
Topology two_islands() {
  return hand::make_topology(
      {{"ib", Fabric::kIb, "ib-hdr", 2, 1}, {"roce", Fabric::kRoce, "roce-100", 2, 1}},
      /*interleave=*/false, /*gpus=*/2);
}

ModelSpec tiny() { return model_preset("tiny"); }  // 8 layers, 16 micro-batches of 4 per step

std::vector<int> all_but(int ranks, const std::set<int>& lost) {
  std::vector<int> out;
  for (int r = 0; r < ranks; ++r) {
    if (!lost.count(r)) out.push_back(r);
  }
  return out;
}

// The layers (of its TP shard) a rank holds in `p`; empty for a spare.
std::set<int> held(const Placement& p, int rank) {
  std::set<int> out;
  const RankRole& role = p.roles.at(rank);
  if (role.spare()) return out;
  const Stage& stage = p.stages.at(role.stage);
  for (int l = stage.first_layer; l < stage.first_layer + stage.layers; ++l) out.insert(l);
  return out;
}

bool held_shard(const Placement& p, int rank, int layer, int tp) {
  const RankRole& role = p.roles.at(rank);
  return !role.spare() && role.tp == tp && held(p, rank).count(layer) == 1;
}

// What the re-plan promises, checked against the old plan: every layer is held by a full
// placement of the survivors; each rank's sources list exactly the layers it holds now and did
// not hold before, in order; each named source held that shard in the old plan; kLost only where
// no survivor did. Returns how many layers were lost.
int expect_consistent(const Plan& old, const Replan& r) {
  const Placement& was = old.holmes;
  const Placement& now = r.plan.holmes;
  const int n = static_cast<int>(r.old_rank.size());
  EXPECT_EQ(now.tp, was.tp) << "tensor parallelism is kept";
  EXPECT_EQ(static_cast<int>(now.roles.size()), n);
  int layers = 0;
  for (int s = 0; s < now.pp; ++s) {
    EXPECT_EQ(now.stages[s].first_layer, layers);
    EXPECT_GE(now.stages[s].layers, 1);
    layers += now.stages[s].layers;
  }
  EXPECT_EQ(layers, old.model.layers);
  // The global batch: every replica's micro-batches add up to it and differ by at most one,
  // the larger counts first.
  int micro = 0;
  for (int d = 0; d < now.dp; ++d) {
    micro += now.micro_batches_of(d);
    if (d > 0) {
      EXPECT_LE(now.micro_batches_of(d), now.micro_batches_of(d - 1));
      EXPECT_GE(now.micro_batches_of(d), now.micro_batches_of(0) - 1);
    }
  }
  EXPECT_EQ(micro * old.model.micro_batch, old.model.global_batch);
  int lost = 0;
  for (int rank = 0; rank < n; ++rank) {
    const int before = r.old_rank[rank];
    std::vector<int> needed;
    if (!now.roles[rank].spare()) {
      for (int l : held(now, rank)) {
        if (!held_shard(was, before, l, now.roles[rank].tp)) needed.push_back(l);
      }
    }
    std::vector<int> listed;
    for (const LayerSource& src : r.sources.at(rank)) {
      for (int l = src.first_layer; l < src.first_layer + src.layers; ++l) {
        listed.push_back(l);
        const int tp = now.roles[rank].tp;
        if (src.source == LayerSource::kLost) {
          ++lost;
          for (int other = 0; other < n; ++other) {
            EXPECT_FALSE(held_shard(was, r.old_rank[other], l, tp))
                << "layer " << l << " is called lost but survivor " << other << " held it";
          }
        } else {
          const bool in_range = src.source >= 0 && src.source < n;
          EXPECT_TRUE(in_range) << "source " << src.source;
          if (!in_range) continue;
          EXPECT_TRUE(held_shard(was, r.old_rank[src.source], l, tp))
              << "rank " << rank << " fetches layer " << l << " from " << src.source
              << ", which did not hold it";
        }
      }
    }
    EXPECT_EQ(listed, needed) << "rank " << rank;
  }
  return lost;
}

// The Holmes rules on the survivors: TP groups inside a host, DP groups inside an island.
void expect_rules(const Replan& r) {
  const auto& hosts = r.job.layout.host_of_rank;
  const Topology& topo = r.job.topology;
  for (const Group& g : r.plan.holmes.tp_groups) {
    for (int rank : g.ranks) EXPECT_EQ(hosts[rank], hosts[g.ranks.front()]);
  }
  for (const Group& g : r.plan.holmes.dp_groups) {
    for (int rank : g.ranks)
      EXPECT_EQ(topo.hosts[hosts[rank]].island, topo.hosts[hosts[g.ranks.front()]].island);
  }
}

TEST(Replan, LostReplicaRankTakesItsReplicaOut) {
  const Topology topo = two_islands();
  const Plan old = make_plan(topo, tiny(), PlanConstraints{1, 2});
  ASSERT_EQ(old.holmes.dp, 4);
  ASSERT_EQ(old.holmes.roles[1].stage, 0);
  const int lost_dp = old.holmes.roles[1].dp;
  const Replan r = replan(old, topo, JobLayout(topo), all_but(8, {1}));
  EXPECT_TRUE(r.replicas_dropped);
  const Placement& now = r.plan.holmes;
  EXPECT_EQ(now.pp, 2);
  EXPECT_EQ(now.dp, 3);
  EXPECT_EQ(expect_consistent(old, r), 0);
  expect_rules(r);
  // Everyone but the lost replica keeps its stage and layers; that replica's survivor (the rank
  // of stage 1 in it) is spare; nothing moves.
  int spares = 0;
  for (int rank = 0; rank < 7; ++rank) {
    const int before = r.old_rank[rank];
    if (old.holmes.roles[before].dp == lost_dp) {
      EXPECT_TRUE(now.roles[rank].spare()) << "rank " << rank;
      ++spares;
    } else {
      EXPECT_EQ(now.roles[rank].stage, old.holmes.roles[before].stage);
      EXPECT_EQ(held(now, rank), held(old.holmes, before));
    }
    EXPECT_TRUE(r.sources[rank].empty());
  }
  EXPECT_EQ(spares, 1);
  // 16 micro-batches over 3 replicas: 6, 5, 5.
  EXPECT_EQ(now.replica_micro_batches, (std::vector<int>{6, 5, 5}));
  EXPECT_EQ(now.micro_batches, 6);
}

TEST(Replan, SingleReplicaPipelineIsRecut) {
  const Topology topo = two_islands();
  const Plan old = make_plan(topo, tiny(), PlanConstraints{1, 8});
  ASSERT_EQ(old.holmes.dp, 1);
  const int lost_stage = old.holmes.roles[2].stage;
  const Replan r = replan(old, topo, JobLayout(topo), all_but(8, {2}));
  EXPECT_FALSE(r.replicas_dropped);
  const Placement& now = r.plan.holmes;
  EXPECT_EQ(now.dp, 1);
  EXPECT_EQ(now.pp, 7);
  EXPECT_EQ(now.replica_micro_batches, (std::vector<int>{16}));
  expect_rules(r);
  // The lost stage's layer had no replica: it is lost, and exactly it.
  const int lost = expect_consistent(old, r);
  EXPECT_EQ(lost, old.holmes.stages[lost_stage].layers);
  for (const auto& list : r.sources) {
    for (const LayerSource& src : list) {
      if (src.source != LayerSource::kLost) continue;
      EXPECT_GE(src.first_layer, old.holmes.stages[lost_stage].first_layer);
      EXPECT_LE(src.first_layer + src.layers,
                old.holmes.stages[lost_stage].first_layer + old.holmes.stages[lost_stage].layers);
    }
  }
  // The roce island lost nothing: it keeps its four stages, the last of the pipeline.
  for (int s = 3; s < 7; ++s) EXPECT_EQ(now.stages[s].island, "roce");
  for (int s = 0; s < 3; ++s) EXPECT_EQ(now.stages[s].island, "ib");
}

TEST(Replan, WholeIslandLost) {
  const Topology topo = two_islands();
  const Plan old = make_plan(topo, tiny(), PlanConstraints{1, 2});
  ASSERT_EQ(old.holmes.stages[1].island, "roce");
  const Replan r = replan(old, topo, JobLayout(topo), all_but(8, {4, 5, 6, 7}));
  EXPECT_FALSE(r.replicas_dropped);
  const Placement& now = r.plan.holmes;
  for (const Stage& s : now.stages) EXPECT_EQ(s.island, "ib");
  EXPECT_EQ(now.tp * now.pp * now.dp, 4);
  expect_rules(r);
  // Stage 1's layers lived only in the roce island: each new holder of one finds it lost; the
  // others come from ib ranks.
  int roce_layers_needed = 0;
  for (int rank = 0; rank < 4; ++rank) {
    for (int l : held(now, rank)) roce_layers_needed += l >= old.holmes.stages[1].first_layer;
  }
  EXPECT_EQ(expect_consistent(old, r), roce_layers_needed);
  EXPECT_GT(roce_layers_needed, 0);
}

TEST(Replan, LostTensorShardsComeFromTheirReplica) {
  // Hosts of 4 GPUs, tp 2: losing one rank of a replica moves nothing; losing one in each
  // replica of stage 0 re-cuts, and shards come from surviving replicas of the same shard.
  const Topology topo = hand::make_topology(
      {{"ib", Fabric::kIb, "ib-hdr", 2, 1}, {"roce", Fabric::kRoce, "roce-100", 2, 1}},
      /*interleave=*/false, /*gpus=*/4);
  const Plan old = make_plan(topo, tiny(), PlanConstraints{2, 2});
  ASSERT_EQ(old.holmes.dp, 4);
  std::set<int> one_per_replica;
  for (int d = 0; d < 4; ++d) one_per_replica.insert(old.holmes.rank_at(0, d, d % 2));
  const Replan r = replan(old, topo, JobLayout(topo), all_but(16, one_per_replica));
  EXPECT_FALSE(r.replicas_dropped);
  expect_rules(r);
  expect_consistent(old, r);
  EXPECT_EQ(r.plan.holmes.tp, 2);
}

TEST(Replan, ReplanOfAReplanAndLosingASpare) {
  const Topology topo = two_islands();
  const JobLayout layout(topo);
  const Plan old = make_plan(topo, tiny(), PlanConstraints{1, 2});
  const Replan first = replan(old, topo, layout, all_but(8, {1}));
  int spare = -1;
  for (int rank = 0; rank < 7; ++rank) {
    if (first.plan.holmes.roles[rank].spare()) spare = rank;
  }
  ASSERT_GE(spare, 0);
  // The spare dies too: nothing changes, nothing moves.
  std::vector<int> survivors;
  for (int rank = 0; rank < 7; ++rank) {
    if (rank != spare) survivors.push_back(rank);
  }
  const Replan second = replan(first.plan, first.job.topology, first.job.layout, survivors);
  EXPECT_TRUE(second.replicas_dropped);
  EXPECT_EQ(second.plan.holmes.dp, 3);
  EXPECT_EQ(expect_consistent(first.plan, second), 0);
  for (const auto& list : second.sources) EXPECT_TRUE(list.empty());
  // No loss at all: the same placement.
  const Replan same = replan(old, topo, layout, all_but(8, {}));
  EXPECT_EQ(same.plan.holmes.grid, old.holmes.grid);
  EXPECT_EQ(expect_consistent(old, same), 0);
}

TEST(Replan, SamePlanEveryTime) {
  const Topology topo = two_islands();
  const Plan old = make_plan(topo, tiny(), PlanConstraints{1, 8});
  const Replan a = replan(old, topo, JobLayout(topo), all_but(8, {2, 5}));
  const Replan b = replan(old, topo, JobLayout(topo), all_but(8, {2, 5}));
  EXPECT_EQ(plan_to_json(a.plan, a.job.topology).dump(),
            plan_to_json(b.plan, b.job.topology).dump());
  EXPECT_EQ(a.sources, b.sources);
}

TEST(Replan, ModelThatNoLongerFitsSaysWhy) {
  const Topology topo = two_islands();
  // Memory for one layer per GPU and not much more: losing half the ranks cannot fit.
  const Plan roomy = make_plan(topo, tiny(), PlanConstraints{1, 8});
  double one_layer = 0;
  for (const StageTime& st : roomy.holmes_step.stages)
    one_layer = std::max(one_layer, st.memory_gb);
  PlanConstraints tight{1, 8};
  tight.gpu_memory_gb = one_layer * 1.001;
  const Plan old = make_plan(topo, tiny(), tight);
  try {
    replan(old, topo, JobLayout(topo), all_but(8, {0, 1, 2, 3, 4}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
    const std::string what = e.what();
    EXPECT_NE(what.find("no longer fits on the 3 surviving ranks (of 8; lost 0, 1, 2, 3, 4)"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("more than"), std::string::npos) << what;
  }
}

TEST(Replan, RejectsBadSurvivorLists) {
  const Topology topo = two_islands();
  const JobLayout layout(topo);
  const Plan old = make_plan(topo, tiny(), PlanConstraints{1, 2});
  auto message = [&](const std::vector<int>& survivors) {
    try {
      replan(old, topo, layout, survivors);
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({}).find("no rank survived"), std::string::npos);
  EXPECT_NE(message({0, 8}).find("surviving rank 8 is not a rank of the old job of 8"),
            std::string::npos);
  EXPECT_NE(message({0, 3, 2}).find("ascending order, got 2 after 3"), std::string::npos);
  EXPECT_NE(message({1, 1}).find("ascending order"), std::string::npos);
  // A plan for another job.
  const Topology other = hand::make_topology({{"ib", Fabric::kIb, "ib-hdr", 1, 1}}, false, 2);
  EXPECT_NE(
      [&] {
        try {
          replan(old, other, JobLayout(other), {0});
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string("no error");
      }()
          .find("the plan places 8 ranks, the old job has 2"),
      std::string::npos);
}

}  // namespace
}  // namespace holmes::planner
