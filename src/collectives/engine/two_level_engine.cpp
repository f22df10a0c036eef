// The two-level engine (two_level_engine.hpp): across hosts between counterparts, then inside
// each host, on Holmes's rings (any number of ranks per host and hosts).
#include "collectives/engine/two_level_engine.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <vector>

#include "collectives/algorithms.hpp"
#include "collectives/pipeline.hpp"
#include "core/dtype.hpp"

namespace holmes {

int two_level_ranks_per_host(std::span<const int> host_of) {
  const std::size_t n = host_of.size();
  std::size_t per_host = 0;
  while (per_host < n && host_of[per_host] == host_of[0]) ++per_host;
  if (per_host < 2 || n % per_host != 0) return 0;
  const std::size_t hosts = n / per_host;
  if (hosts < 2 || hosts > static_cast<std::size_t>(kTwoLevelMaxHosts)) return 0;
  std::set<int> seen;
  for (std::size_t h = 0; h < hosts; ++h) {
    const int host = host_of[h * per_host];
    if (!seen.insert(host).second) return 0;  // a host in two places: not host after host
    for (std::size_t l = 1; l < per_host; ++l) {
      if (host_of[h * per_host + l] != host) return 0;
    }
  }
  return static_cast<int>(per_host);
}

namespace {

// This rank in a group of `hosts` x `per_host` positions, host after host (position = host x
// per_host + place), and the layouts of its two levels.
struct TwoLevelPlace {
  int hosts = 0;
  int per_host = 0;
  int host = 0;   // this rank's
  int place = 0;  // its place on its host
  // Each of the calls inside the host (one per host's blocks) numbers its chunks from step 0,
  // and a link may carry messages out of order: each gets its own range of the phase's steps.
  std::uint64_t stride = 0;

  int position(int h, int l) const { return h * per_host + l; }
  // The ranks at this rank's place on every host, host by host.
  std::vector<int> counterparts() const {
    std::vector<int> out;
    for (int h = 0; h < hosts; ++h) out.push_back(position(h, place));
    return out;
  }
  // The ranks of host `h`, by place.
  std::vector<int> on_host(int h) const {
    std::vector<int> out;
    for (int l = 0; l < per_host; ++l) out.push_back(position(h, l));
    return out;
  }
  // `layout`'s blocks of `positions`, where they lie, in that order.
  static BlockLayout blocks_of(const BlockLayout& layout, const std::vector<int>& positions) {
    std::vector<BlockLayout::Range> blocks;
    for (int p : positions) blocks.push_back({layout.block_start(p), layout.block_size(p)});
    return BlockLayout(std::move(blocks), layout.chunk_elems());
  }
  // `layout`'s blocks at this rank's place on every host, packed one after the other (what
  // this rank sums over its host).
  BlockLayout column(const BlockLayout& layout) const {
    std::vector<BlockLayout::Range> blocks;
    std::size_t at = 0;
    for (int h = 0; h < hosts; ++h) {
      const std::size_t size = layout.block_size(position(h, place));
      blocks.push_back({at, size});
      at += size;
    }
    return BlockLayout(std::move(blocks), layout.chunk_elems());
  }
  // The group of this host's ranks for the call that carries host `h`'s blocks.
  CollectiveContext inside(const CollectiveContext& group, int h) const {
    return group.view(on_host(host), 0).shifted(stride * static_cast<std::uint64_t>(h + 1));
  }
};

class TwoLevelEngine final : public GroupEngine {
 public:
  explicit TwoLevelEngine(int ranks_per_host) : per_host_(ranks_per_host) {}
  std::string_view name() const override { return "two-level"; }

  void reduce_scatter_blocks(CollectiveContext& group, const std::byte* in, std::byte* own_out,
                             const BlockLayout& layout, hm_dtype_t dtype, hm_op_t op,
                             int average_over) override {
    const auto at = place_in(group, layout);
    if (!at) {
      ring_reduce_scatter_blocks(group, in, own_out, layout, dtype, op, average_over, nullptr);
      return;
    }
    const std::size_t es = dtype_size(dtype);
    // This rank's column (the blocks at its place on every host), summed over its host, then
    // the receive slots of both levels' rings.
    const BlockLayout column = at->column(layout);
    const std::size_t column_bytes =
        (column.block_start(at->hosts - 1) + column.block_size(at->hosts - 1)) * es;
    const std::size_t slots_at = (column_bytes + 63) / 64 * 64;
    std::byte* sums = group.scratch(slots_at + kPipelineDepth * layout.max_chunk() * es);
    std::byte* slots = sums + slots_at;
    // 1. Inside the host, host by host: host h's blocks summed over this host, each to the rank
    // at its place here. Sums only: the average divides once, at the end.
    for (int h = 0; h < at->hosts; ++h) {
      auto inside = at->inside(group, h);
      ring_reduce_scatter_blocks(inside, in, sums + column.block_start(h) * es,
                                 TwoLevelPlace::blocks_of(layout, at->on_host(h)), dtype, op, 0,
                                 slots);
    }
    // 2. Across hosts: the counterparts reduce-scatter their columns' sums.
    auto across = group.view(at->counterparts(), 0);
    ring_reduce_scatter_blocks(across, sums, own_out, column, dtype, op, average_over, slots);
  }

  void allgather_blocks(CollectiveContext& group, std::byte* buffer, const BlockLayout& layout,
                        hm_dtype_t dtype) override {
    const auto at = place_in(group, layout);
    if (!at) {
      ring_allgather_blocks(group, buffer, layout, dtype);
      return;
    }
    // 1. Across hosts: every block to the ranks at its place on the other hosts.
    auto across = group.view(at->counterparts(), 0);
    ring_allgather_blocks(across, buffer, TwoLevelPlace::blocks_of(layout, at->counterparts()),
                          dtype);
    // 2. Inside the host, host by host: the blocks this host's ranks now hold, to each other.
    for (int h = 0; h < at->hosts; ++h) {
      auto inside = at->inside(group, h);
      ring_allgather_blocks(inside, buffer, TwoLevelPlace::blocks_of(layout, at->on_host(h)),
                            dtype);
    }
  }

 private:
  // Where this rank sits, or nullopt where the group is not the engine's shape (every member
  // decides the same: the size and the layout are the group's) or a call's chunks would not
  // fit its range of steps: the whole group's ring then.
  std::optional<TwoLevelPlace> place_in(const CollectiveContext& group,
                                        const BlockLayout& layout) const {
    if (group.size() % per_host_ != 0 || group.size() / per_host_ < 2) return std::nullopt;
    TwoLevelPlace at;
    at.per_host = per_host_;
    at.hosts = group.size() / per_host_;
    at.host = group.rank() / per_host_;
    at.place = group.rank() % per_host_;
    at.stride = (std::uint64_t{1} << 32) / static_cast<std::uint64_t>(at.hosts + 1);
    const auto steps = static_cast<std::uint64_t>(std::max(at.hosts, at.per_host) - 1);
    if (steps * layout.chunks() >= at.stride) return std::nullopt;
    return at;
  }

  int per_host_;
};

}  // namespace

std::unique_ptr<GroupEngine> make_two_level_engine(int ranks_per_host) {
  return std::make_unique<TwoLevelEngine>(ranks_per_host);
}

}  // namespace holmes
