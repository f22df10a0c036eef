// Hierarchical collectives: the slow tier between islands carries as few bytes as possible, and
// every rank's own uplink carries its share.
//
//   allreduce  1. inside each island, a ring reduce-scatter into M shards (M = ranks of the
//                 smallest island; in a larger island the ranks past M own no shard);
//              2. shard k is allreduced across islands by lane k: the k-th rank of every island
//                 (ring or recursive doubling, by the cost model), so M uplinks work at once and
//                 each carries 1/M of the data;
//              3. inside each island, a ring allgather of the shards.
//   broadcast  the root's island leader (the root) broadcasts to the other islands' leaders,
//              then every leader inside its island.
//   reduce     the reverse: inside each island to its leader, then across leaders to the root.
// Each element is reduced in a fixed order (island ring order, then lane order), and allreduce
// results are copied out from the one rank that reduced them: identical bits on every rank.
#include <algorithm>
#include <vector>

#include "collectives/algorithms.hpp"
#include "collectives/pipeline.hpp"
#include "core/dtype.hpp"

namespace holmes {
namespace {

// Phases of one operation: distinct numbers keep their tags apart.
enum Phase : std::uint64_t { kFirst = 1, kSecond = 2, kThird = 3 };

struct Place {
  int island = 0;    // index into Hierarchy::islands
  int position = 0;  // position in that island's member list
};

Place place_of(const Hierarchy& h, int rank) {
  const int island = h.island[static_cast<std::size_t>(rank)];
  const auto& members = h.islands[static_cast<std::size_t>(island)];
  const auto it = std::find(members.begin(), members.end(), rank);
  return {island, static_cast<int>(it - members.begin())};
}

// The rank of each island that talks across islands for a rooted collective: the root in its
// own island, the first member elsewhere.
std::vector<int> leaders_for(const Hierarchy& h, int root) {
  std::vector<int> leaders;
  const int root_island = h.island[static_cast<std::size_t>(root)];
  for (std::size_t i = 0; i < h.islands.size(); ++i) {
    leaders.push_back(static_cast<int>(i) == root_island ? root : h.islands[i].front());
  }
  return leaders;
}

int position_in(const std::vector<int>& members, int rank) {
  return static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
}

void rooted_broadcast(CollectiveContext& ctx, Algorithm algorithm, void* buffer, std::size_t count,
                      hm_dtype_t dtype, int root) {
  if (algorithm == Algorithm::kTree) return tree_broadcast(ctx, buffer, count, dtype, root);
  chain_broadcast(ctx, buffer, count, dtype, root);
}

void rooted_reduce(CollectiveContext& ctx, Algorithm algorithm, const void* send, void* recv,
                   std::size_t count, hm_dtype_t dtype, hm_op_t op, int root, int average_over) {
  if (algorithm == Algorithm::kTree) {
    return tree_reduce(ctx, send, recv, count, dtype, op, root, average_over);
  }
  chain_reduce(ctx, send, recv, count, dtype, op, root, average_over);
}

}  // namespace

void hierarchical_allreduce(CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                            const void* send, void* recv, std::size_t count, hm_dtype_t dtype,
                            hm_op_t op) {
  const std::size_t es = dtype_size(dtype);
  const int n = ctx.size();
  auto* out = static_cast<std::byte*>(recv);
  const auto* in = static_cast<const std::byte*>(send);
  if (n == 1 || count == 0) {
    ctx.copy(out, in, count * es);
    return;
  }
  const Place me = place_of(h, ctx.rank());
  const auto& island = h.islands[static_cast<std::size_t>(me.island)];
  std::size_t lanes = island.size();
  for (const auto& other : h.islands) lanes = std::min(lanes, other.size());
  // The island's blocks: shard k for positions k < lanes, nothing for the others.
  const BlockLayout shards(count, static_cast<int>(lanes), count);
  std::vector<BlockLayout::Range> blocks;
  for (std::size_t k = 0; k < island.size(); ++k) {
    blocks.push_back(k < lanes ? BlockLayout::Range{shards.block_start(static_cast<int>(k)),
                                                    shards.block_size(static_cast<int>(k))}
                               : BlockLayout::Range{0, 0});
  }
  const BlockLayout layout(std::move(blocks), chunk_elements(ctx, es));
  auto island_ctx = ctx.view(island, kFirst);
  const std::size_t own_start = layout.block_start(me.position);
  const std::size_t own_count = layout.block_size(me.position);
  // 1. Sums only: the average divides once, after the lanes.
  ring_reduce_scatter_blocks(island_ctx, in, out + own_start * es, layout, dtype, op, 0, nullptr);
  // 2. Lane `position` allreduces its shard across the islands, in place.
  if (static_cast<std::size_t>(me.position) < lanes) {
    std::vector<int> lane;
    for (const auto& other : h.islands) {
      lane.push_back(other[static_cast<std::size_t>(me.position)]);
    }
    auto lane_ctx = ctx.view(lane, kSecond);
    std::byte* shard = out + own_start * es;
    const auto inner = choose_lane_allreduce(model, static_cast<int>(lane.size()),
                                             static_cast<double>(own_count * es), h.other_island);
    if (inner == Algorithm::kRecursiveDoubling) {
      recursive_doubling_allreduce(lane_ctx, shard, shard, own_count, dtype, op, n);
    } else {
      ring_allreduce(lane_ctx, shard, shard, own_count, dtype, op, n);
    }
  }
  // 3. Every rank of the island gets every shard.
  auto gather_ctx = ctx.view(island, kThird);
  ring_allgather_blocks(gather_ctx, out, layout, dtype);
}

void hierarchical_broadcast(CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                            void* buffer, std::size_t count, hm_dtype_t dtype, int root) {
  const double bytes = static_cast<double>(count * dtype_size(dtype));
  if (ctx.size() == 1 || count == 0) return;
  const auto leaders = leaders_for(h, root);
  const Place me = place_of(h, ctx.rank());
  const auto& island = h.islands[static_cast<std::size_t>(me.island)];
  const int my_leader = leaders[static_cast<std::size_t>(me.island)];
  if (ctx.rank() == my_leader && leaders.size() > 1) {
    auto across = ctx.view(leaders, kFirst);
    const auto algorithm =
        choose_rooted(model, static_cast<int>(leaders.size()), bytes, h.other_island, false);
    rooted_broadcast(across, algorithm, buffer, count, dtype,
                     h.island[static_cast<std::size_t>(root)]);
  }
  auto inside = ctx.view(island, kSecond);
  const auto algorithm =
      choose_rooted(model, static_cast<int>(island.size()), bytes, h.same_island, false);
  rooted_broadcast(inside, algorithm, buffer, count, dtype, position_in(island, my_leader));
}

void hierarchical_reduce(CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                         const void* send, void* recv, std::size_t count, hm_dtype_t dtype,
                         hm_op_t op, int root) {
  const std::size_t bytes = count * dtype_size(dtype);
  const int n = ctx.size();
  if (count == 0) return;
  const auto leaders = leaders_for(h, root);
  const Place me = place_of(h, ctx.rank());
  const auto& island = h.islands[static_cast<std::size_t>(me.island)];
  const int my_leader = leaders[static_cast<std::size_t>(me.island)];
  const bool across_islands = leaders.size() > 1;
  // 1. Inside the island to its leader: the root's output, or a leader's phase buffer.
  std::byte* partial = nullptr;
  if (ctx.rank() == root) {
    partial = static_cast<std::byte*>(recv);
  } else if (ctx.rank() == my_leader) {
    partial = ctx.phase_buffer(bytes);
  }
  auto inside = ctx.view(island, kFirst);
  rooted_reduce(inside,
                choose_rooted(model, static_cast<int>(island.size()), static_cast<double>(bytes),
                              h.same_island, true),
                send, partial, count, dtype, op, position_in(island, my_leader),
                across_islands ? 0 : n);
  // 2. Across the leaders to the root.
  if (across_islands && ctx.rank() == my_leader) {
    auto across = ctx.view(leaders, kSecond);
    rooted_reduce(across,
                  choose_rooted(model, static_cast<int>(leaders.size()), static_cast<double>(bytes),
                                h.other_island, true),
                  partial, ctx.rank() == root ? recv : nullptr, count, dtype, op,
                  h.island[static_cast<std::size_t>(root)], n);
  }
}

}  // namespace holmes
