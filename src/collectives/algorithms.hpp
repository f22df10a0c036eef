// The collective algorithms, each over CollectiveContext only. Arguments are already validated
// by the communicator; buffers may alias as the C API allows (in place).
//
//   ring_allreduce       reduce-scatter then allgather around the ring, chunked and pipelined:
//                        every chunk is forwarded as soon as it is reduced.
//   ring_reduce_scatter  the first half of it; ring_allgather the second.
//   chain_broadcast      a pipelined chain from the root.
//   chain_reduce         a pipelined chain ending at the root.
//   pairwise_alltoall    every rank exchanges a block with every other, shifted by one each step.
//   dissemination_barrier  ceil(log2 n) rounds of empty messages.
//
// Results are bitwise identical on every rank: each block of an allreduce is reduced by one rank
// in a fixed order and then copied to the others; AVG divides once, where the sum is complete.
#pragma once

#include <holmes/holmes.h>

#include <cstddef>

#include "collectives/context.hpp"
#include "collectives/pipeline.hpp"
#include "collectives/tuning.hpp"

namespace holmes {

void ring_allreduce(CollectiveContext& ctx, const void* send, void* recv, std::size_t count,
                    hm_dtype_t dtype, hm_op_t op);
void ring_reduce_scatter(CollectiveContext& ctx, const void* send, void* recv,
                         std::size_t recvcount, hm_dtype_t dtype, hm_op_t op);
void ring_allgather(CollectiveContext& ctx, const void* send, void* recv, std::size_t sendcount,
                    hm_dtype_t dtype);
void chain_broadcast(CollectiveContext& ctx, void* buffer, std::size_t count, hm_dtype_t dtype,
                     int root);
void chain_reduce(CollectiveContext& ctx, const void* send, void* recv, std::size_t count,
                  hm_dtype_t dtype, hm_op_t op, int root);
void pairwise_alltoall(CollectiveContext& ctx, const void* send, void* recv, std::size_t count,
                       hm_dtype_t dtype);
void dissemination_barrier(CollectiveContext& ctx);

// Small and medium allreduce (recursive.cpp) and binomial trees (tree.cpp).
void recursive_doubling_allreduce(CollectiveContext& ctx, const void* send, void* recv,
                                  std::size_t count, hm_dtype_t dtype, hm_op_t op,
                                  int average_over);
void halving_doubling_allreduce(CollectiveContext& ctx, const void* send, void* recv,
                                std::size_t count, hm_dtype_t dtype, hm_op_t op, int average_over);
void tree_broadcast(CollectiveContext& ctx, void* buffer, std::size_t count, hm_dtype_t dtype,
                    int root);
void tree_reduce(CollectiveContext& ctx, const void* send, void* recv, std::size_t count,
                 hm_dtype_t dtype, hm_op_t op, int root, int average_over);

// Through the communicator's shared board (shared_memory.cpp): every rank publishes its buffer
// and reduces everyone's in rank order. Needs ctx.shared_board() and a buffer that fits a slot.
void shared_memory_allreduce(CollectiveContext& ctx, const void* send, void* recv,
                             std::size_t count, hm_dtype_t dtype, hm_op_t op);
void shared_memory_broadcast(CollectiveContext& ctx, void* buffer, std::size_t count,
                             hm_dtype_t dtype, int root);
void shared_memory_reduce(CollectiveContext& ctx, const void* send, void* recv, std::size_t count,
                          hm_dtype_t dtype, hm_op_t op, int root);
void shared_memory_barrier(CollectiveContext& ctx);

// By islands (hierarchical/, one file per collective over the segment engine of segments.hpp);
// `ctx` spans the whole communicator.
void hierarchical_allreduce(CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                            const void* send, void* recv, std::size_t count, hm_dtype_t dtype,
                            hm_op_t op);
void hierarchical_broadcast(CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                            void* buffer, std::size_t count, hm_dtype_t dtype, int root);
void hierarchical_reduce(CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                         const void* send, void* recv, std::size_t count, hm_dtype_t dtype,
                         hm_op_t op, int root);
void hierarchical_barrier(CollectiveContext& ctx, const Hierarchy& h);
void hierarchical_alltoall(CollectiveContext& ctx, const Hierarchy& h, const void* send, void* recv,
                           std::size_t count, hm_dtype_t dtype);
// `count` is per rank, as in the calls.
void hierarchical_allgather(CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                            const void* send, void* recv, std::size_t count, hm_dtype_t dtype);
void hierarchical_reduce_scatter(CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                                 const void* send, void* recv, std::size_t count, hm_dtype_t dtype,
                                 hm_op_t op);

// Building blocks. AVG reduces as SUM and divides by `average_over` where a result is complete
// (0: never, for a phase whose result is not final).
void ring_allreduce(CollectiveContext& ctx, const void* send, void* recv, std::size_t count,
                    hm_dtype_t dtype, hm_op_t op, int average_over);
void chain_reduce(CollectiveContext& ctx, const void* send, void* recv, std::size_t count,
                  hm_dtype_t dtype, hm_op_t op, int root, int average_over);
// Ring reduce-scatter over arbitrary blocks: position r of ctx ends with block r of `layout`
// reduced, written to `own_out`. `slots` is scratch for the receive slots (nullptr: ctx's).
void ring_reduce_scatter_blocks(CollectiveContext& ctx, const std::byte* in, std::byte* own_out,
                                const BlockLayout& layout, hm_dtype_t dtype, hm_op_t op,
                                int average_over, std::byte* slots);
// Ring allgather over arbitrary blocks: `buffer` holds block r of position r; every position
// ends with every block.
void ring_allgather_blocks(CollectiveContext& ctx, std::byte* buffer, const BlockLayout& layout,
                           hm_dtype_t dtype);

}  // namespace holmes
