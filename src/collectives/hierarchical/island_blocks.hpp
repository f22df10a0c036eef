// Where the blocks of the hierarchical allgather, reduce-scatter and alltoall lie (island by
// island, and each island cut into the groups its lanes carry), and how the allgather and the
// reduce-scatter cut a call into segments (BlockPlan).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "collectives/hierarchical/segments.hpp"
#include "collectives/pipeline.hpp"
#include "collectives/tuning.hpp"

namespace holmes::hier {

// Where the blocks of an allgather or reduce-scatter sit for their hierarchical forms. Islands
// are packed one after the other (island-major: the members' blocks in island order), and each
// island's members are cut into L groups (L = size of the smallest island): group p's blocks are
// the part of the island that lane p (the p-th member of every island) carries across islands.
// A block is `count` elements at `base` + its packed index x `stride` (a segment's piece of
// every block: its offset in the block, and the whole block's size).
class IslandBlocks {
 public:
  IslandBlocks(const Hierarchy& h, std::size_t count, std::size_t stride, std::size_t base)
      : h_(h), count_(count), stride_(stride), base_(base) {
    std::size_t index = 0;
    for (const auto& island : h.islands) {
      island_index_.push_back(index);
      for (int rank : island) {
        identity_ = identity_ && static_cast<std::size_t>(rank) == index;
        ++index;
      }
    }
  }
  IslandBlocks(const Hierarchy& h, std::size_t count) : IslandBlocks(h, count, count, 0) {}

  int lanes() const { return h_.summary.smallest_island; }
  int islands() const { return static_cast<int>(h_.islands.size()); }
  std::size_t count() const { return count_; }  // elements per block
  const std::vector<int>& members(int island) const {
    return h_.islands[static_cast<std::size_t>(island)];
  }
  // True when the packed order is the rank order.
  bool identity() const { return identity_; }
  // True when every island has L members: every group is one member, so every part is one
  // block (contiguous whatever the stride).
  bool uniform() const { return h_.summary.largest_island == h_.summary.smallest_island; }
  // The offset (elements) of member `position` of `island`.
  std::size_t slot(int island, int position) const {
    return base_ +
           (island_index_[static_cast<std::size_t>(island)] + static_cast<std::size_t>(position)) *
               stride_;
  }
  // Members of `island` in group `part` (< lanes()): [first, first + size).
  std::pair<int, int> group(int island, int part) const {
    const BlockLayout groups(members(island).size(), lanes(), 1);
    return {static_cast<int>(groups.block_start(part)), static_cast<int>(groups.block_size(part))};
  }
  // Part `part` of `island`: contiguous when blocks are packed (stride == count) or groups are
  // single members.
  BlockLayout::Range part(int island, int part) const {
    const auto [first, size] = group(island, part);
    return {slot(island, first), static_cast<std::size_t>(size) * count_};
  }
  // The lane (= group) that carries member `position`'s block.
  int lane_of(int island, int position) const {
    for (int p = 0; p < lanes(); ++p) {
      const auto [first, size] = group(island, p);
      if (position >= first && position < first + size) return p;
    }
    return lanes() - 1;
  }
  // Lane `p`: the p-th member of every island, island by island.
  std::vector<int> lane(int p) const {
    std::vector<int> out;
    for (const auto& island : h_.islands) out.push_back(island[static_cast<std::size_t>(p)]);
    return out;
  }
  // The layout lane `p` works on: position i (island i) has island i's part p.
  BlockLayout across(int p, std::size_t chunk) const {
    std::vector<BlockLayout::Range> parts;
    for (int i = 0; i < islands(); ++i) parts.push_back(part(i, p));
    return BlockLayout(std::move(parts), chunk);
  }
  // A layout over `island`'s members in which position q < lanes() has `range(q)` and the
  // others nothing.
  template <typename Range>
  BlockLayout by_lane(int island, std::size_t chunk, Range&& range) const {
    std::vector<BlockLayout::Range> blocks;
    for (std::size_t q = 0; q < members(island).size(); ++q) {
      blocks.push_back(static_cast<int>(q) < lanes() ? range(static_cast<int>(q))
                                                     : BlockLayout::Range{0, 0});
    }
    return BlockLayout(std::move(blocks), chunk);
  }

 private:
  const Hierarchy& h_;
  std::size_t count_;
  std::size_t stride_;
  std::size_t base_;
  bool identity_ = true;
  std::vector<std::size_t> island_index_;  // packed index of each island's first member
};

// Phases of one segment of the hierarchical allgather and reduce-scatter (from the segment's
// first phase): the island level, the lanes, then one per island for the island level's
// exchange of that island's parts.
constexpr std::uint64_t kIslandPhase = 0;
constexpr std::uint64_t kLanePhase = 1;
constexpr std::uint64_t kPartsPhase = 2;
inline std::uint64_t block_phases(const Hierarchy& h) { return kPartsPhase + h.islands.size(); }
// Their names in the debug timeline (PhaseTimeline).
inline const char* block_phase_name(std::uint64_t phase) {
  switch (phase) {
    case kIslandPhase:
      return "island's own blocks";
    case kLanePhase:
      return "lanes across islands";
    default:
      return "island's exchange of an island's parts";
  }
}
static_assert(kFirst + kPartsPhase + kMaxBlockIslands <= 64);

// Segments of a hierarchical allgather or reduce-scatter of `bytes` in all: as for allreduce
// (hierarchical_segments), as long as every segment's phases have numbers in the tag.
inline int block_segments(const CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                          double bytes) {
  if (ctx.on_device()) return 1;  // device staging and kernels are not shared between threads
  const auto fit = static_cast<int>((64 - kFirst) / block_phases(h));
  return std::max(1, std::min(hierarchical_segments(h, model, bytes), fit));
}

// How a hierarchical allgather or reduce-scatter of `count` elements per rank is cut and where
// its blocks lie: in segments whose phases overlap (as allreduce's; segment s is piece s of every
// rank's block), worked on in the caller's rank-ordered buffers (`direct`: the ranks are
// numbered island by island and every lane's part is contiguous there, because the call is one
// segment or the islands are alike) or else in a packed copy, segment after segment, each island
// by island.
struct BlockPlan {
  BlockPlan(const CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
            std::size_t count, std::size_t es)
      : h(h),
        count(count),
        segments(block_segments(
            ctx, h, model, static_cast<double>(static_cast<std::size_t>(h.size()) * count * es))),
        pieces(count, segments, count),
        phases(block_phases(h)),
        es(es) {
    const IslandBlocks whole(h, count);
    direct = whole.identity() && (segments == 1 || whole.uniform());
  }

  // Runs body(view, blocks, at, start, turn) for every segment: `blocks` where its pieces lie,
  // `at` the segment's offset (elements) in the packed copy (0 when direct), `start` its pieces'
  // offset in a rank's block. `what` names the collective in the debug timeline.
  template <typename Body>
  void run(const CollectiveContext& ctx, const char* what, Body&& body) const {
    // The lanes' phase, several segments at once on long links: each lane sends (I-1)/I of its
    // part of a segment (I islands).
    const double islands = static_cast<double>(h.islands.size());
    const double lane_bytes = static_cast<double>(h.size()) * static_cast<double>(count * es) /
                              segments / h.summary.smallest_island * (islands - 1) / islands;
    SegmentPhases turns;
    turns.phases = phases;
    turns.lanes_phase = kLanePhase;
    turns.lane_window = hierarchical_lane_window(h, lane_bytes, segments);
    turns.reaches_lanes =
        h.islands.size() > 1 && place_of(h, ctx.rank()).position < h.summary.smallest_island;
    turns.what = what;
    turns.phase_name = block_phase_name;
    turns.bytes = static_cast<std::size_t>(h.size()) * count * es;
    run_hierarchical_segments(
        ctx, segments, turns, [&](int s, ScratchSpace* scratch, const SegmentTurn& turn) {
          const std::size_t size = pieces.block_size(s);
          const std::size_t start = pieces.block_start(s);
          const IslandBlocks blocks =
              direct ? IslandBlocks(h, size, count, start) : IslandBlocks(h, size);
          const std::size_t at = direct ? 0 : static_cast<std::size_t>(h.size()) * start;
          const SegmentViews view{ctx, kFirst + phases * static_cast<std::uint64_t>(s), scratch};
          body(view, blocks, at, start, turn);
        });
  }

  const Hierarchy& h;
  std::size_t count;
  int segments;
  BlockLayout pieces;
  std::uint64_t phases;
  std::size_t es;  // bytes per element
  bool direct = false;
};

// Where one segment's pieces lie in the caller's rank-ordered buffer when the plan works in a
// packed copy: rank r's piece at `first` + r x `stride` elements (`first`: the caller's buffer
// at the segment's offset in a block; `stride`: a block's elements). `Byte` is const std::byte
// where the buffer is only read.
template <typename Byte>
struct RankedPieces {
  Byte* first = nullptr;
  std::size_t stride = 0;
  Byte* of(int rank, std::size_t es) const {
    return first + static_cast<std::size_t>(rank) * stride * es;
  }
};

// Calls fn(rank, slot) for every rank of the segment whose pieces `blocks` places in the packed
// copy: slot, the offset (elements) of its piece there.
template <typename Fn>
void for_each_slot(const IslandBlocks& blocks, Fn&& fn) {
  for (int i = 0; i < blocks.islands(); ++i) {
    const auto& members = blocks.members(i);
    for (std::size_t q = 0; q < members.size(); ++q) {
      fn(members[q], blocks.slot(i, static_cast<int>(q)));
    }
  }
}

// Every rank's piece of one segment copied from the caller's buffer into the packed copy, or
// back. Each segment copies its own pieces, on its own thread, in its turn: a copy of the whole
// call before the first segment or after the last would hold the slow tier back.
inline void pack_pieces(CollectiveContext& ctx, const IslandBlocks& blocks, std::byte* packed,
                        const RankedPieces<const std::byte>& from, std::size_t es) {
  for_each_slot(blocks, [&](int rank, std::size_t slot) {
    ctx.copy(packed + slot * es, from.of(rank, es), blocks.count() * es);
  });
}
inline void spread_pieces(CollectiveContext& ctx, const IslandBlocks& blocks,
                          const std::byte* packed, const RankedPieces<std::byte>& to,
                          std::size_t es) {
  for_each_slot(blocks, [&](int rank, std::size_t slot) {
    ctx.copy(to.of(rank, es), packed + slot * es, blocks.count() * es);
  });
}

}  // namespace holmes::hier
