// The step model: how long one training iteration takes under a placement. The planner uses it
// to choose degrees and split layers, and to show the naive placement's time beside Holmes's;
// holmes-sim reports it stage by stage. Collective times come from the runtime's own cost model
// (src/collectives/tuning.hpp), fed with the topology's link classes.
//
// Assumptions (docs/planner.md says more):
//  - compute: Megatron's FLOPs per layer, split over tp, at the stage's slowest GPU's speed;
//  - tensor parallel: 4 allreduces of b*s*h per layer per micro-batch (6 with recompute);
//  - pipeline: 1F1B; every micro-batch crosses each stage boundary once each way (activations
//    forward, their gradients backward, full duplex); the step's pipeline part is
//    sum_s t_s + (m - 1) * max_s t_s, t_s being stage s's time per micro-batch;
//  - data parallel (distributed optimizer): gradients reduce-scattered and parameters
//    all-gathered in the model's dtype over each stage's DP group; the reduce-scatter overlaps
//    the last micro-batch's backward and the all-gather the next step's first forward, so only
//    what sticks out of those windows adds to the step;
//  - tp x dp groups of one host share its NICs evenly.
#pragma once

#include <string>
#include <vector>

#include "scheduler/gpu_model.hpp"
#include "scheduler/model_spec.hpp"
#include "scheduler/placement.hpp"
#include "topology/topology.hpp"

namespace holmes::scheduler {

struct StageTime {
  // Per micro-batch:
  double forward_s = 0;
  double backward_s = 0;
  double tp_comm_s = 0;
  double p2p_s = 0;  // stage boundaries on both sides
  // Per step:
  double dp_reduce_scatter_s = 0;
  double dp_allgather_s = 0;
  double dp_exposed_s = 0;  // the part of both that does not overlap compute
  double memory_gb = 0;     // per GPU: weights, gradients, optimizer shard, activations

  double per_microbatch_s() const { return forward_s + backward_s + tp_comm_s + p2p_s; }
};

struct StepPrediction {
  std::vector<StageTime> stages;
  int bottleneck_stage = 0;
  double pipeline_s = 0;    // 1F1B part, bubble included
  double bubble_s = 0;      // the bottleneck stage's idle time inside the pipeline part
  double dp_exposed_s = 0;  // the slowest stage's exposed DP communication
  double step_s = 0;
  double tokens_per_s = 0;
  double samples_per_s = 0;
  double tflops_per_gpu = 0;  // Megatron's formula (recompute factor as in the model)
  double compute_s = 0;       // the bottleneck stage's compute per step
  double exposed_comm_s = 0;  // step - compute - bubble of the bottleneck stage
};

// Per-stage cost tables and the step-time formula, built once per placement so that the
// planner's layer partition can evaluate many splits cheaply.
class StepModel {
 public:
  // Keeps references to all four: they must outlive the model.
  StepModel(const topology::Topology& topo, const JobLayout& layout, const ModelSpec& model,
            const Placement& placement);

  // The prediction for `layers` per stage (sizes pp; defaults to the placement's own split).
  StepPrediction predict(const std::vector<int>& layers) const;
  StepPrediction predict() const;
  // The step time alone (the partition's objective).
  double step_seconds(const std::vector<int>& layers) const;

  int max_layers() const { return model_.layers; }
  const std::vector<GpuModel>& stage_gpus() const { return gpus_; }

 private:
  StageTime stage_time(int stage, int layers) const;

  const ModelSpec& model_;
  const Placement& placement_;
  std::vector<GpuModel> gpus_;        // per stage: its slowest GPU
  std::vector<double> p2p_seconds_;   // per stage, per micro-batch, both boundaries
  std::vector<double> tp_allreduce_;  // per stage: one TP allreduce of b*s*h
  // Per stage, indexed by its layer count: DP reduce-scatter and all-gather seconds.
  std::vector<std::vector<double>> dp_rs_by_layers_;
  std::vector<std::vector<double>> dp_ag_by_layers_;
};

}  // namespace holmes::scheduler
