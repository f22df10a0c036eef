// Re-planning after a loss: the same model placed on the ranks that survive, by the planner's
// rules, keeping the global batch, and for every rank the layers it now holds that it did not
// hold before, with the surviving rank that holds their current weights and optimizer state.
//
// Rules, in order:
//  1. Tensor parallelism is kept (a layer's shards stay the shards they were).
//  2. A data-parallel replica that lost a rank is taken out whole (the survivors of that replica
//     become spares); every other rank keeps its stage and layers, so no state moves. This is
//     the rule while at least one replica is left whole.
//  3. Otherwise (every replica lost a rank, e.g. a single-replica pipeline) the stages are
//     re-cut: each island holds as many whole stages of tp x dp' ranks as its surviving hosts
//     can form (an island that lost nothing keeps its stages and their ranks), the layers are
//     split again to minimise the predicted step, and dp' <= the old dp is the fastest predicted
//     that fits in memory. Survivors that complete no TP group or stage are spares.
//  4. The global batch is kept: its global_batch / micro_batch micro-batches divide over the
//     replicas left, the first (global_batch / micro_batch) % dp' replicas taking one more.
// Deterministic: every survivor computes the same plan from the same old plan and survivor list,
// with no communication.
#pragma once

#include <string>
#include <vector>

#include "planner/job_topology.hpp"
#include "planner/planner.hpp"

namespace holmes::planner {

// Layers [first_layer, first_layer + layers) of one rank's TP shard come from `source` (a rank
// of the new job that held that shard of those layers in the old plan), or from nowhere
// (kLost: no survivor held them; they need a checkpoint).
struct LayerSource {
  static constexpr int kLost = -1;
  int first_layer = 0;
  int layers = 0;
  int source = kLost;

  bool operator==(const LayerSource&) const = default;
};

struct Replan {
  Plan plan;                  // over the new job (index = new rank); spares have RankRole::kSpare
  JobTopology job;            // the survivors' topology and layout (hosts keep their indices)
  std::vector<int> old_rank;  // index = new rank: its rank in the old plan
  // index = new rank: the layers it holds now but did not hold (same TP shard) before, in layer
  // order, where their state comes from.
  std::vector<std::vector<LayerSource>> sources;
  bool replicas_dropped = false;  // rule 2 (else rule 3 re-cut the stages)
};

// The old job's topology and layout with only `survivors` (old ranks, ascending) left: host
// indices are kept, hosts that lost every rank keep zero GPUs.
JobTopology survivors_job(const topology::Topology& topo, const JobLayout& layout,
                          const std::vector<int>& survivors);

// Re-plans `old` (made for `topo` and `layout`; its Holmes placement) on `survivors`: the old
// ranks that survive, ascending (their index is their rank in the new job). Throws
// HM_ERR_INVALID_ARGUMENT for a bad survivor list, or, saying why for each shape tried, when the
// model no longer fits on the survivors.
Replan replan(const Plan& old, const topology::Topology& topo, const JobLayout& layout,
              const std::vector<int>& survivors);

}  // namespace holmes::planner
