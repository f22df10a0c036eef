#include "planner/planner.hpp"

#include <cmath>
#include <limits>
#include <optional>

#include "core/status.hpp"

namespace holmes::planner {
namespace {

using topology::Topology;

std::vector<int> tp_candidates(const Topology& topo, const ModelSpec& model, int fixed) {
  if (fixed > 0) return {fixed};
  int smallest_host = std::numeric_limits<int>::max();
  for (const auto& host : topo.hosts) {
    if (host.gpus > 0) smallest_host = std::min(smallest_host, host.gpus);
  }
  std::vector<int> out;
  for (int tp = 1; tp <= smallest_host; tp *= 2) {
    if (model.heads % tp == 0) out.push_back(tp);
  }
  return out;
}

std::vector<int> pp_candidates(int gpus, const ModelSpec& model, int fixed) {
  if (fixed > 0) return {fixed};
  std::vector<int> out;
  for (int pp = 1; pp <= std::min(gpus, model.layers); ++pp) {
    if (gpus % pp == 0) out.push_back(pp);
  }
  return out;
}

double memory_limit(const Topology& topo, const PlanConstraints& constraints) {
  if (constraints.gpu_memory_gb > 0) return constraints.gpu_memory_gb;
  double limit = std::numeric_limits<double>::infinity();
  for (const auto& host : topo.hosts) {
    if (host.gpus > 0) limit = std::min(limit, gpu_preset(host.gpu_model).memory_gb);
  }
  return limit;
}

struct Candidate {
  Placement placement;
  StepPrediction step;
};

}  // namespace

std::vector<int> partition_layers(const StepModel& step_model, int stages) {
  const int total = step_model.max_layers();
  require(total >= stages, "{} layers cannot fill {} pipeline stages", total, stages);
  std::vector<int> layers(stages, 1);
  // Greedy water-filling: each remaining layer goes where it lengthens the step least (the
  // step is sum_s t_s + (m - 1) max_s t_s + exposed DP, so layers flow to the stages that are
  // fastest per layer until they become the bottleneck).
  for (int placed = stages; placed < total; ++placed) {
    int best_stage = 0;
    double best = std::numeric_limits<double>::infinity();
    for (int s = 0; s < stages; ++s) {
      ++layers[s];
      const double t = step_model.step_seconds(layers);
      --layers[s];
      if (t < best) {
        best = t;
        best_stage = s;
      }
    }
    ++layers[best_stage];
  }
  return layers;
}

Plan make_plan(const Topology& topo, const JobLayout& layout, const ModelSpec& model,
               const PlanConstraints& constraints) {
  model.validate();
  topo.validate();
  require(constraints.schedule == "1f1b", "pipeline schedule '{}' is not supported (only 1f1b)",
          constraints.schedule);
  require(constraints.device_tflops >= 0 && std::isfinite(constraints.device_tflops),
          "device speed must be a non-negative number of TFLOPS, got {}",
          constraints.device_tflops);
  require(constraints.tp >= 0 && constraints.pp >= 0, "tp ({}) and pp ({}) must not be negative",
          constraints.tp, constraints.pp);
  const int gpus = layout.size();
  require(gpus > 0, "the topology has no GPUs");
  Plan plan;
  plan.model = model;
  plan.constraints = constraints;
  plan.gpu_memory_gb = memory_limit(topo, constraints);

  std::optional<Candidate> best;
  std::vector<std::string> rejected;
  std::vector<std::string> feasible_shapes;  // tp x pp that place, whatever else failed
  for (int tp : tp_candidates(topo, model, constraints.tp)) {
    for (int pp : pp_candidates(gpus, model, constraints.pp)) {
      const std::string shape = fmt::format("tp {} x pp {}", tp, pp);
      if (std::string why = holmes_infeasibility(topo, layout, tp, pp); !why.empty()) {
        rejected.push_back(fmt::format("{}: {}", shape, why));
        continue;
      }
      const int dp = gpus / (tp * pp);
      if (model.heads % tp != 0) {
        rejected.push_back(
            fmt::format("{}: {} heads do not split over tp {}", shape, model.heads, tp));
        continue;
      }
      if (model.layers < pp) {
        rejected.push_back(
            fmt::format("{}: {} layers cannot fill {} stages", shape, model.layers, pp));
        continue;
      }
      if (model.global_batch % (dp * model.micro_batch) != 0) {
        rejected.push_back(
            fmt::format("{}: global batch {} is not a multiple of dp {} x micro-batch {}", shape,
                        model.global_batch, dp, model.micro_batch));
        continue;
      }
      feasible_shapes.push_back(shape);
      Candidate c{holmes_placement(topo, layout, model, tp, pp), {}};
      const StepModel step_model(topo, layout, model, c.placement, constraints.device_tflops);
      const std::vector<int> layers = partition_layers(step_model, pp);
      set_layers(c.placement, layers);
      c.step = step_model.predict(layers);
      double memory = 0;
      for (const StageTime& st : c.step.stages) memory = std::max(memory, st.memory_gb);
      if (memory > plan.gpu_memory_gb) {
        rejected.push_back(fmt::format("{}: needs {:.1f} GB per GPU, more than {:.1f} GB", shape,
                                       memory, plan.gpu_memory_gb));
        continue;
      }
      if (!best || c.step.step_s < best->step.step_s) best = std::move(c);
    }
  }
  if (!best) {
    std::string message =
        fmt::format("no placement of '{}' fits this topology ({} GPUs):", model.name, gpus);
    for (const std::string& why : rejected) message += "\n  " + why;
    if (!feasible_shapes.empty() && (constraints.tp > 0 || constraints.pp > 0)) {
      message += fmt::format("\n  shapes that can be placed: {}", fmt::join(feasible_shapes, ", "));
    }
    if (constraints.tp > 0 || constraints.pp > 0) {
      message += "\n  leave tp and pp open (0 / auto) to let the planner search every shape";
    }
    fail(HM_ERR_INVALID_ARGUMENT, "{}", message);
  }
  plan.holmes = std::move(best->placement);
  plan.holmes_step = best->step;
  plan.notes.push_back(fmt::format(
      "chose tp {} x pp {} x dp {} ({} micro-batches per step): the fastest predicted of the "
      "shapes that place and fit",
      plan.holmes.tp, plan.holmes.pp, plan.holmes.dp, plan.holmes.micro_batches));
  for (const std::string& why : rejected) plan.notes.push_back("rejected " + why);

  plan.naive = naive_placement(topo, layout, model, plan.holmes.tp, plan.holmes.pp);
  const StepModel naive_model(topo, layout, model, plan.naive, constraints.device_tflops);
  plan.naive_step = naive_model.predict();
  return plan;
}

}  // namespace holmes::planner
