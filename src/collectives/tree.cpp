// Binomial trees for broadcast and reduce: ceil(log2 n) rounds of whole-buffer messages, the
// fastest rooted collectives for small messages (the pipelined chain wins for large ones).
// Ranks are numbered from the root (virtual rank v = rank - root mod n); v receives from
// v - lowbit(v) and sends to v + 2^k for every 2^k below lowbit(v), largest subtree first.
#include <vector>

#include "collectives/algorithms.hpp"
#include "collectives/pipeline.hpp"
#include "core/dtype.hpp"

namespace holmes {

void tree_broadcast(CollectiveContext& ctx, void* buffer, std::size_t count, hm_dtype_t dtype,
                    int root) {
  ctx.set_root(root);
  const int n = ctx.size();
  const std::size_t bytes = count * dtype_size(dtype);
  if (n == 1 || bytes == 0) return;
  auto* data = static_cast<std::byte*>(buffer);
  const int v = ring_mod(ctx.rank() - root, n);
  auto real = [&](int virtual_rank) { return ring_mod(virtual_rank + root, n); };
  int mask = ceil_power_of_two(n);
  if (v != 0) {
    mask = v & -v;
    std::vector<Transfer> from_parent;
    recv_chunked(ctx, real(v - mask), 0, data, bytes, from_parent);
    ctx.wait_all(from_parent);
  }
  std::vector<Transfer> sends;
  for (mask >>= 1; mask >= 1; mask >>= 1) {
    if (v + mask < n) send_chunked(ctx, real(v + mask), 0, data, bytes, sends);
  }
  ctx.wait_all(sends);
}

void tree_reduce(CollectiveContext& ctx, const void* send, void* recv, std::size_t count,
                 hm_dtype_t dtype, hm_op_t op, int root, int average_over) {
  ctx.set_root(root);
  const int n = ctx.size();
  const std::size_t bytes = count * dtype_size(dtype);
  const bool is_root = ctx.rank() == root;
  if (bytes == 0) return;
  const int v = ring_mod(ctx.rank() - root, n);
  auto real = [&](int virtual_rank) { return ring_mod(virtual_rank + root, n); };
  // The partial result: the root's output buffer, else scratch; children's data lands in temp.
  std::byte* scratch = ctx.scratch(is_root ? bytes : 2 * bytes);
  std::byte* partial = is_root ? static_cast<std::byte*>(recv) : scratch;
  std::byte* temp = is_root ? scratch : scratch + bytes;
  ctx.copy(partial, send, bytes);
  for (int mask = 1; mask < n; mask <<= 1) {
    std::vector<Transfer> transfers;
    if ((v & mask) != 0) {
      send_chunked(ctx, real(v - mask), 0, partial, bytes, transfers);
      ctx.wait_all(transfers);
      return;
    }
    if (v + mask < n) {
      recv_chunked(ctx, real(v + mask), 0, temp, bytes, transfers);
      ctx.wait_all(transfers);
      // Our subtree's ranks come before the child's: the same order as a chain would use.
      ctx.reduce(dtype, op, partial, partial, temp, count);
    }
  }
  if (op == HM_AVG && average_over > 1) ctx.finalize_average(dtype, partial, count, average_over);
}

}  // namespace holmes
