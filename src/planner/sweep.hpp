// What-if sweeps over a topology: how tokens/s per GPU follow the inter-island bandwidth for
// Holmes's plan and the naive placement (holmes-sim --sweep).
#pragma once

#include <vector>

#include "planner/model_spec.hpp"
#include "topology/topology.hpp"

namespace holmes::planner {

struct SweepPoint {
  double inter_island_gbit = 0;
  int tp = 0;
  int pp = 0;
  double holmes_tokens_per_gpu = 0;  // tokens/s per GPU
  double naive_tokens_per_gpu = 0;
  double holmes_step_s = 0;
  double naive_step_s = 0;
};

// Re-plans for each bandwidth of the inter-island link class (Gbit/s), everything else as in
// `topo`. The planner may choose other degrees at other bandwidths (the naive placement always
// runs with Holmes's degrees).
std::vector<SweepPoint> sweep_inter_island(const topology::Topology& topo, const ModelSpec& model,
                                           const PlanConstraints& constraints,
                                           const std::vector<double>& gbits);

}  // namespace holmes::planner
