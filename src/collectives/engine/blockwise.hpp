// The blockwise decomposition of a group's reduce-scatter and allgather over uneven blocks: block
// k is reduced to its owner k, and broadcast from it, every block in one batch. NCCL has no
// reduce-scatter or allgather of uneven blocks (the hierarchical collectives' blocks differ in
// size, and positions past the lanes own none); a group of its reduces and broadcasts is how its
// users carry them. The decomposition is written once, over BlockCalls, and run by the NCCL
// engine (nccl_engine.cpp) and by Holmes's own chains (blockwise_engine.cpp), which is how it is
// tested where there is no GPU.
#pragma once

#include <holmes/holmes.h>

#include <cstddef>

#include "collectives/pipeline.hpp"

namespace holmes {

// The calls a blockwise engine makes, all positions of the group making the same ones in the
// same order.
class BlockCalls {
 public:
  virtual ~BlockCalls() = default;
  // Calls between begin() and end() may run together (NCCL's group calls); end() returns once
  // all of them have finished.
  virtual void begin() {}
  virtual void end() {}
  // `count` elements at `in` of every position reduced into `out` at position `root` (`out` is
  // written at the root only); AVG as SUM, divided by `average_over` when that is not 0.
  virtual void reduce(const std::byte* in, std::byte* out, std::size_t count, hm_dtype_t dtype,
                      hm_op_t op, int root, int average_over) = 0;
  // `count` elements at `buffer` from position `root` to every position.
  virtual void broadcast(std::byte* buffer, std::size_t count, hm_dtype_t dtype, int root) = 0;
};

// GroupEngine::reduce_scatter_blocks for the member at `position`.
void blockwise_reduce_scatter(BlockCalls& calls, int position, const std::byte* in,
                              std::byte* own_out, const BlockLayout& layout, hm_dtype_t dtype,
                              hm_op_t op, int average_over);
// GroupEngine::allgather_blocks.
void blockwise_allgather(BlockCalls& calls, std::byte* buffer, const BlockLayout& layout,
                         hm_dtype_t dtype);

}  // namespace holmes
