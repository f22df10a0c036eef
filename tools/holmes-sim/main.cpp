// holmes-sim: one training step of a plan, simulated on a cluster of any size (the planner's
// step model: 1F1B event by event, TP/p2p/DP collectives from the runtime's cost model), for
// Holmes's placement and the naive one; and sweeps of the inter-island bandwidth.
//   holmes-sim -t examples/topologies/paper-gpt-7.5b.yaml -m gpt-7.5b --tp 1 --pp 2
//   holmes-sim -t F -m M --sweep 400,100,25,10,1 --csv sweep.csv
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/status.hpp"
#include "planner/calibration.hpp"
#include "planner/plan_report.hpp"
#include "planner/planner.hpp"
#include "planner/sweep.hpp"
#include "topology/topology_file.hpp"

namespace {

using namespace holmes;

void print_placement(const planner::Placement& p, const planner::StepPrediction& step,
                     const planner::ModelSpec& model, const topology::Topology& topo) {
  const auto gpus = static_cast<double>(p.tp) * p.pp * p.dp;
  fmt::print("{} placement: tp {} x pp {} x dp {}, {} micro-batches of {} per replica{}{}\n",
             p.name, p.tp, p.pp, p.dp, p.micro_batches, model.micro_batch,
             p.single_network ? "; one network for the whole job (NCCL)" : "",
             p.overlap_dp ? "; DP overlapped" : "; DP after the backward");
  fmt::print("  {:>5} {:<10} {:>6} {:>11} {:>11} {:>10} {:>9} {:>12} {:>9}\n", "stage", "island",
             "layers", "fwd/L(ms)", "bwd/L(ms)", "compute(s)", "bubble(s)", "exp.comm(s)",
             "end(s)");
  for (std::size_t s = 0; s < p.stages.size(); ++s) {
    const auto& stage = p.stages[s];
    const auto& t = step.stages[s];
    const double per_layer = stage.layers > 0 ? 1e3 / stage.layers : 0;
    fmt::print("  {:>5} {:<10} {:>6} {:>11.2f} {:>11.2f} {:>10.2f} {:>9.2f} {:>12.2f} {:>9.2f}\n",
               s, stage.island.empty() ? "(mixed)" : stage.island, stage.layers,
               t.forward_s * per_layer, t.backward_s * per_layer, t.compute_s, t.bubble_s,
               t.end_s - t.compute_s - t.bubble_s, t.end_s);
  }
  (void)topo;
  fmt::print(
      "  step {:.3f} s = compute {:.3f} + bubble {:.3f} + exposed comm {:.3f} (stage {}); "
      "{:.0f} tokens/s ({:.1f} per GPU), {:.2f} samples/s, {:.1f} TFLOPS/GPU\n",
      step.step_s, step.compute_s, step.bubble_s, step.exposed_comm_s, step.bottleneck_stage,
      step.tokens_per_s, step.tokens_per_s / gpus, step.samples_per_s, step.tflops_per_gpu);
}

std::vector<double> parse_list(const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      std::size_t used = 0;
      out.push_back(std::stod(item, &used));
      require(used == item.size(), "'{}' is not a number", item);
    } catch (const std::logic_error&) {
      fail(HM_ERR_INVALID_ARGUMENT, "--sweep: '{}' is not a number", item);
    }
  }
  require(!out.empty(), "--sweep needs a list of Gbit/s values");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"holmes-sim: a training step simulated for Holmes's plan and the naive placement"};
  std::string topology_path, model_spec, placement = "all", calibration, sweep, csv_path;
  planner::PlanConstraints constraints;
  bool json = false;
  app.add_option("-t,--topology", topology_path, "topology file (YAML)")->required();
  app.add_option("-m,--model", model_spec, "model file (YAML) or preset")->required();
  app.add_option("--placement", placement, "holmes, naive or all")
      ->check(CLI::IsMember({"holmes", "naive", "all"}));
  app.add_option("--tp", constraints.tp, "tensor-parallel size (0: the planner chooses)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--pp", constraints.pp, "pipeline stages (0: the planner chooses)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--gpu-memory-gb", constraints.gpu_memory_gb, "memory per GPU")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--calibration", calibration,
                 "link classes measured by holmes-bench --calibrate (JSON)");
  app.add_option("--sweep", sweep,
                 "inter-island bandwidths to sweep, Gbit/s, comma-separated (e.g. 400,100,10,1)");
  app.add_option("--csv", csv_path, "with --sweep: also write the table as CSV");
  app.add_flag("--json", json, "print the whole plan and simulation as JSON");
  CLI11_PARSE(app, argc, argv);
  try {
    topology::Topology topo = topology::load_topology_file(topology_path);
    if (!calibration.empty()) {
      for (const std::string& change : planner::apply_calibration(topo, calibration)) {
        if (!json) fmt::print("calibrated {}\n", change);
      }
    }
    const planner::ModelSpec model = planner::load_model(model_spec);
    if (!sweep.empty()) {
      const auto points = planner::sweep_inter_island(topo, model, constraints, parse_list(sweep));
      fmt::print("# tokens/s per GPU vs the inter-island link ({}), {} on {} GPUs\n",
                 topo.inter_island_link, model.name, topo.total_gpus());
      fmt::print("{:>12} {:>6} {:>14} {:>14} {:>8}\n", "Gbit/s", "tp x pp", "holmes", "naive",
                 "ratio");
      std::ofstream csv;
      if (!csv_path.empty()) {
        csv.open(csv_path);
        require(csv.good(), "cannot write '{}'", csv_path);
        csv << "inter_island_gbit,tp,pp,holmes_tokens_per_gpu,naive_tokens_per_gpu,holmes_step_s,"
               "naive_step_s\n";
      }
      for (const auto& p : points) {
        fmt::print("{:>12g} {:>6} {:>14.1f} {:>14.1f} {:>8.2f}\n", p.inter_island_gbit,
                   fmt::format("{}x{}", p.tp, p.pp), p.holmes_tokens_per_gpu,
                   p.naive_tokens_per_gpu, p.holmes_tokens_per_gpu / p.naive_tokens_per_gpu);
        if (csv.is_open()) {
          csv << fmt::format("{},{},{},{},{},{},{}\n", p.inter_island_gbit, p.tp, p.pp,
                             p.holmes_tokens_per_gpu, p.naive_tokens_per_gpu, p.holmes_step_s,
                             p.naive_step_s);
        }
      }
      return 0;
    }
    const planner::Plan plan = planner::make_plan(topo, model, constraints);
    if (json) {
      std::cout << planner::plan_to_json(plan, topo).dump(2) << "\n";
      return 0;
    }
    fmt::print(
        "model {}: {} layers, hidden {}, {} heads, seq {}, vocab {}, global batch {}; "
        "{} GPUs; FLOPs per step {:.4g} (Megatron's formula, x{} for {})\n",
        model.name, model.layers, model.hidden, model.heads, model.seq_len, model.vocab,
        model.global_batch, topo.total_gpus(), model.flops_per_step(), model.recompute ? 4 : 3,
        model.recompute ? "full recompute" : "no recompute");
    if (placement != "naive") print_placement(plan.holmes, plan.holmes_step, model, topo);
    if (placement != "holmes") print_placement(plan.naive, plan.naive_step, model, topo);
    if (placement == "all") fmt::print("holmes / naive: {:.2f}x\n", plan.speedup());
  } catch (const Error& e) {
    std::fprintf(stderr, "holmes-sim: %s\n", e.what());
    return 2;
  }
  return 0;
}
