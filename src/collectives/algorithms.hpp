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

}  // namespace holmes
