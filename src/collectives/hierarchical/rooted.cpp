// Hierarchical broadcast and reduce. Broadcast: the root's island leader (the root) broadcasts
// to the other islands' leaders, then every leader inside its island. Reduce: the reverse,
// inside each island to its leader, then across the leaders to the root. Each level picks a
// chain or a tree by the cost model.
#include "collectives/algorithms.hpp"
#include "collectives/engine/group_engine.hpp"
#include "collectives/hierarchical/segments.hpp"
#include "collectives/pipeline.hpp"
#include "core/dtype.hpp"

namespace holmes {
namespace {

using namespace hier;

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
  const int inside_root = position_in(island, my_leader);
  // Device buffers: the island's engine where it has a broadcast (CUDA IPC inside a host).
  if (inside.on_device() && island.size() > 1 &&
      inside.group_engine(GroupLevel::kIsland)
          .broadcast(inside, static_cast<std::byte*>(buffer), count * dtype_size(dtype),
                     inside_root)) {
    return;
  }
  const auto algorithm =
      choose_rooted(model, static_cast<int>(island.size()), bytes, h.same_island, false);
  rooted_broadcast(inside, algorithm, buffer, count, dtype, inside_root);
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
