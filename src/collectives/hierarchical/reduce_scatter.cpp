// Hierarchical reduce-scatter, the allgather's steps reversed: inside each island, every
// island's blocks reduce-scattered to the lanes (part q to member q), across islands the lanes
// reduce-scatter their parts, and each lane hands the members of its group their blocks. Each
// element is reduced in a fixed order (island ring order, then lane order).
#include <optional>

#include "collectives/algorithms.hpp"
#include "collectives/engine/group_engine.hpp"
#include "collectives/hierarchical/island_blocks.hpp"
#include "collectives/hierarchical/segments.hpp"
#include "collectives/pipeline.hpp"
#include "core/dtype.hpp"

namespace holmes {
namespace {

using namespace hier;

// Where a reduce-scatter's segment packs its input: into `packed`, from the caller's buffer.
struct SegmentPacking {
  std::byte* packed = nullptr;
  RankedPieces<const std::byte> from;
};

// One segment of a reduce-scatter: `in` holds every rank's input for the segment's blocks
// island by island (where `packing` is given, its packed copy, filled in the segment's first
// turn); `sums` (the same size) takes the partial sums; this rank's block ends in `result`.
void reduce_scatter_segment(const SegmentViews& view, const IslandBlocks& blocks, const Place& me,
                            int ranks, const std::byte* in,
                            const std::optional<SegmentPacking>& packing, std::byte* sums,
                            std::byte* result, hm_dtype_t dtype, hm_op_t op,
                            const SegmentTurn& turn) {
  const std::size_t es = dtype_size(dtype);
  const std::size_t chunk = chunk_elements(view.top, es);
  const bool across_islands = blocks.islands() > 1;
  const auto& island = blocks.members(me.island);
  // 1. Inside the island, island by island: part q of that island's blocks, summed over this
  // island, to member q (< lanes). The one exchange of a single island completes the sums.
  for (int target = 0; target < blocks.islands(); ++target) {
    const auto phase = kPartsPhase + static_cast<std::uint64_t>(target);
    const BlockLayout layout =
        blocks.by_lane(me.island, chunk, [&](int q) { return blocks.part(target, q); });
    // Members past the lanes own an empty block: any valid pointer.
    std::byte* own =
        sums + (me.position < blocks.lanes() ? blocks.part(target, me.position).offset * es : 0);
    auto inside = view(island, phase);
    turn.run(phase, [&] {
      if (target == 0 && packing) pack_pieces(inside, blocks, packing->packed, packing->from, es);
      inside.group_engine(GroupLevel::kIsland)
          .reduce_scatter_blocks(inside, in, own, layout, dtype, op, across_islands ? 0 : ranks);
    });
  }
  // 2. Across islands, lane by lane: member p of each island ends with its own island's part p
  // summed over every island.
  if (across_islands && me.position < blocks.lanes()) {
    const BlockLayout layout = blocks.across(me.position, chunk);
    std::byte* own = sums + blocks.part(me.island, me.position).offset * es;
    auto across = view(blocks.lane(me.position), kLanePhase);
    turn.run(kLanePhase, [&] {
      ring_reduce_scatter_blocks(across, sums, own, layout, dtype, op, ranks, nullptr);
    });
  }
  // 3. Inside the island: member p hands each member of its group (other than itself) its block.
  const std::size_t bytes = blocks.count() * es;
  std::byte* mine = sums + blocks.slot(me.island, me.position) * es;
  auto inside = view(island, kIslandPhase);
  turn.run(kIslandPhase, [&] {
    std::vector<Transfer> transfers;
    if (me.position < blocks.lanes()) {
      const auto [first, size] = blocks.group(me.island, me.position);
      for (int q = first; q < first + size; ++q) {
        if (q == me.position) continue;
        transfers.push_back(inside.send(q, 0, {sums + blocks.slot(me.island, q) * es, bytes}));
      }
    }
    const int holder = blocks.lane_of(me.island, me.position);
    if (holder != me.position) transfers.push_back(inside.recv(holder, 0, {mine, bytes}));
    inside.wait_all(transfers);
  });
  inside.copy(result, mine, bytes);
}

}  // namespace

void hierarchical_reduce_scatter(CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                                 const void* send, void* recv, std::size_t count, hm_dtype_t dtype,
                                 hm_op_t op) {
  const std::size_t es = dtype_size(dtype);
  const std::size_t total = static_cast<std::size_t>(ctx.size()) * count;
  if (count == 0) return;
  const Place me = place_of(h, ctx.rank());
  const BlockPlan plan(ctx, h, model, count, es);
  // The input where it is, or a packed copy (each segment packs its pieces); the partial sums in
  // the same layout.
  std::byte* sums = ctx.phase_buffer((plan.direct ? 1 : 2) * total * es);
  std::byte* packed = plan.direct ? nullptr : sums + total * es;
  const auto* in = plan.direct ? static_cast<const std::byte*>(send) : packed;
  plan.run(ctx, "hierarchical reduce-scatter",
           [&](const SegmentViews& view, const IslandBlocks& blocks, std::size_t at,
               std::size_t start, const SegmentTurn& turn) {
             std::optional<SegmentPacking> packing;
             if (!plan.direct) {
               packing = SegmentPacking{packed + at * es,
                                        {static_cast<const std::byte*>(send) + start * es, count}};
             }
             reduce_scatter_segment(view, blocks, me, ctx.size(), in + at * es, packing,
                                    sums + at * es, static_cast<std::byte*>(recv) + start * es,
                                    dtype, op, turn);
           });
}

}  // namespace holmes
