// Pipelined chains for broadcast and reduce. The ranks line up starting from the root (for
// broadcast) or ending at it (for reduce); the buffer moves down the line chunk by chunk, so for
// large messages every link is busy at once and the time approaches size / bandwidth.
#include <cstring>
#include <vector>

#include "collectives/algorithms.hpp"
#include "collectives/pipeline.hpp"
#include "core/dtype.hpp"
#include "core/reduce.hpp"

namespace holmes {

void chain_broadcast(CollectiveContext& ctx, void* buffer, std::size_t count, hm_dtype_t dtype,
                     int root) {
  ctx.set_root(root);
  const int n = ctx.size();
  if (n == 1 || count == 0) return;
  const std::size_t es = dtype_size(dtype);
  auto* data = static_cast<std::byte*>(buffer);
  const int position = ring_mod(ctx.rank() - root, n);  // 0 is the root, n-1 the end
  const int next = ring_mod(ctx.rank() + 1, n);
  const int previous = ring_mod(ctx.rank() - 1, n);
  const BlockLayout layout(count, 1, chunk_elements(ctx, es));
  const std::size_t chunks = layout.chunks();
  std::vector<Transfer> sends;
  if (position == 0) {
    send_block_chunks(ctx, next, data, layout, 0, es, 0, sends);
    ctx.wait_all(sends);
    return;
  }
  RecvWindow window(ctx, chunks, kPipelineDepth, [&](std::size_t c) -> std::optional<Transfer> {
    const auto range = layout.chunk(0, c);
    return ctx.recv(previous, c, {data + range.offset * es, range.count * es});
  });
  for (std::size_t c = 0; c < chunks; ++c) {
    window.wait(c);
    if (position < n - 1) {
      const auto range = layout.chunk(0, c);
      sends.push_back(ctx.send(next, c, {data + range.offset * es, range.count * es}));
    }
  }
  ctx.wait_all(sends);
}

void chain_reduce(CollectiveContext& ctx, const void* send, void* recv, std::size_t count,
                  hm_dtype_t dtype, hm_op_t op, int root) {
  chain_reduce(ctx, send, recv, count, dtype, op, root, ctx.size());
}

void chain_reduce(CollectiveContext& ctx, const void* send, void* recv, std::size_t count,
                  hm_dtype_t dtype, hm_op_t op, int root, int average_over) {
  ctx.set_root(root);
  const int n = ctx.size();
  const std::size_t es = dtype_size(dtype);
  const auto* in = static_cast<const std::byte*>(send);
  const bool is_root = ctx.rank() == root;
  if (n == 1 || count == 0) {
    if (is_root) {
      ctx.copy(recv, send, count * es);
      if (op == HM_AVG && average_over > 1) {
        ctx.finalize_average(dtype, recv, count, average_over);
      }
    }
    return;
  }
  // The chain starts at root+1 and ends at the root; each rank adds its input and passes the
  // partial result on, so every element is reduced in the same order.
  const int position = ring_mod(ctx.rank() - root - 1, n);
  const int next = ring_mod(ctx.rank() + 1, n);
  const int previous = ring_mod(ctx.rank() - 1, n);
  const BlockLayout layout(count, 1, chunk_elements(ctx, es));
  const std::size_t chunks = layout.chunks();
  std::vector<Transfer> sends;
  if (position == 0) {
    send_block_chunks(ctx, next, in, layout, 0, es, 0, sends);
    ctx.wait_all(sends);
    return;
  }
  const ScratchSlots scratch(ctx, layout, es);
  std::vector<std::optional<Transfer>> slot_send(kPipelineDepth);
  RecvWindow window(ctx, chunks, kPipelineDepth, [&](std::size_t c) -> std::optional<Transfer> {
    const auto range = layout.chunk(0, c);
    auto& previous_send = slot_send[c % kPipelineDepth];
    if (previous_send) {
      ctx.wait(*previous_send);
      previous_send.reset();
    }
    return ctx.recv(previous, c, {scratch.slot(c), range.count * es});
  });
  auto* out = static_cast<std::byte*>(recv);
  for (std::size_t c = 0; c < chunks; ++c) {
    window.wait(c);
    const auto range = layout.chunk(0, c);
    std::byte* slot = scratch.slot(c);
    if (is_root) {
      std::byte* dst = out + range.offset * es;
      ctx.reduce(dtype, op, dst, in + range.offset * es, slot, range.count);
      if (op == HM_AVG && average_over > 1) {
        ctx.finalize_average(dtype, dst, range.count, average_over);
      }
    } else {
      ctx.reduce(dtype, op, slot, in + range.offset * es, slot, range.count);
      slot_send[c % kPipelineDepth] = ctx.send(next, c, {slot, range.count * es});
    }
  }
  for (auto& s : slot_send) {
    if (s) ctx.wait(*s);
  }
}

}  // namespace holmes
