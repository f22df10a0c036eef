// Hierarchical barrier: inside each island, then the islands' first ranks across, then inside
// again (only the leaders cross the slow tier).
#include "collectives/algorithms.hpp"
#include "collectives/hierarchical/segments.hpp"
#include "collectives/pipeline.hpp"
#include "core/dtype.hpp"

namespace holmes {

using namespace hier;

void hierarchical_barrier(CollectiveContext& ctx, const Hierarchy& h) {
  // Everyone of the island has arrived; then the islands' first members, across islands; then
  // the island again, which its first member enters only once every island has arrived. Only
  // the leaders' messages cross the slow tier.
  const Place me = place_of(h, ctx.rank());
  const auto& island = h.islands[static_cast<std::size_t>(me.island)];
  auto arrive = ctx.view(island, kFirst);
  dissemination_barrier(arrive);
  if (me.position == 0 && h.islands.size() > 1) {
    std::vector<int> leaders;
    for (const auto& i : h.islands) leaders.push_back(i.front());
    auto across = ctx.view(leaders, kSecond);
    dissemination_barrier(across);
  }
  auto release = ctx.view(island, kSecond + 1);
  dissemination_barrier(release);
}

}  // namespace holmes
