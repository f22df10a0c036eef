// Hierarchical allreduce: descends the levels host -> island -> world: at each level, a ring
// reduce-scatter inside each group (host, then island) into M shards (M = size of the smallest
// group; in a larger group the ranks past M own no shard), shard k carried one level down by the
// k-th rank of every group, and at the bottom the lanes allreduce across islands (ring or
// recursive doubling, by the cost model); then ring allgathers back up. Shared memory takes the
// host level, the island's fabric the island level, and each slow uplink 1/M of the data. Large
// messages go in segments whose levels overlap (segments.hpp). Each element is reduced in a
// fixed order and results are copied out from the one rank that reduced them: identical bits on
// every rank.

#include "collectives/algorithms.hpp"
#include "collectives/engine/group_engine.hpp"
#include "collectives/hierarchical/segments.hpp"
#include "collectives/pipeline.hpp"
#include "core/dtype.hpp"

namespace holmes {
namespace {

using namespace hier;

// Levels of the hierarchy an allreduce descends: hosts, then islands; below the last, the ranks
// left (one per island) allreduce flat over the slow tier.
constexpr int kLevels = 2;

// Phases one descent uses (two per level and the flat allreduce at the bottom).
constexpr std::uint64_t kPhasesPerDescent = 2 * kLevels + 1;
// Every segment's phases fit in the collective tag (63 phase numbers, context.cpp).
static_assert(kFirst + kPhasesPerDescent * kMaxHierarchicalSegments - 1 <= 63);

// The phases' names in the debug timeline: 2 per level (scatter, gather), then the lanes.
constexpr std::uint64_t kLanesPhase = 2 * kLevels;
const char* phase_name(std::uint64_t phase) {
  switch (phase) {
    case 0:
      return "host reduce-scatter";
    case 1:
      return "host allgather";
    case 2:
      return "island reduce-scatter";
    case 3:
      return "island allgather";
    default:
      return "lanes' allreduce across islands";
  }
}
static_assert(kLevels == 2, "phase_name names two levels");

// The groups of `ranks` at `level` (their hosts, their islands), in order of their first rank.
std::vector<std::vector<int>> groups_at(const Hierarchy& h, int level,
                                        const std::vector<int>& ranks) {
  const std::vector<int>& key = level == 0 ? h.host : h.island;
  std::vector<std::vector<int>> groups;
  std::vector<int> group_keys;
  for (int r : ranks) {
    const int k = key[static_cast<std::size_t>(r)];
    const auto it = std::find(group_keys.begin(), group_keys.end(), k);
    if (it == group_keys.end()) {
      group_keys.push_back(k);
      groups.push_back({r});
    } else {
      groups[static_cast<std::size_t>(it - group_keys.begin())].push_back(r);
    }
  }
  return groups;
}

// One group (all ranks on one host or island), or one rank in every group (a rank per host or
// per island): nothing to reduce at this level, and no copy of the input to make for it.
bool passes_through(const std::vector<std::vector<int>>& groups, const std::vector<int>& ranks) {
  return groups.size() == 1 || groups.size() == ranks.size();
}

// Where a rank sits among a level's groups: its group, its position there, and the lanes (the
// smallest group's size). A position below the lanes carries its shard one level down, with the
// ranks at the same position of every group (lane_at).
struct GroupPlace {
  const std::vector<int>* group = nullptr;
  std::size_t position = 0;
  std::size_t lanes = 0;
};
GroupPlace place_among(const std::vector<std::vector<int>>& groups, int rank) {
  GroupPlace place;
  place.lanes = groups.front().size();
  for (const auto& g : groups) {
    place.lanes = std::min(place.lanes, g.size());
    const auto it = std::find(g.begin(), g.end(), rank);
    if (it != g.end()) {
      place.group = &g;
      place.position = static_cast<std::size_t>(it - g.begin());
    }
  }
  return place;
}
std::vector<int> lane_at(const std::vector<std::vector<int>>& groups, std::size_t position) {
  std::vector<int> lane;
  for (const auto& g : groups) lane.push_back(g[position]);
  return lane;
}

// Whether `rank` reaches the lanes' phase of a descent from `ranks`, as descend() takes it: at
// every level where it reduces, its position in its group is below the lanes. The ranks past
// them work only inside their groups.
bool reaches_lanes(const Hierarchy& h, std::vector<int> ranks, int rank) {
  for (int level = 0; level < kLevels && ranks.size() > 1; ++level) {
    const auto groups = groups_at(h, level, ranks);
    if (passes_through(groups, ranks)) continue;
    const GroupPlace place = place_among(groups, rank);
    if (place.position >= place.lanes) return false;
    ranks = lane_at(groups, place.position);
  }
  return true;
}

// Allreduce over `ranks` (communicator ranks, this rank among them) from `level` down: inside
// each group of this level (a host, an island) a ring reduce-scatter into M shards (M = size of
// the smallest group), shard p allreduced by the ranks at position p of every group one level
// down, then a ring allgather inside the group. Only the last level's traffic crosses the slow
// tier, 1/M of the data per lane and every lane on its own uplink. Phases are numbered by level
// from `first_phase`, the same on every rank.
void descend(const CollectiveContext& top, const Hierarchy& h, const CostModel& model,
             const std::vector<int>& ranks, int level, const std::byte* in, std::byte* out,
             std::size_t count, hm_dtype_t dtype, hm_op_t op, std::uint64_t first_phase,
             ScratchSpace* scratch, const SegmentTurn& turn) {
  const std::size_t es = dtype_size(dtype);
  auto view = [&](std::vector<int> members, std::uint64_t phase) {
    return scratch != nullptr ? top.view(std::move(members), first_phase + phase, *scratch)
                              : top.view(std::move(members), first_phase + phase);
  };
  if (level == kLevels || ranks.size() == 1) {
    auto flat = view(ranks, 2 * kLevels);
    const auto inner = choose_lane_allreduce(model, static_cast<int>(ranks.size()),
                                             static_cast<double>(count * es), h.other_island);
    turn.run(2 * kLevels, [&] {
      if (inner == Algorithm::kRecursiveDoubling) {
        recursive_doubling_allreduce(flat, in, out, count, dtype, op, top.size());
      } else {
        ring_allreduce(flat, in, out, count, dtype, op, top.size());
      }
    });
    return;
  }
  const std::vector<std::vector<int>> groups = groups_at(h, level, ranks);
  const GroupLevel group_level = level == 0 ? GroupLevel::kHost : GroupLevel::kIsland;
  // One group holding every rank, with device buffers: the group's engine allreduces them when
  // it is not the ring (CUDA IPC on one host, NCCL on one island), else the levels below do.
  if (groups.size() == 1 && top.on_device() && ranks.size() > 1) {
    auto scatter = view(ranks, 2 * static_cast<std::uint64_t>(level));
    GroupEngine& engine = scatter.group_engine(group_level);
    if (&engine != &ring_engine()) {
      const BlockLayout layout(count, scatter.size(), chunk_elements(top, es));
      std::byte* own = out + layout.block_start(scatter.rank()) * es;
      // The bottom of the descent: the average divides here, over every rank.
      turn.run(2 * static_cast<std::uint64_t>(level), [&] {
        engine.reduce_scatter_blocks(scatter, in, own, layout, dtype, op, top.size());
      });
      auto gather = view(ranks, 2 * static_cast<std::uint64_t>(level) + 1);
      turn.run(2 * static_cast<std::uint64_t>(level) + 1,
               [&] { engine.allgather_blocks(gather, out, layout, dtype); });
      return;
    }
  }
  if (passes_through(groups, ranks)) {
    return descend(top, h, model, ranks, level + 1, in, out, count, dtype, op, first_phase, scratch,
                   turn);
  }
  const auto [mine, position, lanes] = place_among(groups, top.member(top.rank()));
  // The group's blocks: shard k for positions k < lanes, nothing for the others.
  const BlockLayout shards(count, static_cast<int>(lanes), count);
  std::vector<BlockLayout::Range> blocks;
  for (std::size_t k = 0; k < mine->size(); ++k) {
    blocks.push_back(k < lanes ? BlockLayout::Range{shards.block_start(static_cast<int>(k)),
                                                    shards.block_size(static_cast<int>(k))}
                               : BlockLayout::Range{0, 0});
  }
  const BlockLayout layout(std::move(blocks), chunk_elements(top, es));
  const std::size_t own_start = layout.block_start(static_cast<int>(position));
  const std::size_t own_count = layout.block_size(static_cast<int>(position));
  // Sums only on the way down: the average divides once, at the bottom.
  const auto scatter_phase = 2 * static_cast<std::uint64_t>(level);
  auto scatter = view(*mine, scatter_phase);
  turn.run(scatter_phase, [&] {
    scatter.group_engine(group_level)
        .reduce_scatter_blocks(scatter, in, out + own_start * es, layout, dtype, op, 0);
  });
  if (position < lanes) {
    std::byte* shard = out + own_start * es;
    descend(top, h, model, lane_at(groups, position), level + 1, shard, shard, own_count, dtype, op,
            first_phase, scratch, turn);
  }
  auto gather = view(*mine, scatter_phase + 1);
  turn.run(scatter_phase + 1,
           [&] { gather.group_engine(group_level).allgather_blocks(gather, out, layout, dtype); });
}

}  // namespace

void hierarchical_allreduce(CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                            const void* send, void* recv, std::size_t count, hm_dtype_t dtype,
                            hm_op_t op) {
  const std::size_t es = dtype_size(dtype);
  auto* out = static_cast<std::byte*>(recv);
  const auto* in = static_cast<const std::byte*>(send);
  if (ctx.size() == 1 || count == 0) {
    ctx.copy(out, in, count * es);
    return;
  }
  // Large messages go in segments whose phases overlap, each on its own thread: while one
  // segment crosses the slow tier, the next is reduced inside the islands. Every rank computes
  // the same segments, so the phases' numbers (and tags) match. Device buffers take one segment
  // (their staging and kernels are not shared between threads).
  std::vector<int> everyone(static_cast<std::size_t>(ctx.size()));
  for (int r = 0; r < ctx.size(); ++r) everyone[static_cast<std::size_t>(r)] = r;
  const int segments = ctx.on_device() ? 1 : hierarchical_segments(h, model, count * es);
  const BlockLayout parts = weighted_blocks(count, hierarchical_segment_weights(segments));
  // The lanes' phase, two segments at once or more on long links (each ring step's turnaround,
  // then the latency): each lane sends 2(I-1)/I of its shard of a segment (I islands).
  const double islands = static_cast<double>(h.islands.size());
  const double lane_bytes = static_cast<double>(count * es) / segments / h.summary.smallest_island *
                            2 * (islands - 1) / islands;
  SegmentPhases phases;
  phases.phases = kPhasesPerDescent;
  phases.lanes_phase = kLanesPhase;
  phases.lane_window = hierarchical_lane_window(h, lane_bytes, segments);
  phases.reaches_lanes = segments > 1 && reaches_lanes(h, everyone, ctx.member(ctx.rank()));
  phases.what = "hierarchical allreduce";
  phases.phase_name = phase_name;
  phases.bytes = count * es;
  run_hierarchical_segments(
      ctx, segments, phases, [&](int s, ScratchSpace* scratch, const SegmentTurn& turn) {
        const std::size_t at = parts.block_start(s);
        descend(ctx, h, model, everyone, 0, in + at * es, out + at * es, parts.block_size(s), dtype,
                op, kFirst + kPhasesPerDescent * static_cast<std::uint64_t>(s), scratch, turn);
      });
}

}  // namespace holmes
