// The step model: how long one training iteration takes under a placement. The planner uses it
// to choose degrees and split layers, holmes-sim reports it stage by stage, and both show the
// naive placement's time beside Holmes's. Collective times come from the runtime's own cost
// model (src/collectives/tuning.hpp), fed with the topology's link classes.
//
// It simulates the step rather than summing a formula (docs/planner.md has the details):
//  - compute: Megatron's FLOPs per layer, split over tp, at the stage's slowest GPU's speed;
//  - tensor parallel: 2 allreduces of b*s*h per layer in the forward, 2 in the backward (and 2
//    more when the backward recomputes the forward), inside the host;
//  - pipeline: the 1F1B schedule event by event (warm-up forwards, one-forward-one-backward,
//    cool-down backwards), each operation starting when its stage is free and its input has
//    arrived; a send holds its stage until the transfer ends, as Megatron's blocking p2p does;
//  - data parallel (distributed optimizer): gradients reduce-scattered and parameters
//    all-gathered in buckets of 40M parameters over each stage's DP group. With overlap (Holmes,
//    as Megatron-LLaMA) each gradient bucket starts as soon as the last micro-batch's backward
//    has produced it and the parameter all-gather runs ahead of the next step's first forward;
//    without it (the naive placement, as Megatron-LM) both follow the backward in full;
//  - the tp x dp groups of one host share its NICs evenly.
#pragma once

#include <string>
#include <vector>

#include "planner/gpu_model.hpp"
#include "planner/model_spec.hpp"
#include "planner/placement.hpp"
#include "topology/topology.hpp"

namespace holmes::planner {

struct StageTime {
  // Per micro-batch, the schedule's inputs:
  double forward_s = 0;   // compute of the forward
  double backward_s = 0;  // compute of the backward (recompute included)
  double tp_comm_s = 0;   // tensor-parallel allreduces, forward and backward together
  double p2p_s = 0;       // blocking sends to the neighbouring stages, both together
  // Per step, what the schedule made of them:
  double compute_s = 0;            // micro-batches x (forward + backward)
  double comm_s = 0;               // micro-batches x (tp + p2p): communication on the critical path
  double bubble_s = 0;             // waiting for other stages (and for parameters, with overlap)
  double dp_reduce_scatter_s = 0;  // the whole stage's, bucket by bucket
  double dp_allgather_s = 0;
  double dp_exposed_s = 0;  // how far the DP collectives push the stage's end past its backward
  double end_s = 0;         // when the stage is done with the step
  double memory_gb = 0;     // per GPU: weights, gradients, optimizer shard, activations

  double per_microbatch_s() const { return forward_s + backward_s + tp_comm_s + p2p_s; }
};

struct StepPrediction {
  std::vector<StageTime> stages;
  int bottleneck_stage = 0;  // the stage that ends last
  double step_s = 0;
  // The bottleneck stage's step, split: step_s = compute_s + bubble_s + exposed_comm_s.
  double compute_s = 0;
  double bubble_s = 0;
  double exposed_comm_s = 0;  // tp + p2p on the critical path + exposed DP
  double dp_exposed_s = 0;    // the bottleneck stage's exposed DP part of exposed_comm_s
  double tokens_per_s = 0;
  double samples_per_s = 0;
  double tflops_per_gpu = 0;  // Megatron's formula (recompute factor as in the model)
};

// Per-stage cost tables and the step-time formula, built once per placement so that the
// planner's layer partition can evaluate many splits cheaply.
class StepModel {
 public:
  // Keeps references to all four: they must outlive the model.
  // `device_tflops` > 0 replaces every GPU preset's speed with a measured one.
  StepModel(const topology::Topology& topo, const JobLayout& layout, const ModelSpec& model,
            const Placement& placement, double device_tflops = 0);

  // The prediction for `layers` per stage (sizes pp; defaults to the placement's own split).
  StepPrediction predict(const std::vector<int>& layers) const;
  StepPrediction predict() const;
  // The step time alone (the partition's objective).
  double step_seconds(const std::vector<int>& layers) const;

  int max_layers() const { return model_.layers; }
  const std::vector<GpuModel>& stage_gpus() const { return gpus_; }

 private:
  StageTime stage_time(int stage, int layers) const;
  // Runs the 1F1B schedule over the stages' per-micro-batch times; fills the per-step fields.
  void simulate(std::vector<StageTime>& stages, const std::vector<int>& layers) const;

  const ModelSpec& model_;
  const Placement& placement_;
  std::vector<GpuModel> gpus_;        // per stage: its slowest GPU
  std::vector<double> p2p_seconds_;   // per stage, per micro-batch, both boundaries
  std::vector<double> tp_allreduce_;  // per stage: one TP allreduce of b*s*h
  // Per stage, indexed by its layer count: DP buckets, and one bucket's reduce-scatter and
  // all-gather seconds.
  struct DpCost {
    int buckets = 0;
    double reduce_scatter_s = 0;
    double allgather_s = 0;
  };
  std::vector<std::vector<DpCost>> dp_by_layers_;
  std::vector<double> p2p_to_next_;  // per stage: one micro-batch's send to stage s + 1
};

}  // namespace holmes::planner
