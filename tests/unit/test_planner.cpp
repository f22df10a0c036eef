// The planner: its placements follow the Holmes rules on hand-built topologies (no file parser
// involved), the layer split follows the islands' speed, naive is slower where it should be,
// and impossible requests say why.
#include <gtest/gtest.h>

#include <set>

#include "core/status.hpp"
#include "hand_topology.hpp"
#include "planner/plan_report.hpp"
#include "planner/planner.hpp"
#include "topology/topology_file.hpp"

namespace holmes::planner {
namespace {

using hand::IslandSpec;
using hand::make_topology;
using hand::paper_topology;
using topology::Fabric;
using topology::Host;
using topology::Island;
using topology::LinkClass;
using topology::Nic;
using topology::Topology;

// Every rule of the Holmes placement, checked from the placement's own groups.
void expect_holmes_rules(const Topology& topo, const Plan& plan) {
  const JobLayout layout(topo);
  const Placement& p = plan.holmes;
  ASSERT_EQ(p.tp * p.pp * p.dp, topo.total_gpus());
  auto host_of = [&](int r) { return topo.hosts[layout.host_of_rank[r]]; };
  std::set<int> seen;
  for (const Group& g : p.tp_groups) {
    for (int r : g.ranks) {
      EXPECT_EQ(host_of(r).name, host_of(g.ranks.front()).name) << "TP group leaves its host";
      EXPECT_TRUE(seen.insert(r).second) << "rank " << r << " in two TP groups";
    }
  }
  EXPECT_EQ(static_cast<int>(seen.size()), topo.total_gpus());
  for (const Group& g : p.dp_groups) {
    for (int r : g.ranks) {
      EXPECT_EQ(host_of(r).island, host_of(g.ranks.front()).island) << "DP group spans islands";
    }
    if (g.ranks.size() > 1 && host_of(g.ranks.front()).name != host_of(g.ranks.back()).name) {
      const Fabric fabric = topo.islands.at(host_of(g.ranks.front()).island).fabric;
      EXPECT_EQ(g.transport, fabric == Fabric::kEthernet ? "tcp" : topology::fabric_name(fabric));
    }
  }
  // Stages island by island: the island changes at most (islands - 1) times along the pipeline.
  int changes = 0;
  for (int s = 1; s < p.pp; ++s) {
    ASSERT_FALSE(p.stages[s].island.empty()) << "stage " << s << " spans islands";
    changes += p.stages[s].island != p.stages[s - 1].island;
  }
  std::set<std::string> islands;
  for (const Stage& s : p.stages) islands.insert(s.island);
  EXPECT_EQ(changes, static_cast<int>(islands.size()) - 1);
  int layers = 0;
  for (int s = 0; s < p.pp; ++s) {
    EXPECT_EQ(p.stages[s].first_layer, layers);
    EXPECT_GE(p.stages[s].layers, 1);
    layers += p.stages[s].layers;
  }
  EXPECT_EQ(layers, plan.model.layers);
}

TEST(Planner, PaperSetupFollowsTheRulesAndBeatsNaive) {
  const Topology topo = paper_topology();
  const Plan plan = make_plan(topo, model_preset("gpt-7.5b"), PlanConstraints{1, 2});
  expect_holmes_rules(topo, plan);
  EXPECT_EQ(plan.holmes.dp, 32);
  EXPECT_EQ(plan.holmes.micro_batches, 2048 / (32 * 4));
  EXPECT_EQ(plan.holmes.stages[0].island, "ib");
  EXPECT_EQ(plan.holmes.stages[1].island, "roce");
  for (const Group& g : plan.holmes.pp_groups) EXPECT_EQ(g.transport, "tcp");
  // Naive: NCCL cannot mix IB and RoCE, so every inter-host group runs over TCP.
  for (const Group& g : plan.naive.dp_groups) EXPECT_EQ(g.transport, "tcp");
  // Gradients over RDMA hide behind backward; over TCP they stick out.
  EXPECT_LT(plan.holmes_step.dp_exposed_s, plan.naive_step.dp_exposed_s);
  EXPECT_GT(plan.speedup(), 1.05);
  EXPECT_GT(plan.holmes_step.tflops_per_gpu, plan.naive_step.tflops_per_gpu);
}

TEST(Planner, InterleavedHostfileIsRegroupedByIsland) {
  const Topology topo = paper_topology(/*interleave=*/true);
  const Plan plan = make_plan(topo, model_preset("gpt-7.5b"), PlanConstraints{1, 2});
  expect_holmes_rules(topo, plan);
  // Megatron's order over the interleaved hostfile puts IB and RoCE hosts in one stage.
  EXPECT_TRUE(plan.naive.stages[0].island.empty());
}

TEST(Planner, FasterNetworkIslandGetsMoreLayers) {
  // 48 layers over an IB island (4 x 200 Gbit per host) and a RoCE one (1 x 25 Gbit). With few
  // micro-batches per step the gradient reduction is a large part of the step, and the RoCE
  // stage's takes longest: it must hold fewer layers.
  const Topology topo = make_topology(
      {{"ib", Fabric::kIb, "ib-hdr", 2, 4}, {"roce", Fabric::kRoce, "roce-25", 2, 1}});
  ModelSpec model = model_preset("gpt-39.1b");
  model.global_batch = 64;  // 8 micro-batches of 4 per replica (dp 2)
  const Plan plan = make_plan(topo, model, PlanConstraints{8, 2});
  expect_holmes_rules(topo, plan);
  ASSERT_EQ(plan.holmes.stages.size(), 2u);
  EXPECT_EQ(plan.holmes.stages[0].island, "ib");
  EXPECT_GT(plan.holmes.stages[0].layers, plan.holmes.stages[1].layers);
  EXPECT_EQ(plan.holmes.stages[0].layers + plan.holmes.stages[1].layers, 48);
  // The split beats the even one under the same model.
  const JobLayout layout(topo);
  const StepModel step(topo, layout, plan.model, plan.holmes);
  EXPECT_LT(plan.holmes_step.step_s, step.step_seconds({24, 24}));
}

TEST(Planner, FasterGpuIslandGetsMoreLayers) {
  // Same fabric speed, but one island has H100s: its stage computes faster per layer.
  Topology topo =
      make_topology({{"a100", Fabric::kIb, "ib-hdr", 2, 4}, {"h100", Fabric::kIb, "ib-hdr", 2, 4}});
  for (auto& host : topo.hosts) {
    if (host.island == "h100") host.gpu_model = "H100";
  }
  const Plan plan = make_plan(topo, model_preset("gpt-39.1b"), PlanConstraints{8, 2});
  expect_holmes_rules(topo, plan);
  EXPECT_EQ(plan.holmes.stages[1].island, "h100");
  EXPECT_GT(plan.holmes.stages[1].layers, plan.holmes.stages[0].layers + 4);
}

TEST(Planner, AutoShapeSearchFindsAPlacementThatFits) {
  const Topology topo = make_topology(
      {{"ib", Fabric::kIb, "ib-hdr", 6, 4}, {"roce", Fabric::kRoce, "roce-100", 2, 2}});
  const Plan plan = make_plan(topo, model_preset("gpt-39.1b"), PlanConstraints{});
  expect_holmes_rules(topo, plan);
  for (const StageTime& s : plan.holmes_step.stages) EXPECT_LE(s.memory_gb, 80.0);
  EXPECT_FALSE(plan.notes.empty());
}

TEST(Planner, IslandThatCannotHoldWholeStagesIsNamed) {
  // 3 IB hosts + 1 RoCE host: pp 2 makes stages of 16 GPUs, and the RoCE island has 8.
  const Topology topo = make_topology(
      {{"ib", Fabric::kIb, "ib-hdr", 3, 4}, {"roce", Fabric::kRoce, "roce-100", 1, 2}});
  try {
    make_plan(topo, model_preset("gpt-7.5b"), PlanConstraints{1, 2});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("island 'ib' has 24 GPUs and island 'roce' has 8 GPUs"), std::string::npos)
        << what;
    EXPECT_NE(what.find("leave tp and pp open"), std::string::npos) << what;
  }
  // Left open, the planner finds stages of 8 GPUs (pp 4: three on IB, one on RoCE).
  const Plan plan = make_plan(topo, model_preset("gpt-7.5b"), PlanConstraints{1, 0});
  expect_holmes_rules(topo, plan);
  EXPECT_EQ(plan.holmes.pp % 4, 0);
}

TEST(Planner, SamePlanEveryTime) {
  const Topology topo = paper_topology(true);
  const Plan a = make_plan(topo, model_preset("gpt-7.5b"), PlanConstraints{});
  const Plan b = make_plan(topo, model_preset("gpt-7.5b"), PlanConstraints{});
  EXPECT_EQ(plan_to_json(a, topo).dump(), plan_to_json(b, topo).dump());
}

TEST(Planner, RejectsBadRequests) {
  const Topology topo = paper_topology();
  ModelSpec bad = model_preset("gpt-7.5b");
  bad.layers = 0;
  EXPECT_THROW(make_plan(topo, bad, PlanConstraints{}), Error);
  EXPECT_THROW(make_plan(topo, model_preset("gpt-7.5b"), PlanConstraints{-1, 0}), Error);
  PlanConstraints schedule;
  schedule.schedule = "gpipe";
  EXPECT_THROW(make_plan(topo, model_preset("gpt-7.5b"), schedule), Error);
  EXPECT_THROW(model_preset("gpt-9000"), Error);
}

TEST(Planner, ReportsCarryTheWholePlan) {
  const Topology topo = paper_topology();
  const Plan plan = make_plan(topo, model_preset("gpt-7.5b"), PlanConstraints{1, 2});
  const auto json = plan_to_json(plan, topo);
  EXPECT_EQ(json["holmes"]["ranks"].size(), 64u);
  EXPECT_EQ(json["holmes"]["groups"]["dp"].size(), 2u);
  EXPECT_EQ(json["holmes"]["groups"]["dp"][0]["transport"], "ib");
  EXPECT_EQ(json["holmes"]["groups"]["dp"][1]["transport"], "roce");
  const std::string table = plan_to_table(plan, topo);
  EXPECT_NE(table.find("predicted speedup"), std::string::npos);
  const std::string dot = plan_to_dot(plan, topo);
  EXPECT_NE(dot.find("cluster_"), std::string::npos);
  EXPECT_NE(dot.find("pp 0->1 (eth-25)"), std::string::npos);
}

// The example topologies, each with a model sized for it: every plan follows the rules, and the
// paper's setup shows the Holmes placement ahead of the naive one.
TEST(Planner, ExampleTopologies) {
  const std::string dir = HOLMES_EXAMPLE_TOPOLOGIES;
  const std::vector<std::pair<std::string, ModelSpec>> cases = {
      {"paper-gpt-7.5b.yaml", model_preset("gpt-7.5b")},
      {"paper-gpt-39.1b.yaml", model_preset("gpt-39.1b")},
      {"three-fabrics.yaml", model_preset("gpt-7.5b")},
      {"uneven-islands.yaml", model_preset("gpt-7.5b")},
      {"emulated-two-islands.yaml", model_preset("tiny")},
      {"large-10k.yaml", load_model(std::string(HOLMES_EXAMPLE_MODELS) + "/gpt-175b.yaml")},
  };
  for (const auto& [file, model] : cases) {
    SCOPED_TRACE(file);
    const Topology topo = topology::load_topology_file(dir + "/" + file);
    const Plan plan = make_plan(topo, model, PlanConstraints{});
    expect_holmes_rules(topo, plan);
    EXPECT_GE(plan.speedup(), 1.0);
  }
  const Topology paper = topology::load_topology_file(dir + "/paper-gpt-7.5b.yaml");
  const Plan plan = make_plan(paper, model_preset("gpt-7.5b"), PlanConstraints{1, 2});
  EXPECT_EQ(plan.holmes.stages[0].island, "ib");
  EXPECT_GT(plan.speedup(), 1.05);
}

TEST(ModelSpec, YamlFileErrorsCarryLineAndColumn) {
  const ModelSpec m = parse_model_yaml("preset: gpt-7.5b\nglobal_batch: 1024\n", "m.yaml");
  EXPECT_EQ(m.layers, 36);
  EXPECT_EQ(m.global_batch, 1024);
  try {
    parse_model_yaml("layers: 4\nhiden: 8\n", "m.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("m.yaml:2:1: unknown key 'hiden'"), std::string::npos)
        << e.what();
  }
  try {
    parse_model_yaml("preset: tiny\nlayers: many\n", "m.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("m.yaml:2:9"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_model_yaml("[1, 2", "m.yaml"), Error);
}

TEST(ModelSpec, MegatronFlops) {
  const ModelSpec m = model_preset("gpt-7.5b");
  const double B = 2048, s = 2048, L = 36, h = 4096, V = 51200;
  const double expected = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
  EXPECT_NEAR(m.flops_per_step() / expected, 1.0, 1e-12);
}

}  // namespace
}  // namespace holmes::planner
