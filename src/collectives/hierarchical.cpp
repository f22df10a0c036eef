// Hierarchical collectives: the slow tier between islands carries as few bytes as possible, and
// every rank's own uplink carries its share.
//
//   allreduce  descends the levels host -> island -> world: at each level, a ring
//              reduce-scatter inside each group (host, then island) into M shards (M = size of
//              the smallest group; in a larger group the ranks past M own no shard), shard k
//              carried one level down by the k-th rank of every group, and at the bottom the
//              lanes allreduce across islands (ring or recursive doubling, by the cost model);
//              then ring allgathers back up. Shared memory takes the host level, the island's
//              fabric the island level, and each slow uplink 1/M of the data. Large messages go
//              in segments whose levels overlap.
//   broadcast  the root's island leader (the root) broadcasts to the other islands' leaders,
//              then every leader inside its island.
//   reduce     the reverse: inside each island to its leader, then across leaders to the root.
//   allgather  a ring allgather inside each island, then lanes (the p-th member of every
//              island, p < L = size of the smallest island) exchange their island's part p (an
//              L-th of its blocks) across islands, then each island passes the other islands'
//              parts around inside: the slow tier carries every block once per other island,
//              split over L lanes on their own uplinks, where a flat ring sends n-1 blocks
//              through one uplink.
//   reduce_scatter the reverse: inside each island, every island's blocks reduce-scattered to
//              the lanes (part q to member q), across islands the lanes reduce-scatter their
//              parts, and each lane hands the members of its group their blocks.
// Each element is reduced in a fixed order (island ring order, then lane order), and allreduce
// results are copied out from the one rank that reduced them: identical bits on every rank.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "collectives/algorithms.hpp"
#include "collectives/pipeline.hpp"
#include "core/dtype.hpp"
#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes {
namespace {

// Phases of one operation: distinct numbers keep their tags apart.
enum Phase : std::uint64_t { kFirst = 1, kSecond = 2 };

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

namespace {

// Levels of the hierarchy an allreduce descends: hosts, then islands; below the last, the ranks
// left (one per island) allreduce flat over the slow tier.
constexpr int kLevels = 2;

// Phases one descent uses (two per level and the flat allreduce at the bottom).
constexpr std::uint64_t kPhasesPerDescent = 2 * kLevels + 1;
// Every segment's phases fit in the collective tag (63 phase numbers, context.cpp).
static_assert(kFirst + kPhasesPerDescent * kMaxHierarchicalSegments - 1 <= 63);

// The segments of one allreduce take each phase in turn: segment s starts a phase once segment
// s-1 has finished it. So the first segment reaches the slow tier after its own share of the
// islands' work, and the slow tier carries one segment after another while the islands reduce
// the next ones and gather the previous ones: a pipeline. Segments let loose at once would
// share the CPU through the first phases (the slow link idle meanwhile) and all reach the slow
// link together. Every rank takes the same turns, and a turn waits only for a lower segment in
// the same phase, so the order cannot deadlock. A segment that fails ends every wait (abort):
// the segments that were waiting stop with TurnAborted, and the failure reported is the one that
// caused it.
struct TurnAborted {};

class PhaseTurns {
 public:
  // `phases`: the phases each segment takes (numbered from 0); `progress` (may be nullptr)
  // counts the communicator's completed transfers.
  PhaseTurns(std::size_t phases, std::chrono::milliseconds timeout,
             const std::atomic<std::uint64_t>* progress)
      : timeout_(timeout), progress_(progress), next_(phases, 0) {}

  // Waits for `segment`'s turn in `phase`. A phase of the segment before may rightly take longer
  // than the timeout (many transfers on a slow link, each within it), so the wait fails with
  // HM_ERR_TIMEOUT only after a whole timeout in which no transfer of the communicator completed.
  void enter(std::uint64_t phase, int segment) {
    std::unique_lock lock(mutex_);
    auto transfers = [&] { return progress_ != nullptr ? progress_->load() : 0; };
    for (auto seen = transfers();;) {
      if (cv_.wait_for(lock, timeout_, [&] { return aborted_ || next_[phase] == segment; })) break;
      if (transfers() == seen) {
        fail(HM_ERR_TIMEOUT,
             "hierarchical collective: segment {} waited {} ms for segment {} to finish phase {}, "
             "and no transfer completed meanwhile",
             segment, timeout_.count(), next_[phase], phase);
      }
      seen = transfers();
    }
    if (aborted_) throw TurnAborted{};
  }
  void leave(std::uint64_t phase) {
    {
      std::lock_guard lock(mutex_);
      ++next_[phase];
    }
    cv_.notify_all();
  }
  void abort() {
    {
      std::lock_guard lock(mutex_);
      aborted_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::chrono::milliseconds timeout_;
  const std::atomic<std::uint64_t>* progress_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<int> next_;  // per phase: the segment whose turn it is
  bool aborted_ = false;
};

// When each phase of each segment waited for its turn, started and ended, kept while the log
// takes debug lines (HOLMES_LOG_LEVEL=debug): how long the slow tier waited for the islands at
// the start of the call, how long it carried data, and how long the islands worked after it,
// seen from this rank: where a hierarchical allreduce that misses the slow tier's bound lost
// its time.
class PhaseTimeline {
 public:
  using Clock = std::chrono::steady_clock;

  void record(int segment, std::uint64_t phase, Clock::time_point asked, Clock::time_point started,
              Clock::time_point ended) {
    std::lock_guard lock(mutex_);
    entries_.push_back({segment, phase, ms(asked), ms(started), ms(ended)});
  }

  // One debug line for the call, then one trace line per phase in the order they started.
  void log(std::size_t bytes, int segments) {
    const double total = ms(Clock::now());
    std::lock_guard lock(mutex_);
    std::sort(entries_.begin(), entries_.end(),
              [](const Entry& a, const Entry& b) { return a.started < b.started; });
    double first = -1;
    double last = 0;
    double busy = 0;
    for (const auto& e : entries_) {
      if (e.phase != kLanesPhase) continue;
      if (first < 0) first = e.started;
      last = std::max(last, e.ended);
      busy += e.ended - e.started;  // the turns keep one segment at a time on the lanes
    }
    if (first < 0) {
      HM_LOG_DEBUG(
          "hierarchical allreduce of {} B in {} segments: {:.1f} ms; this rank has no "
          "lane across islands",
          bytes, segments, total);
    } else {
      HM_LOG_DEBUG(
          "hierarchical allreduce of {} B in {} segments: {:.1f} ms; this rank's lane "
          "across islands ran {:.1f} ms of phases from {:.1f} to {:.1f} ms: {:.1f} ms "
          "of island work before it, {:.1f} ms after",
          bytes, segments, total, busy, first, last, first, total - last);
    }
    for (const auto& e : entries_) {
      HM_LOG_TRACE("hierarchical allreduce segment {} {}: asked at {:.2f} ms, ran {:.2f}..{:.2f}",
                   e.segment, phase_name(e.phase), e.asked, e.started, e.ended);
    }
  }

 private:
  // The phase numbers descend() gives: 2 per level (scatter, gather), then the lanes.
  static constexpr std::uint64_t kLanesPhase = 2 * kLevels;
  static const char* phase_name(std::uint64_t phase) {
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
  double ms(Clock::time_point t) const {
    return std::chrono::duration<double, std::milli>(t - origin_).count();
  }

  struct Entry {
    int segment;
    std::uint64_t phase;
    double asked, started, ended;  // ms since the call began
  };
  const Clock::time_point origin_ = Clock::now();
  std::mutex mutex_;
  std::vector<Entry> entries_;
};
static_assert(kLevels == 2, "PhaseTimeline::phase_name names two levels");

// One segment's place in the turns (none: the allreduce runs as one segment), and the timeline
// its phases go into (none: not logged).
struct SegmentTurn {
  PhaseTurns* turns = nullptr;
  int segment = 0;
  PhaseTimeline* timeline = nullptr;
  // Runs `phase` of this segment in its turn.
  template <typename Work>
  void run(std::uint64_t phase, Work&& work) const {
    const auto asked =
        timeline != nullptr ? PhaseTimeline::Clock::now() : PhaseTimeline::Clock::time_point{};
    if (turns != nullptr) turns->enter(phase, segment);
    const auto started = timeline != nullptr ? PhaseTimeline::Clock::now() : asked;
    work();
    // Timed before the next segment may start the phase.
    if (timeline != nullptr) {
      timeline->record(segment, phase, asked, started, PhaseTimeline::Clock::now());
    }
    if (turns != nullptr) turns->leave(phase);
  }
};

// Runs `segment(s, scratch, turn)` for every segment s of a hierarchical collective: one segment
// inline, several on threads of their own that take each of the `phases` phases in turn
// (PhaseTurns), each with its own scratch. A failure ends the other segments' waits; the first
// is rethrown.
template <typename Segment>
void run_segments(const CollectiveContext& ctx, int segments, std::size_t phases,
                  PhaseTimeline* timeline, Segment&& segment) {
  if (segments <= 1) {
    segment(0, static_cast<ScratchSpace*>(nullptr), SegmentTurn{});
    return;
  }
  std::vector<ScratchSpace> scratch(static_cast<std::size_t>(segments));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(segments));
  PhaseTurns turns(phases, ctx.timeout(), ctx.progress());
  std::vector<std::thread> threads;
  for (int s = 0; s < segments; ++s) {
    threads.emplace_back([&, s] {
      try {
        segment(s, &scratch[static_cast<std::size_t>(s)], SegmentTurn{&turns, s, timeline});
      } catch (const TurnAborted&) {
        // Another segment failed first; its error is the one reported.
      } catch (...) {
        errors[static_cast<std::size_t>(s)] = std::current_exception();
        turns.abort();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
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
  const std::vector<int>& key = level == 0 ? h.host : h.island;
  // Groups in order of their first rank in `ranks`.
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
  if (groups.size() == 1) {
    return descend(top, h, model, ranks, level + 1, in, out, count, dtype, op, first_phase, scratch,
                   turn);
  }
  const int me = top.member(top.rank());
  const std::vector<int>* mine = nullptr;
  std::size_t position = 0;
  std::size_t lanes = ranks.size();
  for (const auto& g : groups) {
    lanes = std::min(lanes, g.size());
    const auto it = std::find(g.begin(), g.end(), me);
    if (it != g.end()) {
      mine = &g;
      position = static_cast<std::size_t>(it - g.begin());
    }
  }
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
    ring_reduce_scatter_blocks(scatter, in, out + own_start * es, layout, dtype, op, 0, nullptr);
  });
  if (position < lanes) {
    std::vector<int> lane;
    for (const auto& g : groups) lane.push_back(g[position]);
    std::byte* shard = out + own_start * es;
    descend(top, h, model, lane, level + 1, shard, shard, own_count, dtype, op, first_phase,
            scratch, turn);
  }
  auto gather = view(*mine, scatter_phase + 1);
  turn.run(scatter_phase + 1, [&] { ring_allgather_blocks(gather, out, layout, dtype); });
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
  const BlockLayout parts(count, segments, count);
  std::optional<PhaseTimeline> timeline;
  if (segments > 1 && logger().should_log(spdlog::level::debug)) timeline.emplace();
  PhaseTimeline* const timing = timeline ? &*timeline : nullptr;
  run_segments(ctx, segments, kPhasesPerDescent, timing,
               [&](int s, ScratchSpace* scratch, const SegmentTurn& turn) {
                 const std::size_t at = parts.block_start(s);
                 descend(ctx, h, model, everyone, 0, in + at * es, out + at * es,
                         parts.block_size(s), dtype, op,
                         kFirst + kPhasesPerDescent * static_cast<std::uint64_t>(s), scratch, turn);
               });
  if (timing != nullptr) timing->log(count * es, segments);
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

namespace {

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
std::uint64_t block_phases(const Hierarchy& h) { return kPartsPhase + h.islands.size(); }
static_assert(kFirst + kPartsPhase + kMaxBlockIslands <= 64);

// Segments of a hierarchical allgather or reduce-scatter of `bytes` in all: as for allreduce
// (hierarchical_segments), as long as every segment's phases have numbers in the tag.
int block_segments(const CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                   double bytes) {
  if (ctx.on_device()) return 1;  // device staging and kernels are not shared between threads
  const auto fit = static_cast<int>((64 - kFirst) / block_phases(h));
  return std::max(1, std::min(hierarchical_segments(h, model, bytes), fit));
}

// The views of one segment: `first_phase` on, with the segment's scratch when it has its own.
struct SegmentViews {
  const CollectiveContext& top;
  std::uint64_t first_phase;
  ScratchSpace* scratch;
  CollectiveContext operator()(std::vector<int> members, std::uint64_t phase) const {
    return scratch != nullptr ? top.view(std::move(members), first_phase + phase, *scratch)
                              : top.view(std::move(members), first_phase + phase);
  }
};

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
        phases(block_phases(h)) {
    const IslandBlocks whole(h, count);
    direct = whole.identity() && (segments == 1 || whole.uniform());
  }

  // Runs body(view, blocks, at, start, turn) for every segment: `blocks` where its pieces lie,
  // `at` the segment's offset (elements) in the packed copy (0 when direct), `start` its pieces'
  // offset in a rank's block.
  template <typename Body>
  void run(const CollectiveContext& ctx, Body&& body) const {
    run_segments(
        ctx, segments, phases, nullptr, [&](int s, ScratchSpace* scratch, const SegmentTurn& turn) {
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
  bool direct = false;
};

// One segment of an allgather over `packed`, which holds the segment's blocks island by island
// (IslandBlocks), this rank's own already in place.
void allgather_segment(const SegmentViews& view, const IslandBlocks& blocks, const Place& me,
                       std::byte* packed, hm_dtype_t dtype, const SegmentTurn& turn) {
  const std::size_t chunk = chunk_elements(view.top, dtype_size(dtype));
  const auto& island = blocks.members(me.island);
  // 1. Inside the island: every member's block to every member.
  std::vector<BlockLayout::Range> own;
  for (std::size_t q = 0; q < island.size(); ++q) {
    own.push_back({blocks.slot(me.island, static_cast<int>(q)), blocks.count()});
  }
  const BlockLayout own_layout(std::move(own), chunk);
  auto inside = view(island, kIslandPhase);
  turn.run(kIslandPhase, [&] { ring_allgather_blocks(inside, packed, own_layout, dtype); });
  if (blocks.islands() == 1) return;
  // 2. Across islands, lane by lane: member p of each island brings its island's part p.
  if (me.position < blocks.lanes()) {
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
    turn.run(phase, [&] { ring_allgather_blocks(parts, packed, layout, dtype); });
  }
}

// One segment of a reduce-scatter: `in` holds every rank's input for the segment's blocks
// island by island; `sums` (the same size) takes the partial sums; this rank's block ends in
// `result`.
void reduce_scatter_segment(const SegmentViews& view, const IslandBlocks& blocks, const Place& me,
                            int ranks, const std::byte* in, std::byte* sums, std::byte* result,
                            hm_dtype_t dtype, hm_op_t op, const SegmentTurn& turn) {
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
      ring_reduce_scatter_blocks(inside, in, own, layout, dtype, op, across_islands ? 0 : ranks,
                                 nullptr);
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

// Calls fn(rank, packed, start, size) for every rank's piece of every segment: `size` elements
// at offset `packed` in the packed copy (segment after segment, each island by island), and at
// rank x count + `start` in the caller's rank-ordered buffer.
template <typename Fn>
void for_each_piece(const Hierarchy& h, const BlockPlan& plan, Fn&& fn) {
  const auto n = static_cast<std::size_t>(h.size());
  for (int s = 0; s < plan.segments; ++s) {
    const std::size_t start = plan.pieces.block_start(s);
    const std::size_t size = plan.pieces.block_size(s);
    if (size == 0) continue;
    const IslandBlocks blocks(h, size);
    for (int i = 0; i < blocks.islands(); ++i) {
      const auto& members = blocks.members(i);
      for (std::size_t q = 0; q < members.size(); ++q) {
        fn(members[q], n * start + blocks.slot(i, static_cast<int>(q)), start, size);
      }
    }
  }
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
  if (plan.direct) {
    ctx.copy(out + static_cast<std::size_t>(ctx.rank()) * count * es, own, count * es);
  } else {
    for_each_piece(h, plan, [&](int rank, std::size_t at, std::size_t start, std::size_t size) {
      if (rank == ctx.rank()) ctx.copy(packed + at * es, own + start * es, size * es);
    });
  }
  plan.run(ctx, [&](const SegmentViews& view, const IslandBlocks& blocks, std::size_t at,
                    std::size_t, const SegmentTurn& turn) {
    allgather_segment(view, blocks, me, packed + at * es, dtype, turn);
  });
  if (!plan.direct) {
    for_each_piece(h, plan, [&](int rank, std::size_t at, std::size_t start, std::size_t size) {
      ctx.copy(out + (static_cast<std::size_t>(rank) * count + start) * es, packed + at * es,
               size * es);
    });
  }
}

void hierarchical_reduce_scatter(CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                                 const void* send, void* recv, std::size_t count, hm_dtype_t dtype,
                                 hm_op_t op) {
  const std::size_t es = dtype_size(dtype);
  const std::size_t total = static_cast<std::size_t>(ctx.size()) * count;
  if (count == 0) return;
  const Place me = place_of(h, ctx.rank());
  const BlockPlan plan(ctx, h, model, count, es);
  // The input where it is, or a packed copy; the partial sums in the same layout.
  std::byte* sums = ctx.phase_buffer((plan.direct ? 1 : 2) * total * es);
  const auto* in = static_cast<const std::byte*>(send);
  if (!plan.direct) {
    std::byte* packed = sums + total * es;
    for_each_piece(h, plan, [&](int rank, std::size_t at, std::size_t start, std::size_t size) {
      ctx.copy(packed + at * es, in + (static_cast<std::size_t>(rank) * count + start) * es,
               size * es);
    });
    in = packed;
  }
  plan.run(ctx, [&](const SegmentViews& view, const IslandBlocks& blocks, std::size_t at,
                    std::size_t start, const SegmentTurn& turn) {
    reduce_scatter_segment(view, blocks, me, ctx.size(), in + at * es, sums + at * es,
                           static_cast<std::byte*>(recv) + start * es, dtype, op, turn);
  });
}

void hierarchical_barrier(CollectiveContext& ctx, const Hierarchy& h) {
  // Everyone of the island has arrived; then the islands' first members, across islands; then
  // the island again, which its first member enters only once every island has arrived. Only
  // the leaders' messages cross the slow tier.
  const Place me = place_of(h, ctx.rank());
  const auto& island = h.islands[static_cast<std::size_t>(me.island)];
  auto arrive = ctx.view(island, kFirst);
  dissemination_barrier(arrive);
  if (me.position == 0 && h.islands.size() > 1) {
    std::vector<int> leaders;
    for (const auto& i : h.islands) leaders.push_back(i.front());
    auto across = ctx.view(leaders, kSecond);
    dissemination_barrier(across);
  }
  auto release = ctx.view(island, kSecond + 1);
  dissemination_barrier(release);
}

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
