#include "collectives/engine/blockwise.hpp"

#include "core/dtype.hpp"

namespace holmes {

void blockwise_reduce_scatter(BlockCalls& calls, int position, const std::byte* in,
                              std::byte* own_out, const BlockLayout& layout, hm_dtype_t dtype,
                              hm_op_t op, int average_over) {
  const std::size_t es = dtype_size(dtype);
  calls.begin();
  for (int k = 0; k < layout.blocks(); ++k) {
    const std::size_t count = layout.block_size(k);
    if (count == 0) continue;  // a position past the lanes owns nothing
    const std::byte* block = in + layout.block_start(k) * es;
    // Elsewhere than at the root `out` is not written; the block itself is a valid placeholder
    // (NCCL checks its pointers even where it does not use them).
    std::byte* out = k == position ? own_out : const_cast<std::byte*>(block);
    calls.reduce(block, out, count, dtype, op, k, average_over);
  }
  calls.end();
}

void blockwise_allgather(BlockCalls& calls, std::byte* buffer, const BlockLayout& layout,
                         hm_dtype_t dtype) {
  const std::size_t es = dtype_size(dtype);
  calls.begin();
  for (int k = 0; k < layout.blocks(); ++k) {
    const std::size_t count = layout.block_size(k);
    if (count > 0) calls.broadcast(buffer + layout.block_start(k) * es, count, dtype, k);
  }
  calls.end();
}

}  // namespace holmes
