// Hierarchical alltoall: own-island blocks direct; the rest through the lanes (lane p serves
// group p of every island), one message per lane and island pair across the slow tier.
#include "collectives/algorithms.hpp"
#include "collectives/hierarchical/island_blocks.hpp"
#include "collectives/hierarchical/segments.hpp"
#include "collectives/pipeline.hpp"
#include "core/dtype.hpp"

namespace holmes {

using namespace hier;

void hierarchical_alltoall(CollectiveContext& ctx, const Hierarchy& h, const void* send, void* recv,
                           std::size_t count, hm_dtype_t dtype) {
  // Blocks for the own island go straight to their ranks. A block for another island goes to
  // the member of this island whose lane serves its destination (lane p serves group p of every
  // island), which sends everything its island has for that island's group p in one message to
  // lane p's member there, which hands each block to its rank. Across the slow tier: one message
  // per lane and island pair instead of one per pair of ranks, every lane on its own uplink.
  const std::size_t block = count * dtype_size(dtype);
  const auto n = static_cast<std::size_t>(ctx.size());
  if (block == 0) return;
  auto* out = static_cast<std::byte*>(recv);
  const auto* in = static_cast<const std::byte*>(send);
  if (overlaps(send, n * block, recv, n * block)) {
    std::byte* staged = ctx.scratch(n * block);
    ctx.copy(staged, in, n * block);
    in = staged;
  }
  const IslandBlocks islands(h, count);
  const Place me = place_of(h, ctx.rank());
  const auto& island = islands.members(me.island);
  const auto at = [block](int rank) { return static_cast<std::size_t>(rank) * block; };
  // Steps of the per-block messages inside an island: 0 for the own island's blocks, else 1 +
  // (island, position) of the block's far end.
  const auto largest = static_cast<std::uint64_t>(h.summary.largest_island);
  const auto step_of = [largest](int other, int position) {
    return static_cast<std::uint64_t>(other) * largest + static_cast<std::uint64_t>(position);
  };

  // 1. Inside the island: own-island blocks to their ranks; other islands' blocks to the lane
  // member that serves their destination. A lane member collects, per other island j, what its
  // island has for j's group: [source member][destination in the group].
  auto inside = ctx.view(island, kFirst);
  std::vector<Transfer> transfers;
  const bool lane = me.position < islands.lanes();
  const auto [my_first, my_size] =
      lane ? islands.group(me.island, me.position) : std::pair<int, int>{0, 0};
  // A lane member's buffer, per other island j (bytes): what goes to j (this island's members x
  // j's group), then what comes from j (j's members x this member's group).
  std::vector<BlockLayout::Range> outgoing(static_cast<std::size_t>(islands.islands()));
  std::vector<BlockLayout::Range> incoming(outgoing.size());
  std::size_t bytes = 0;
  for (int j = 0; j < islands.islands() && lane; ++j) {
    if (j == me.island) continue;
    const auto size = static_cast<std::size_t>(islands.group(j, me.position).second);
    outgoing[static_cast<std::size_t>(j)] = {bytes, island.size() * size * block};
    bytes += outgoing[static_cast<std::size_t>(j)].count;
  }
  for (int j = 0; j < islands.islands() && lane; ++j) {
    if (j == me.island) continue;
    const auto from = islands.members(j).size() * static_cast<std::size_t>(my_size) * block;
    incoming[static_cast<std::size_t>(j)] = {bytes, from};
    bytes += from;
  }
  std::byte* buffer = lane ? ctx.phase_buffer(bytes) : nullptr;
  // Where the lane member keeps the block from member q of this island for member t of island j.
  const auto gathered = [&](int j, std::size_t q, int t) {
    const auto [first, size] = islands.group(j, me.position);
    return buffer + outgoing[static_cast<std::size_t>(j)].offset +
           (q * static_cast<std::size_t>(size) + static_cast<std::size_t>(t - first)) * block;
  };
  for (std::size_t t = 0; t < island.size(); ++t) {
    const int rank = island[t];
    if (rank == ctx.rank()) {
      ctx.copy(out + at(rank), in + at(rank), block);
    } else {
      transfers.push_back(inside.recv(static_cast<int>(t), 0, {out + at(rank), block}));
      transfers.push_back(inside.send(static_cast<int>(t), 0, {in + at(rank), block}));
    }
  }
  for (int j = 0; j < islands.islands(); ++j) {
    if (j == me.island) continue;
    const auto& far = islands.members(j);
    for (std::size_t t = 0; t < far.size(); ++t) {
      const int p = islands.lane_of(j, static_cast<int>(t));
      const auto step = step_of(j, static_cast<int>(t)) + 1;
      if (p == me.position) {
        ctx.copy(gathered(j, static_cast<std::size_t>(me.position), static_cast<int>(t)),
                 in + at(far[t]), block);
      } else {
        transfers.push_back(inside.send(p, step, {in + at(far[t]), block}));
      }
    }
  }
  if (lane) {
    for (int j = 0; j < islands.islands(); ++j) {
      if (j == me.island) continue;
      const auto [first, size] = islands.group(j, me.position);
      for (std::size_t q = 0; q < island.size(); ++q) {
        if (static_cast<int>(q) == me.position) continue;
        for (int t = first; t < first + size; ++t) {
          transfers.push_back(
              inside.recv(static_cast<int>(q), step_of(j, t) + 1, {gathered(j, q, t), block}));
        }
      }
    }
  }
  inside.wait_all(transfers);
  transfers.clear();
  if (islands.islands() == 1) return;

  // 2. Across islands, lane by lane: one message per other island each way.
  if (lane) {
    auto across = ctx.view(islands.lane(me.position), kSecond);
    for (int j = 0; j < islands.islands(); ++j) {
      if (j == me.island) continue;
      const auto& to = outgoing[static_cast<std::size_t>(j)];
      const auto& from = incoming[static_cast<std::size_t>(j)];
      transfers.push_back(across.recv(j, 0, {buffer + from.offset, from.count}));
      transfers.push_back(across.send(j, 0, {buffer + to.offset, to.count}));
    }
    across.wait_all(transfers);
    transfers.clear();
  }

  // 3. Inside the island: each lane member hands its group the blocks that came for them.
  auto deliver = ctx.view(island, kSecond + 1);
  for (int j = 0; j < islands.islands(); ++j) {
    if (j == me.island) continue;
    const auto& far = islands.members(j);
    if (lane) {
      for (std::size_t s = 0; s < far.size(); ++s) {
        for (int t = my_first; t < my_first + my_size; ++t) {
          const std::byte* from =
              buffer + incoming[static_cast<std::size_t>(j)].offset +
              (s * static_cast<std::size_t>(my_size) + static_cast<std::size_t>(t - my_first)) *
                  block;
          if (t == me.position) {
            ctx.copy(out + at(far[s]), from, block);
          } else {
            transfers.push_back(deliver.send(t, step_of(j, static_cast<int>(s)), {from, block}));
          }
        }
      }
    }
    const int holder = islands.lane_of(me.island, me.position);
    if (holder != me.position) {
      for (std::size_t s = 0; s < far.size(); ++s) {
        transfers.push_back(
            deliver.recv(holder, step_of(j, static_cast<int>(s)), {out + at(far[s]), block}));
      }
    }
  }
  deliver.wait_all(transfers);
}

}  // namespace holmes
