#include "collectives/engine/ipc_engine.hpp"

#include <algorithm>
#include <vector>

#include "collectives/algorithms.hpp"
#include "core/dtype.hpp"
#include "core/status.hpp"

namespace holmes {
namespace {

// Steps a barrier may use (dissemination: log2 of the group's size); round k's barrier uses the
// k-th range of the phase's steps.
constexpr std::uint64_t kStepsPerBarrier = 64;
// Where the second half of a window starts is a multiple of this.
constexpr std::size_t kAlignment = 256;

class IpcEngine final : public GroupEngine {
 public:
  explicit IpcEngine(IpcWindows windows) : windows_(std::move(windows)) {}
  std::string_view name() const override { return "ipc"; }

  void reduce_scatter_blocks(CollectiveContext& group, const std::byte* in, std::byte* own_out,
                             const BlockLayout& layout, hm_dtype_t dtype, hm_op_t op,
                             int average_over) override {
    const int n = check_group(group, layout);
    const int me = group.rank();
    const std::size_t es = dtype_size(dtype);
    // Each round carries a chunk of every block: every member's chunks fit a half window.
    const std::size_t step = per_round(es * static_cast<std::size_t>(n));
    const BlockLayout rounds = layout.rechunked(step);
    std::vector<const void*> sources(static_cast<std::size_t>(n));
    std::vector<DeviceCopy> copies;
    for (std::size_t k = 0; k < rounds.chunks(); ++k) {
      const std::size_t half = (k % 2) * half_bytes();
      std::byte* own = windows_.at[static_cast<std::size_t>(me)].get() + half;
      // The round's slices into this member's window, with one wait for all of them.
      copies.clear();
      for (int b = 0; b < n; ++b) {
        const auto piece = rounds.chunk(b, k);
        if (piece.count == 0) continue;
        copies.push_back({own + static_cast<std::size_t>(b) * step * es, in + piece.offset * es,
                          piece.count * es});
      }
      group.copy_many(copies);
      barrier(group, k);
      const std::size_t len = rounds.chunk(me, k).count;
      if (len == 0) continue;
      std::byte* dst = own_out + k * step * es;
      // Every member's slice of this block, in rank order, read once each (one kernel per 8).
      for (int p = 0; p < n; ++p) {
        sources[static_cast<std::size_t>(p)] = windows_.at[static_cast<std::size_t>(p)].get() +
                                               half + static_cast<std::size_t>(me) * step * es;
      }
      group.reduce_many(dtype, op, dst, sources, len);
      if (op == HM_AVG && average_over > 1) group.finalize_average(dtype, dst, len, average_over);
    }
    barrier(group, rounds.chunks());
  }

  void allgather_blocks(CollectiveContext& group, std::byte* buffer, const BlockLayout& layout,
                        hm_dtype_t dtype) override {
    const int n = check_group(group, layout);
    const int me = group.rank();
    const std::size_t es = dtype_size(dtype);
    const BlockLayout rounds = layout.rechunked(per_round(es));
    std::vector<DeviceCopy> copies;
    for (std::size_t k = 0; k < rounds.chunks(); ++k) {
      const std::size_t half = (k % 2) * half_bytes();
      const auto mine = rounds.chunk(me, k);
      if (mine.count > 0) {
        group.copy(windows_.at[static_cast<std::size_t>(me)].get() + half,
                   buffer + mine.offset * es, mine.count * es);
      }
      barrier(group, k);
      // The others' blocks out of their windows, with one wait for all of them.
      copies.clear();
      for (int p = 0; p < n; ++p) {
        const auto piece = rounds.chunk(p, k);
        if (p == me || piece.count == 0) continue;
        copies.push_back({buffer + piece.offset * es,
                          windows_.at[static_cast<std::size_t>(p)].get() + half, piece.count * es});
      }
      group.copy_many(copies);
    }
    barrier(group, rounds.chunks());
  }

  bool broadcast(CollectiveContext& group, std::byte* buffer, std::size_t bytes,
                 int root) override {
    check_size(group);
    const int me = group.rank();
    const std::size_t step = half_bytes();
    const std::size_t rounds = (bytes + step - 1) / step;
    std::byte* const from = windows_.at[static_cast<std::size_t>(root)].get();
    for (std::size_t k = 0; k < rounds; ++k) {
      const std::size_t half = (k % 2) * step;
      const std::size_t len = std::min(step, bytes - k * step);
      if (me == root) group.copy(from + half, buffer + k * step, len);
      barrier(group, k);
      if (me != root) group.copy(buffer + k * step, from + half, len);
    }
    barrier(group, rounds);
    return true;
  }

 private:
  void check_size(const CollectiveContext& group) const {
    if (static_cast<std::size_t>(group.size()) != windows_.at.size()) {
      fail(HM_ERR_INTERNAL, "ipc engine: a group of {} on windows made for {}", group.size(),
           windows_.at.size());
    }
    if (!group.on_device()) fail(HM_ERR_INTERNAL, "ipc engine: the buffers are not on a device");
  }

  // The group's size, which must be the one the windows were made for, a block per member.
  int check_group(const CollectiveContext& group, const BlockLayout& layout) const {
    check_size(group);
    if (layout.blocks() != group.size()) {
      fail(HM_ERR_INTERNAL, "ipc engine: {} blocks for a group of {}", layout.blocks(),
           group.size());
    }
    return group.size();
  }

  // A half window, aligned for every element type (the window's size is any setting).
  std::size_t half_bytes() const { return windows_.bytes / 2 / kAlignment * kAlignment; }

  // Elements per round when each element takes `bytes_per_element` of a half window.
  std::size_t per_round(std::size_t bytes_per_element) const {
    const std::size_t step = half_bytes() / bytes_per_element;
    if (step == 0) {
      fail(HM_ERR_INVALID_ARGUMENT,
           "ipc engine: a {}-byte window holds no round of {} bytes per element (raise "
           "HOLMES_IPC_WINDOW_BYTES)",
           windows_.bytes, bytes_per_element);
    }
    return step;
  }

  // Every member has finished the round before it (its copies in, its reads of the windows).
  static void barrier(const CollectiveContext& group, std::size_t round) {
    CollectiveContext at = group.shifted(round * kStepsPerBarrier);
    dissemination_barrier(at);
  }

  IpcWindows windows_;
};

}  // namespace

std::unique_ptr<GroupEngine> make_ipc_engine(IpcWindows windows) {
  return std::make_unique<IpcEngine>(std::move(windows));
}

}  // namespace holmes
