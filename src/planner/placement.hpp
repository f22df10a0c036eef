// A placement: which rank plays which part of a TP x PP x DP job, how many layers each pipeline
// stage holds, and which link every group runs over. The planner builds Holmes's placement
// (stages tile islands, DP groups inside one island, each group on its own fabric) and the
// naive one (Megatron-LM's rank order, an even layer split, and NCCL's one network per job) to
// compare them with the same step model.
#pragma once

#include <string>
#include <vector>

#include "planner/model_spec.hpp"
#include "topology/topology.hpp"

namespace holmes::planner {

// Which host each rank of the job runs on.
struct JobLayout {
  std::vector<int> host_of_rank;  // index into Topology::hosts
  // The topology's own layout: host by host, `gpus` ranks each (a launcher's order).
  explicit JobLayout(const topology::Topology& topo);
  // A running job's: ranks may be spread over hosts in any order.
  explicit JobLayout(std::vector<int> hosts) : host_of_rank(std::move(hosts)) {}
  int size() const { return static_cast<int>(host_of_rank.size()); }
};

enum class GroupKind { kTensor, kData, kPipeline };
const char* group_kind_name(GroupKind kind);  // "tp", "dp", "pp"

struct Group {
  GroupKind kind = GroupKind::kData;
  std::vector<int> ranks;  // in the group's rank order (tp index, dp index or stage)
  // How the group's widest link is carried: "nvlink" (one host), "ib"/"roce" (RDMA inside an
  // island), "tcp" (ethernet between islands or the NCCL fallback), and that link's class.
  std::string transport;
  std::string link_class;
};

struct Stage {
  int first_layer = 0;
  int layers = 0;
  std::vector<int> hosts;  // indices into Topology::hosts, in order
  std::string island;      // the island of its hosts ("" when they span islands)
};

// A rank's part in a placement. A re-planned job may leave survivors out (too few to form a
// whole TP group or stage): their role is kSpare in every field.
struct RankRole {
  static constexpr int kSpare = -1;
  int stage = 0;
  int dp = 0;
  int tp = 0;

  bool spare() const { return stage == kSpare; }
};

struct Placement {
  std::string name;  // "holmes" or "naive"
  int tp = 1;
  int pp = 1;
  int dp = 1;
  int micro_batches = 1;  // per step, per data-parallel replica (the most any replica runs)
  // Per replica (index = dp index) when they differ: a re-plan keeps the global batch, and when
  // its micro-batches do not divide over the replicas left, the first ones take one more.
  // Empty: every replica runs micro_batches.
  std::vector<int> replica_micro_batches;
  // NCCL's rule for the naive placement: one network for the whole job, so a job whose hosts do
  // not all share one RDMA island runs every inter-host group over TCP.
  bool single_network = false;
  // Whether gradient reduce-scatter and parameter all-gather overlap compute (Holmes, like
  // Megatron-LLaMA's overlapped distributed optimizer) or follow the backward (Megatron-LM).
  bool overlap_dp = true;
  std::vector<RankRole> roles;  // index = rank (every rank of the job, spares included)
  std::vector<int> grid;        // rank at (stage, dp, tp): grid[(stage * dp + d) * tp + t]
  std::vector<Stage> stages;
  std::vector<Group> tp_groups;  // one per (stage, dp)
  std::vector<Group> dp_groups;  // one per (stage, tp)
  std::vector<Group> pp_groups;  // one per (dp, tp)

  int rank_at(int stage, int d, int t) const { return grid[(stage * dp + d) * tp + t]; }
  int micro_batches_of(int d) const {
    return replica_micro_batches.empty() ? micro_batches : replica_micro_batches.at(d);
  }
};

// The link class two hosts' GPUs use under `placement` (the naive placement's one-network rule
// included).
const topology::LinkClass& placement_link(const topology::Topology& topo, const Placement& p,
                                          int host_a, int host_b);

// Fills roles-derived fields: groups (with transports), stage hosts and islands, first layers.
// `p.grid`, `p.tp/pp/dp` and each stage's `layers` must be set. The layout may hold more ranks
// than the grid places: those are spares.
void finish_placement(const topology::Topology& topo, const JobLayout& layout, Placement& p);

// Sets each stage's layer count and first layer; groups and hosts do not depend on them.
void set_layers(Placement& p, const std::vector<int>& layers);

// Megatron-LM's order (tp fastest, then dp, then pipeline stage) over ranks in host order, with
// layers split evenly (the first stages take one more when they do not divide). `ranks` (in
// launch order) are the ranks it places, by default all of them.
Placement naive_placement(const topology::Topology& topo, const JobLayout& layout,
                          const ModelSpec& model, int tp, int pp);
Placement naive_placement(const topology::Topology& topo, const JobLayout& layout,
                          const ModelSpec& model, int tp, int pp, const std::vector<int>& ranks);

// The ranks in the order Holmes's placement cuts into stages: island by island (in order of
// first appearance), host by host inside each, rank order on a host. One list per island.
std::vector<std::vector<int>> holmes_rank_order(const topology::Topology& topo,
                                                const JobLayout& layout);

// Holmes's order: each island's ranks (host order) are cut into whole stages of tp x dp ranks,
// islands one after another, so DP and TP groups never leave an island or host and only the
// boundaries between islands cross the slow link. Layers are left at an even split (the
// planner's partition sets them). Throws HM_ERR_INVALID_ARGUMENT saying which island or host
// cannot hold whole stages or TP groups.
Placement holmes_placement(const topology::Topology& topo, const JobLayout& layout,
                           const ModelSpec& model, int tp, int pp);

// Why (tp, pp) cannot be laid out the Holmes way on this topology; "" when it can.
std::string holmes_infeasibility(const topology::Topology& topo, const JobLayout& layout, int tp,
                                 int pp);

}  // namespace holmes::planner
