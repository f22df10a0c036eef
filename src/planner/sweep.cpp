#include "planner/sweep.hpp"

#include "core/status.hpp"
#include "planner/planner.hpp"

namespace holmes::planner {

std::vector<SweepPoint> sweep_inter_island(const topology::Topology& topo, const ModelSpec& model,
                                           const PlanConstraints& constraints,
                                           const std::vector<double>& gbits) {
  std::vector<SweepPoint> out;
  for (double gbit : gbits) {
    require(gbit > 0, "sweep bandwidth must be positive, got {} Gbit/s", gbit);
    topology::Topology t = topo;
    t.link_classes.at(t.inter_island_link).gbit_per_s = gbit;
    const Plan plan = make_plan(t, model, constraints);
    const double gpus = t.total_gpus();
    out.push_back({gbit, plan.holmes.tp, plan.holmes.pp, plan.holmes_step.tokens_per_s / gpus,
                   plan.naive_step.tokens_per_s / gpus, plan.holmes_step.step_s,
                   plan.naive_step.step_s});
  }
  return out;
}

}  // namespace holmes::planner
