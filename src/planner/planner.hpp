// The planner: from a topology and a model, the TP/PP/DP degrees, the rank of every group, the
// layers of every stage and the link of every group, with the predicted step time, and the same
// prediction for the naive placement so that the gain is visible.
//
// Rules (the Holmes paper's, enforced rather than assumed):
//  - tensor-parallel groups stay inside one host (NVLink / shared memory);
//  - data-parallel groups stay inside one island, so gradients move over its RDMA fabric: each
//    island holds whole pipeline stages;
//  - stages follow each other island by island, so only one boundary per island pair crosses
//    the slow ethernet;
//  - layers per stage minimise the predicted step (compute, TP, p2p and exposed DP time of each
//    stage under 1F1B), so faster islands get more layers; no hand-given ratio.
// Degrees the user leaves open (tp, pp = 0) are searched: every feasible pair is placed,
// partitioned and predicted, and the fastest that fits in GPU memory wins. Deterministic: the
// same inputs give the same plan on every rank.
#pragma once

#include <string>
#include <vector>

#include "planner/model_spec.hpp"
#include "planner/placement.hpp"
#include "planner/step_model.hpp"
#include "topology/topology.hpp"

namespace holmes::planner {

struct Plan {
  ModelSpec model;
  PlanConstraints constraints;
  double gpu_memory_gb = 0;  // the limit plans were held to
  Placement holmes;
  StepPrediction holmes_step;
  Placement naive;  // same degrees, Megatron-LM's order and split, one network
  StepPrediction naive_step;
  // What was chosen and why, and what was rejected (one line each).
  std::vector<std::string> notes;

  double speedup() const { return naive_step.step_s / holmes_step.step_s; }
};

// Throws HM_ERR_INVALID_ARGUMENT when nothing can be placed, saying why for each (tp, pp)
// tried and which values would work.
Plan make_plan(const topology::Topology& topo, const JobLayout& layout, const ModelSpec& model,
               const PlanConstraints& constraints);
inline Plan make_plan(const topology::Topology& topo, const ModelSpec& model,
                      const PlanConstraints& constraints) {
  return make_plan(topo, JobLayout(topo), model, constraints);
}

// The layer split that minimises the predicted step under `step_model` (every stage >= 1).
std::vector<int> partition_layers(const StepModel& step_model, int stages);

}  // namespace holmes::planner
