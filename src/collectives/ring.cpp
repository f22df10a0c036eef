// Ring allreduce, reduce-scatter and allgather, chunked and pipelined.
//
// Ranks form a ring (send to rank+1, receive from rank-1). The buffer is cut into `size` blocks
// and every block into chunks. A chunk moves one hop per step; as soon as a chunk arrives it is
// reduced (or stored) and sent on, so the wire, the reduction and the next receive overlap.
// Sends are asynchronous; receives are posted a few chunks ahead (RecvWindow).
//
// A reduce-scatter chunk is combined with this rank's input as `reduce(dst, in, received)`.
// Where the link can (shm, tcp: CombiningReceive::irecv_reduce), the transport does that as the
// chunk arrives, reading it once from where it landed; elsewhere it lands in a scratch slot and is
// reduced here after the wait. Either way the operands and their order are the same, so results
// are bitwise identical, whichever ranks combine in the transport.
#include <array>
#include <cstring>
#include <vector>

#include "collectives/algorithms.hpp"
#include "collectives/pipeline.hpp"
#include "core/dtype.hpp"
#include "core/reduce.hpp"

namespace holmes {
namespace {

std::span<std::byte> bytes_of(std::byte* base, BlockLayout::Range range, std::size_t element_size) {
  return {base + range.offset * element_size, range.count * element_size};
}

}  // namespace

void ring_allreduce(CollectiveContext& ctx, const void* send, void* recv, std::size_t count,
                    hm_dtype_t dtype, hm_op_t op) {
  ring_allreduce(ctx, send, recv, count, dtype, op, ctx.size());
}

void ring_allreduce(CollectiveContext& ctx, const void* send, void* recv, std::size_t count,
                    hm_dtype_t dtype, hm_op_t op, int average_over) {
  const std::size_t es = dtype_size(dtype);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  const int n = ctx.size();
  const int r = ctx.rank();
  if (n == 1 || count == 0) {
    ctx.copy(out, in, count * es);
    if (op == HM_AVG && average_over > 1) ctx.finalize_average(dtype, out, count, average_over);
    return;
  }
  const BlockLayout layout(count, n, chunk_elements(ctx, es));
  const std::size_t chunks = layout.chunks();
  const int right = ring_mod(r + 1, n);
  const int left = ring_mod(r - 1, n);
  // Steps 0 .. n-2 reduce-scatter; steps n-1 .. 2n-3 allgather. The block received at step t is
  // the block sent at step t+1. At the end of the reduce-scatter rank r owns block r+1.
  const std::size_t steps = 2 * static_cast<std::size_t>(n - 1);
  const auto rs_steps = static_cast<std::size_t>(n - 1);
  auto send_block = [&](std::size_t t) {
    return t < rs_steps ? ring_mod(r - static_cast<long long>(t), n)
                        : ring_mod(r + 1 - static_cast<long long>(t - rs_steps), n);
  };
  auto recv_block = [&](std::size_t t) {
    return t < rs_steps ? ring_mod(r - static_cast<long long>(t) - 1, n)
                        : ring_mod(r - static_cast<long long>(t - rs_steps), n);
  };

  const ScratchSlots scratch(ctx, layout, es);
  // Whether the receive of unit u (kept at u % depth, as the window's) combines as it arrives.
  std::array<bool, kPipelineDepth> combined{};
  std::vector<Transfer> sends;
  send_block_chunks(ctx, right, in, layout, send_block(0), es, 0, sends);
  const std::size_t units = steps * chunks;
  RecvWindow window(ctx, units, kPipelineDepth, [&](std::size_t u) -> std::optional<Transfer> {
    const std::size_t t = u / chunks;
    const auto range = layout.chunk(recv_block(t), u % chunks);
    if (range.count == 0) return std::nullopt;
    combined[u % kPipelineDepth] = false;
    if (t >= rs_steps) return ctx.recv(left, u, bytes_of(out, range, es));  // final: in place
    // Reduce-scatter chunks are combined with our input: by the transport as they arrive, or
    // here from a scratch slot.
    if (auto fused =
            ctx.recv_reduce(left, u, bytes_of(out, range, es), in + range.offset * es, dtype, op)) {
      combined[u % kPipelineDepth] = true;
      return fused;
    }
    return ctx.recv(left, u, {scratch.slot(u), range.count * es});
  });
  for (std::size_t u = 0; u < units; ++u) {
    if (!window.wait(u)) continue;
    const std::size_t t = u / chunks;
    const std::size_t c = u % chunks;
    const auto range = layout.chunk(recv_block(t), c);
    std::byte* mine = out + range.offset * es;
    if (t < rs_steps) {
      if (!combined[u % kPipelineDepth]) {
        ctx.reduce(dtype, op, mine, in + range.offset * es, scratch.slot(u), range.count);
      }
      if (t == rs_steps - 1 && op == HM_AVG && average_over > 1) {
        ctx.finalize_average(dtype, mine, range.count, average_over);
      }
    }
    if (t + 1 < steps)
      sends.push_back(ctx.send(right, (t + 1) * chunks + c, {mine, range.count * es}));
  }
  ctx.wait_all(sends);
}

void ring_reduce_scatter(CollectiveContext& ctx, const void* send, void* recv,
                         std::size_t recvcount, hm_dtype_t dtype, hm_op_t op) {
  const std::size_t es = dtype_size(dtype);
  const auto* in = static_cast<const std::byte*>(send);
  const int n = ctx.size();
  const int r = ctx.rank();
  if (n == 1 || recvcount == 0) {
    ctx.copy(recv, send, recvcount * es);
    return;
  }
  const std::size_t block_bytes = recvcount * es;
  // NCCL's in-place form (recv is our own block of send) works directly: block r of the input
  // is read only by the last step, element by element. Any other overlap goes through a copy.
  const bool direct = recv == in + static_cast<std::size_t>(r) * block_bytes ||
                      !overlaps(recv, block_bytes, send, block_bytes * static_cast<std::size_t>(n));
  const BlockLayout layout(recvcount * static_cast<std::size_t>(n), n, chunk_elements(ctx, es));
  // Scratch holds the receive slots and, when needed, the result before it is copied out.
  const std::size_t slots_bytes = kPipelineDepth * layout.max_chunk() * es;
  std::byte* scratch_base = ctx.scratch(slots_bytes + (direct ? 0 : block_bytes));
  auto* out = direct ? static_cast<std::byte*>(recv) : scratch_base + slots_bytes;
  ring_reduce_scatter_blocks(ctx, in, out, layout, dtype, op, n, scratch_base);
  if (!direct) ctx.copy(recv, out, block_bytes);
}

void ring_reduce_scatter_blocks(CollectiveContext& ctx, const std::byte* in, std::byte* own_out,
                                const BlockLayout& layout, hm_dtype_t dtype, hm_op_t op,
                                int average_over, std::byte* slots) {
  const std::size_t es = dtype_size(dtype);
  const int n = ctx.size();
  const int r = ctx.rank();
  const std::size_t own_start = layout.block_start(r);
  if (n == 1) {
    ctx.copy(own_out, in + own_start * es, layout.block_size(r) * es);
    if (op == HM_AVG && average_over > 1) {
      ctx.finalize_average(dtype, own_out, layout.block_size(r), average_over);
    }
    return;
  }
  const std::size_t chunks = layout.chunks();
  const int right = ring_mod(r + 1, n);
  const int left = ring_mod(r - 1, n);
  const auto steps = static_cast<std::size_t>(n - 1);
  // Shifted by one from the allreduce so that rank r ends owning block r.
  auto send_block = [&](std::size_t t) { return ring_mod(r - static_cast<long long>(t) - 1, n); };
  auto recv_block = [&](std::size_t t) { return ring_mod(r - static_cast<long long>(t) - 2, n); };

  const ScratchSlots scratch =
      slots != nullptr ? ScratchSlots(slots, layout, es) : ScratchSlots(ctx, layout, es);
  // A partial sum is sent from its scratch slot; the slot is reused only after that send.
  std::vector<std::optional<Transfer>> slot_send(kPipelineDepth);
  // Whether the receive of unit u (kept at u % depth, as the window's) combines as it arrives.
  std::array<bool, kPipelineDepth> combined{};
  // Where unit u's partial sum goes: its slot (to be sent on), or this rank's block at the last
  // step.
  auto destination = [&](std::size_t t, BlockLayout::Range range, std::byte* slot) {
    return t + 1 < steps ? slot : own_out + (range.offset - own_start) * es;
  };
  std::vector<Transfer> sends;
  send_block_chunks(ctx, right, in, layout, send_block(0), es, 0, sends);
  const std::size_t units = steps * chunks;
  RecvWindow window(ctx, units, kPipelineDepth, [&](std::size_t u) -> std::optional<Transfer> {
    const auto range = layout.chunk(recv_block(u / chunks), u % chunks);
    if (range.count == 0) return std::nullopt;
    auto& previous = slot_send[u % kPipelineDepth];
    if (previous) {
      ctx.wait(*previous);
      previous.reset();
    }
    std::byte* slot = scratch.slot(u);
    std::byte* dst = destination(u / chunks, range, slot);
    if (auto fused =
            ctx.recv_reduce(left, u, {dst, range.count * es}, in + range.offset * es, dtype, op)) {
      combined[u % kPipelineDepth] = true;
      return fused;
    }
    combined[u % kPipelineDepth] = false;
    return ctx.recv(left, u, {slot, range.count * es});
  });
  for (std::size_t u = 0; u < units; ++u) {
    if (!window.wait(u)) continue;
    const std::size_t t = u / chunks;
    const std::size_t c = u % chunks;
    const auto range = layout.chunk(recv_block(t), c);
    std::byte* slot = scratch.slot(u);
    std::byte* dst = destination(t, range, slot);
    if (!combined[u % kPipelineDepth]) {
      ctx.reduce(dtype, op, dst, in + range.offset * es, slot, range.count);
    }
    if (t + 1 < steps) {
      slot_send[u % kPipelineDepth] =
          ctx.send(right, (t + 1) * chunks + c, {slot, range.count * es});
    } else {
      if (op == HM_AVG && average_over > 1) {
        ctx.finalize_average(dtype, dst, range.count, average_over);
      }
    }
  }
  for (auto& s : slot_send) {
    if (s) ctx.wait(*s);
  }
  ctx.wait_all(sends);
}

void ring_allgather(CollectiveContext& ctx, const void* send, void* recv, std::size_t sendcount,
                    hm_dtype_t dtype) {
  const std::size_t es = dtype_size(dtype);
  const int n = ctx.size();
  const int r = ctx.rank();
  auto* out = static_cast<std::byte*>(recv);
  const std::size_t block_bytes = sendcount * es;
  if (sendcount == 0) return;
  std::byte* own = out + static_cast<std::size_t>(r) * block_bytes;
  if (send != own) {
    // Our block may sit where another rank's block will land (send == recv): copy it first.
    if (overlaps(own, block_bytes, send, block_bytes)) {
      std::byte* temp = ctx.scratch(block_bytes);
      ctx.copy(temp, send, block_bytes);
      ctx.copy(own, temp, block_bytes);
    } else {
      ctx.copy(own, send, block_bytes);
    }
  }
  const BlockLayout layout(sendcount * static_cast<std::size_t>(n), n, chunk_elements(ctx, es));
  ring_allgather_blocks(ctx, out, layout, dtype);
}

void ring_allgather_blocks(CollectiveContext& ctx, std::byte* buffer, const BlockLayout& layout,
                           hm_dtype_t dtype) {
  const std::size_t es = dtype_size(dtype);
  const int n = ctx.size();
  const int r = ctx.rank();
  if (n == 1) return;
  const std::size_t chunks = layout.chunks();
  const int right = ring_mod(r + 1, n);
  const int left = ring_mod(r - 1, n);
  const auto steps = static_cast<std::size_t>(n - 1);
  auto recv_block = [&](std::size_t t) { return ring_mod(r - static_cast<long long>(t) - 1, n); };
  std::vector<Transfer> sends;
  send_block_chunks(ctx, right, buffer, layout, r, es, 0, sends);
  const std::size_t units = steps * chunks;
  RecvWindow window(ctx, units, kGatherDepth, [&](std::size_t u) -> std::optional<Transfer> {
    const auto range = layout.chunk(recv_block(u / chunks), u % chunks);
    if (range.count == 0) return std::nullopt;
    return ctx.recv(left, u, bytes_of(buffer, range, es));
  });
  for (std::size_t u = 0; u < units; ++u) {
    if (!window.wait(u)) continue;
    const std::size_t t = u / chunks;
    const std::size_t c = u % chunks;
    if (t + 1 < steps) {
      const auto range = layout.chunk(recv_block(t), c);
      sends.push_back(ctx.send(right, (t + 1) * chunks + c, bytes_of(buffer, range, es)));
    }
  }
  ctx.wait_all(sends);
}

}  // namespace holmes
