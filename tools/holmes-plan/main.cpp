// holmes-plan: the planner from the command line. Loads a topology file and a model (a preset
// name or a model file), and prints Holmes's plan beside the naive placement's, as a table,
// JSON (--json) or a Graphviz picture (--dot).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "core/status.hpp"
#include "planner/calibration.hpp"
#include "planner/plan_report.hpp"
#include "planner/planner.hpp"
#include "topology/topology_file.hpp"

int main(int argc, char** argv) {
  using namespace holmes;
  CLI::App app{"holmes-plan: TP/PP/DP placement, stage split and transports for a topology"};
  std::string topology_path;
  std::string model_spec;
  planner::PlanConstraints constraints;
  bool json = false;
  bool dot = false;
  app.add_option("-t,--topology", topology_path, "topology file (YAML)")->required();
  app.add_option("-m,--model", model_spec,
                 "model file (YAML) or preset: " +
                     fmt::format("{}", fmt::join(planner::model_preset_names(), ", ")))
      ->required();
  app.add_option("--tp", constraints.tp, "tensor-parallel size (0: let the planner choose)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--pp", constraints.pp, "pipeline stages (0: let the planner choose)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--gpu-memory-gb", constraints.gpu_memory_gb,
                 "memory per GPU (default: the GPU model's)")
      ->check(CLI::NonNegativeNumber);
  std::string calibration;
  app.add_option("--calibration", calibration,
                 "link classes measured by holmes-bench --calibrate (JSON)");
  app.add_flag("--json", json, "print the plan as JSON");
  app.add_flag("--dot", dot, "print a Graphviz picture of islands, hosts and stages");
  CLI11_PARSE(app, argc, argv);
  try {
    topology::Topology topo = topology::load_topology_file(topology_path);
    if (!calibration.empty()) planner::apply_calibration(topo, calibration);
    const planner::ModelSpec model = planner::load_model(model_spec);
    const planner::Plan plan = planner::make_plan(topo, model, constraints);
    if (json) {
      std::cout << planner::plan_to_json(plan, topo).dump(2) << "\n";
    } else if (dot) {
      std::cout << planner::plan_to_dot(plan, topo);
    } else {
      std::cout << planner::plan_to_table(plan, topo);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "holmes-plan: %s\n", e.what());
    return 2;
  }
  return 0;
}
