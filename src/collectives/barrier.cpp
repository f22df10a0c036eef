// Dissemination barrier: in round k every rank signals rank + 2^k and waits for rank - 2^k.
// After ceil(log2 n) rounds every rank has heard, directly or not, from every other.
#include "collectives/algorithms.hpp"
#include "collectives/pipeline.hpp"

namespace holmes {

void dissemination_barrier(CollectiveContext& ctx) {
  const int n = ctx.size();
  const int r = ctx.rank();
  std::uint64_t round = 0;
  for (long long distance = 1; distance < n; distance *= 2, ++round) {
    const auto sent = ctx.send(ring_mod(r + distance, n), round, {});
    const auto heard = ctx.recv(ring_mod(r - distance, n), round, {});
    ctx.wait(heard);
    ctx.wait(sent);
  }
}

}  // namespace holmes
