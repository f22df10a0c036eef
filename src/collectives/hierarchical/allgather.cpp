// Hierarchical allgather: a ring allgather inside each island, then lanes (the p-th member of
// every island, p < L = size of the smallest island) exchange their island's part p (an L-th of
// its blocks) across islands, then each island passes the other islands' parts around inside:
// the slow tier carries every block once per other island, split over L lanes on their own
// uplinks, where a flat ring sends n-1 blocks through one uplink.
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

// One segment of an allgather over `packed`, which holds the segment's blocks island by island
// (IslandBlocks): this rank's own piece is copied in from `own_piece` in the segment's first
// turn, and where `packed` is a packed copy, every block goes out to `spread` at the end.
void allgather_segment(const SegmentViews& view, const IslandBlocks& blocks, const Place& me,
                       std::byte* packed, const std::byte* own_piece,
                       const std::optional<RankedPieces<std::byte>>& spread, hm_dtype_t dtype,
                       const SegmentTurn& turn) {
  const std::size_t es = dtype_size(dtype);
  const std::size_t chunk = chunk_elements(view.top, es);
  const auto& island = blocks.members(me.island);
  // 1. Inside the island: every member's block to every member.
  std::vector<BlockLayout::Range> own;
  for (std::size_t q = 0; q < island.size(); ++q) {
    own.push_back({blocks.slot(me.island, static_cast<int>(q)), blocks.count()});
  }
  const BlockLayout own_layout(std::move(own), chunk);
  auto inside = view(island, kIslandPhase);
  turn.run(kIslandPhase, [&] {
    inside.copy(packed + blocks.slot(me.island, me.position) * es, own_piece, blocks.count() * es);
    inside.group_engine(GroupLevel::kIsland).allgather_blocks(inside, packed, own_layout, dtype);
  });
  // 2. Across islands, lane by lane: member p of each island brings its island's part p.
  if (blocks.islands() > 1 && me.position < blocks.lanes()) {
    const BlockLayout layout = blocks.across(me.position, chunk);
    auto across = view(blocks.lane(me.position), kLanePhase);
    turn.run(kLanePhase, [&] { ring_allgather_blocks(across, packed, layout, dtype); });
  }
  // 3. Inside the island again: the parts of every other island its lanes brought.
  for (int other = 0; other < blocks.islands(); ++other) {
    if (other == me.island) continue;
    const auto phase = kPartsPhase + static_cast<std::uint64_t>(other);
    const BlockLayout layout =
        blocks.by_lane(me.island, chunk, [&](int q) { return blocks.part(other, q); });
    auto parts = view(island, phase);
    turn.run(phase, [&] {
      parts.group_engine(GroupLevel::kIsland).allgather_blocks(parts, packed, layout, dtype);
    });
  }
  if (spread) spread_pieces(inside, blocks, packed, *spread, es);
}

}  // namespace

void hierarchical_allgather(CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                            const void* send, void* recv, std::size_t count, hm_dtype_t dtype) {
  const std::size_t es = dtype_size(dtype);
  const auto n = static_cast<std::size_t>(ctx.size());
  auto* out = static_cast<std::byte*>(recv);
  if (count == 0) return;
  const Place me = place_of(h, ctx.rank());
  const BlockPlan plan(ctx, h, model, count, es);
  std::byte* packed = plan.direct ? out : ctx.phase_buffer(n * count * es);
  const auto* own = static_cast<const std::byte*>(send);
  plan.run(ctx, "hierarchical allgather",
           [&](const SegmentViews& view, const IslandBlocks& blocks, std::size_t at,
               std::size_t start, const SegmentTurn& turn) {
             std::optional<RankedPieces<std::byte>> spread;
             if (!plan.direct) spread = RankedPieces<std::byte>{out + start * es, count};
             allgather_segment(view, blocks, me, packed + at * es, own + start * es, spread, dtype,
                               turn);
           });
}

}  // namespace holmes
