// The blockwise decomposition (blockwise.hpp) over Holmes's own pipelined chains: NCCL's way of
// carrying a group's uneven blocks, run where NCCL is not (HOLMES_GROUP_ENGINE=blockwise), so
// that the composition the NCCL engine relies on is checked on every machine.
#include <algorithm>
#include <cstdint>

#include "collectives/algorithms.hpp"
#include "collectives/engine/blockwise.hpp"
#include "collectives/engine/group_engine.hpp"

namespace holmes {
namespace {

// One block after the other on the group's view. Every chain numbers its chunks from step 0 and
// a link may carry messages on several lanes out of order, so each call gets its own range of
// steps: a share of the phase's 2^32, far more than any chain's chunks.
class ChainCalls final : public BlockCalls {
 public:
  ChainCalls(CollectiveContext& group, int calls)
      : group_(group), stride_((std::uint64_t{1} << 32) / static_cast<std::uint64_t>(calls)) {}
  void reduce(const std::byte* in, std::byte* out, std::size_t count, hm_dtype_t dtype, hm_op_t op,
              int root, int average_over) override {
    auto chain = next_chain();
    chain_reduce(chain, in, out, count, dtype, op, root, average_over);
  }
  void broadcast(std::byte* buffer, std::size_t count, hm_dtype_t dtype, int root) override {
    auto chain = next_chain();
    chain_broadcast(chain, buffer, count, dtype, root);
  }

 private:
  CollectiveContext next_chain() { return group_.shifted(stride_ * calls_++); }

  CollectiveContext& group_;
  std::uint64_t stride_;
  std::uint64_t calls_ = 0;
};

class BlockwiseEngine final : public GroupEngine {
 public:
  std::string_view name() const override { return "blockwise"; }
  void reduce_scatter_blocks(CollectiveContext& group, const std::byte* in, std::byte* own_out,
                             const BlockLayout& layout, hm_dtype_t dtype, hm_op_t op,
                             int average_over) override {
    ChainCalls calls(group, std::max(layout.blocks(), 1));
    blockwise_reduce_scatter(calls, group.rank(), in, own_out, layout, dtype, op, average_over);
  }
  void allgather_blocks(CollectiveContext& group, std::byte* buffer, const BlockLayout& layout,
                        hm_dtype_t dtype) override {
    ChainCalls calls(group, std::max(layout.blocks(), 1));
    blockwise_allgather(calls, buffer, layout, dtype);
  }
  // One chain from `root`, as the NCCL engine's one ncclBroadcast (the island's part of a
  // hierarchical broadcast of device buffers).
  bool broadcast(CollectiveContext& group, std::byte* buffer, std::size_t bytes,
                 int root) override {
    ChainCalls calls(group, 1);
    calls.broadcast(buffer, bytes, HM_UINT8, root);
    return true;
  }
};

}  // namespace

GroupEngine& blockwise_engine() {
  static BlockwiseEngine engine;  // stateless
  return engine;
}

}  // namespace holmes
