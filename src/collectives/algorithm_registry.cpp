#include "collectives/registry.hpp"

#include <algorithm>

#include "collectives/algorithms.hpp"
#include "collectives/link_probe.hpp"
#include "collectives/predictions.hpp"

namespace holmes {
namespace {

using K = CollectiveKind;
using A = Algorithm;
using Call = CollectiveCall;
namespace p = predictions;

// The flat rings and chains follow the island-grouped order, crossing each slow tier the fewest
// times.
CollectiveContext ordered(CollectiveContext& ctx, const Hierarchy& h) {
  return ctx.view(h.ring_order, 0);
}

int position_in_ring(const Hierarchy& h, int rank) {
  return static_cast<int>(std::find(h.ring_order.begin(), h.ring_order.end(), rank) -
                          h.ring_order.begin());
}

// The rows' runs. AVG divides by the communicator's size where a result is complete.

void ring_allreduce_run(CollectiveContext& ctx, const Hierarchy& h, const CostModel&,
                        const Call& c) {
  auto ring = ordered(ctx, h);
  ring_allreduce(ring, c.send, c.recv, c.count, c.dtype, c.op);
}
void rd_allreduce_run(CollectiveContext& ctx, const Hierarchy&, const CostModel&, const Call& c) {
  recursive_doubling_allreduce(ctx, c.send, c.recv, c.count, c.dtype, c.op, ctx.size());
}
void rhd_allreduce_run(CollectiveContext& ctx, const Hierarchy&, const CostModel&, const Call& c) {
  halving_doubling_allreduce(ctx, c.send, c.recv, c.count, c.dtype, c.op, ctx.size());
}
void hier_allreduce_run(CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                        const Call& c) {
  hierarchical_allreduce(ctx, h, model, c.send, c.recv, c.count, c.dtype, c.op);
}
void shm_allreduce_run(CollectiveContext& ctx, const Hierarchy&, const CostModel&, const Call& c) {
  shared_memory_allreduce(ctx, c.send, c.recv, c.count, c.dtype, c.op);
}

void ring_reduce_scatter_run(CollectiveContext& ctx, const Hierarchy&, const CostModel&,
                             const Call& c) {
  ring_reduce_scatter(ctx, c.send, c.recv, c.count, c.dtype, c.op);
}
void hier_reduce_scatter_run(CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                             const Call& c) {
  hierarchical_reduce_scatter(ctx, h, model, c.send, c.recv, c.count, c.dtype, c.op);
}
void ring_allgather_run(CollectiveContext& ctx, const Hierarchy&, const CostModel&, const Call& c) {
  ring_allgather(ctx, c.send, c.recv, c.count, c.dtype);
}
void hier_allgather_run(CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                        const Call& c) {
  hierarchical_allgather(ctx, h, model, c.send, c.recv, c.count, c.dtype);
}

void chain_broadcast_run(CollectiveContext& ctx, const Hierarchy& h, const CostModel&,
                         const Call& c) {
  auto chain = ordered(ctx, h);
  chain_broadcast(chain, c.recv, c.count, c.dtype, position_in_ring(h, c.root));
}
void tree_broadcast_run(CollectiveContext& ctx, const Hierarchy&, const CostModel&, const Call& c) {
  tree_broadcast(ctx, c.recv, c.count, c.dtype, c.root);
}
void hier_broadcast_run(CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                        const Call& c) {
  hierarchical_broadcast(ctx, h, model, c.recv, c.count, c.dtype, c.root);
}
void shm_broadcast_run(CollectiveContext& ctx, const Hierarchy&, const CostModel&, const Call& c) {
  shared_memory_broadcast(ctx, c.recv, c.count, c.dtype, c.root);
}

void chain_reduce_run(CollectiveContext& ctx, const Hierarchy& h, const CostModel&, const Call& c) {
  auto chain = ordered(ctx, h);
  chain_reduce(chain, c.send, c.recv, c.count, c.dtype, c.op, position_in_ring(h, c.root),
               ctx.size());
}
void tree_reduce_run(CollectiveContext& ctx, const Hierarchy&, const CostModel&, const Call& c) {
  tree_reduce(ctx, c.send, c.recv, c.count, c.dtype, c.op, c.root, ctx.size());
}
void hier_reduce_run(CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                     const Call& c) {
  hierarchical_reduce(ctx, h, model, c.send, c.recv, c.count, c.dtype, c.op, c.root);
}
void shm_reduce_run(CollectiveContext& ctx, const Hierarchy&, const CostModel&, const Call& c) {
  shared_memory_reduce(ctx, c.send, c.recv, c.count, c.dtype, c.op, c.root);
}

void pairwise_alltoall_run(CollectiveContext& ctx, const Hierarchy&, const CostModel&,
                           const Call& c) {
  pairwise_alltoall(ctx, c.send, c.recv, c.count, c.dtype);
}
void hier_alltoall_run(CollectiveContext& ctx, const Hierarchy& h, const CostModel&,
                       const Call& c) {
  hierarchical_alltoall(ctx, h, c.send, c.recv, c.count, c.dtype);
}

void dissemination_barrier_run(CollectiveContext& ctx, const Hierarchy&, const CostModel&,
                               const Call&) {
  dissemination_barrier(ctx);
}
void hier_barrier_run(CollectiveContext& ctx, const Hierarchy& h, const CostModel&, const Call&) {
  hierarchical_barrier(ctx, h);
}
void shm_barrier_run(CollectiveContext& ctx, const Hierarchy&, const CostModel&, const Call&) {
  shared_memory_barrier(ctx);
}

// This rank's results into its own block, then every rank's to all (phase 0; the pairs measure
// in phases of their own).
void link_probe_run(CollectiveContext& ctx, const Hierarchy& h, const CostModel&, const Call& c) {
  auto* values = static_cast<double*>(c.recv);
  const auto mine = static_cast<std::size_t>(ctx.rank()) * c.count;
  measure_links(ctx, h, {values + mine, c.count});
  ring_allgather(ctx, values + mine, c.recv, c.count, c.dtype);
}

// Per collective in CollectiveKind order. The communicator's own exchanges (those of
// hm_comm_split, the link probe) have the plain ring only: they run before anything else is
// agreed, and the probe is what gives the model its numbers.
constexpr AlgorithmEntry kEntries[] = {
    {K::kAllreduce, A::kRing, ring_allreduce_run, p::ring_allreduce},
    {K::kAllreduce, A::kRecursiveDoubling, rd_allreduce_run, p::rd_allreduce},
    {K::kAllreduce, A::kHalvingDoubling, rhd_allreduce_run, p::rhd_allreduce},
    {K::kAllreduce, A::kHierarchical, hier_allreduce_run, p::hierarchical_allreduce},
    {K::kAllreduce, A::kSharedMemory, shm_allreduce_run, p::shared_memory_allreduce},
    {K::kReduceScatter, A::kRing, ring_reduce_scatter_run, p::ring_reduce_scatter},
    {K::kReduceScatter, A::kHierarchical, hier_reduce_scatter_run, p::hierarchical_reduce_scatter},
    {K::kAllgather, A::kRing, ring_allgather_run, p::ring_allgather},
    {K::kAllgather, A::kHierarchical, hier_allgather_run, p::hierarchical_allgather},
    {K::kBroadcast, A::kChain, chain_broadcast_run, p::chain_broadcast},
    {K::kBroadcast, A::kTree, tree_broadcast_run, p::tree_broadcast},
    {K::kBroadcast, A::kHierarchical, hier_broadcast_run, p::hierarchical_broadcast},
    {K::kBroadcast, A::kSharedMemory, shm_broadcast_run, p::shared_memory_broadcast},
    {K::kReduce, A::kChain, chain_reduce_run, p::chain_reduce},
    {K::kReduce, A::kTree, tree_reduce_run, p::tree_reduce},
    {K::kReduce, A::kHierarchical, hier_reduce_run, p::hierarchical_reduce},
    {K::kReduce, A::kSharedMemory, shm_reduce_run, p::shared_memory_reduce},
    {K::kAlltoall, A::kPairwise, pairwise_alltoall_run, p::pairwise_alltoall},
    {K::kAlltoall, A::kHierarchical, hier_alltoall_run, p::hierarchical_alltoall},
    {K::kBarrier, A::kDissemination, dissemination_barrier_run, p::dissemination_barrier},
    {K::kBarrier, A::kHierarchical, hier_barrier_run, p::hierarchical_barrier},
    {K::kBarrier, A::kSharedMemory, shm_barrier_run, p::shared_memory_barrier},
    {K::kSplit, A::kRing, ring_allgather_run, p::ring_allgather},
    {K::kLinkProbe, A::kRing, link_probe_run, p::never},
};

}  // namespace

std::span<const AlgorithmEntry> algorithm_entries() { return kEntries; }

const AlgorithmEntry* find_algorithm(CollectiveKind kind, Algorithm algorithm) {
  for (const auto& entry : kEntries) {
    if (entry.kind == kind && entry.algorithm == algorithm) return &entry;
  }
  return nullptr;
}

}  // namespace holmes
