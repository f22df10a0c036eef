// Pairwise-exchange alltoall: in step s every rank sends its block for rank+s and receives the
// block from rank-s, so each link carries one block per step and no rank is a hot spot.
#include <cstring>
#include <vector>

#include "collectives/algorithms.hpp"
#include "collectives/pipeline.hpp"
#include "core/dtype.hpp"

namespace holmes {

void pairwise_alltoall(CollectiveContext& ctx, const void* send, void* recv, std::size_t count,
                       hm_dtype_t dtype) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const std::size_t block = count * dtype_size(dtype);
  if (block == 0) return;
  const std::size_t total = block * static_cast<std::size_t>(n);
  auto* out = static_cast<std::byte*>(recv);
  // Blocks arrive while others are still being sent: an input that shares memory with the
  // output is copied first.
  const auto* in = static_cast<const std::byte*>(send);
  if (overlaps(send, total, recv, total)) {
    std::byte* staged = ctx.scratch(total);
    ctx.copy(staged, in, total);
    in = staged;
  }
  const auto own = static_cast<std::size_t>(r) * block;
  ctx.copy(out + own, in + own, block);
  // Post every exchange at once: the transport buffers what arrives early, and on a
  // two-core machine one io thread per rank keeps them all moving.
  std::vector<Transfer> transfers;
  transfers.reserve(2 * static_cast<std::size_t>(n - 1));
  for (int s = 1; s < n; ++s) {
    const int to = ring_mod(r + s, n);
    const int from = ring_mod(r - s, n);
    transfers.push_back(ctx.recv(from, 0, {out + static_cast<std::size_t>(from) * block, block}));
    transfers.push_back(ctx.send(to, 0, {in + static_cast<std::size_t>(to) * block, block}));
  }
  ctx.wait_all(transfers);
}

}  // namespace holmes
