// Google Benchmark: how long the planner takes as the cluster grows, 64 ... 16,384 GPUs, with
// degrees left open (every feasible tp x pp is placed, partitioned and predicted).
//   build/bin/holmes-micro-bench --benchmark_filter=Plan
// The cluster: four islands of equal size (IB HDR, IB NDR, RoCE, and an ethernet-only one), hosts
// of 8 A100s, joined by 25 GbE; the model: GPT-7.5B with a global batch of 4 samples per GPU.
#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include "planner/planner.hpp"

namespace {

using holmes::topology::Fabric;

holmes::topology::Topology cluster(int gpus) {
  holmes::topology::Topology t;
  t.link_classes["nvlink"] = {"nvlink", Fabric::kNvlink, 2400, 2};
  t.link_classes["ib-hdr"] = {"ib-hdr", Fabric::kIb, 200, 2};
  t.link_classes["ib-ndr"] = {"ib-ndr", Fabric::kIb, 400, 2};
  t.link_classes["roce"] = {"roce", Fabric::kRoce, 100, 4};
  t.link_classes["eth-25"] = {"eth-25", Fabric::kEthernet, 25, 30};
  t.intra_host_link = "nvlink";
  t.inter_island_link = "eth-25";
  const struct {
    const char* name;
    Fabric fabric;
    const char* link;
  } islands[] = {{"ib-a", Fabric::kIb, "ib-hdr"},
                 {"ib-b", Fabric::kIb, "ib-ndr"},
                 {"roce", Fabric::kRoce, "roce"},
                 {"eth", Fabric::kEthernet, ""}};
  const int hosts_per_island = gpus / 8 / 4;
  for (const auto& spec : islands) {
    holmes::topology::Island island{spec.name, spec.fabric, spec.link, {}};
    for (int h = 0; h < hosts_per_island; ++h) {
      holmes::topology::Host host{fmt::format("{}-{}", spec.name, h), spec.name, 8, "A100", {}};
      for (int n = 0; n < 4 && spec.link[0] != '\0'; ++n) {
        holmes::topology::Nic nic;
        nic.name = fmt::format("nic{}", n);
        nic.link_class = spec.link;
        host.nics.push_back(nic);
      }
      island.hosts.push_back(host.name);
      t.hosts.push_back(host);
    }
    t.islands[spec.name] = island;
  }
  return t;
}

void Plan(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  const auto topo = cluster(gpus);
  auto model = holmes::planner::model_preset("gpt-7.5b");
  model.global_batch = 4 * gpus;
  for (auto _ : state) {
    auto plan = holmes::planner::make_plan(topo, model, {});
    benchmark::DoNotOptimize(plan.holmes_step.step_s);
  }
  state.counters["gpus"] = gpus;
}
BENCHMARK(Plan)->RangeMultiplier(4)->Range(64, 16384)->Unit(benchmark::kMillisecond);

}  // namespace
