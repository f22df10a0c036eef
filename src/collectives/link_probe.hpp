// The init probe (HOLMES_COST_PROBE=1): measures the links this communicator has, tier by tier,
// so that the cost model (tuning.hpp) predicts from this cluster's numbers rather than nominal
// ones. Same host: the ranks of one host; hosts of one island, and islands: one pair of ranks.
// Each group runs as a ring's step does, every member sending to the next while it receives
// from the previous (a pair exchanges): the cores the members share, and a link used both ways,
// are part of what a step costs. Latency: an 8-byte step. Bandwidth: the extra bytes of a 1 MiB
// step over a 64 KiB one, over the extra time, so latency and fixed costs cancel. Each member runs
// pinned to a CPU of its own while it measures (the scheduler had kept pairs on one core, at
// half their rate). Every rank also times its reduction kernel. Medians of
// a few repetitions: about 25 ms on one host, 150 ms with a 1 Gbit/s tier.
//
// The groups measure one after the other, every rank waiting at a barrier in between (the others
// asleep, not yielding their cores to the pair), and each repetition drives the transports as a
// small collective does. The numbers travel to every rank at the end and every rank keeps the
// same ones (per number, the median of what the members that measured it saw), so every rank
// still makes the same choice from them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "collectives/context.hpp"
#include "collectives/tuning.hpp"

namespace holmes {

// Ranks that measure a tier together: a host's ranks (a ring), or a pair (`ranks[0]` times,
// `ranks[1]` answers).
struct ProbeGroup {
  Tier tier = Tier::kSameHost;
  std::vector<int> ranks;
};
// The first host with two ranks or more (all its ranks); then for each other tier present, its
// first pair: the lowest rank with a peer across the tier, and its lowest such peer.
std::vector<ProbeGroup> probe_groups(const Hierarchy& h);

// What a group's measured rate is multiplied by: each member runs pinned to one of `cpus` CPUs
// (its position modulo their number), and where a host's ranks outnumber its CPUs, a CPU did
// that many members' copies, which cores of their own would have done at once (the model
// divides by the ranks per core itself, tuning.hpp). 1 for a pair across hosts: on a link that
// a NIC or a shaper limits, sharing a core changes nothing.
int members_per_cpu(const ProbeGroup& group, int cpus);

// What one group timed, in microseconds.
struct LinkSamples {
  std::vector<double> latency_us;  // one-way estimates from 8-byte messages
  double small_bytes = 0;
  double large_bytes = 0;
  std::vector<double> small_us;  // small_bytes moved (and acknowledged, for a pair)
  std::vector<double> large_us;  // large_bytes the same way
};
// Latency: the median estimate. Bandwidth: (large - small bytes) over the difference of
// the median times, or of the fastest times where the medians show none (load delayed the small
// runs), or else the large messages' median time less the latency (the sizes took different
// paths). nullopt when a sample set is empty or the large messages took no longer than the
// latency (the transfer drowned in noise): the tier keeps its nominal numbers.
std::optional<LinkCost> fit_samples(const LinkSamples& samples);

// Microseconds per GB (of the result) of a reduction from timed runs: the median.
double reduce_us_per_gb(std::span<const double> run_us, double bytes);

// What each rank contributes to the exchange of results: per tier, the latency (us) and the
// time per GB (us), then the reduction's time per GB; 0 where this rank measured nothing.
inline constexpr std::size_t kProbeValues = 2 * kTiers + 1;
using ProbeValues = std::array<double, kProbeValues>;

ProbeValues encode_measurements(const TierCosts& costs);
// Every rank's values (rank after rank) to the costs every rank keeps: per number, the median
// of the ranks that measured it (a tier, its group's members; the reduction, every rank). The
// median does not depend on the order, so every rank gets bitwise the same numbers.
TierCosts agree_measurements(std::span<const double> all_ranks);

// This rank's part of the probe: the groups, one after the other (measuring in those it belongs
// to), then its reduction. Its results (what it measured as a member of a group, and its
// reduction) go to `out`.
// Every rank of `ctx` must call it at once, with the same hierarchy.
void measure_links(CollectiveContext& ctx, const Hierarchy& h, std::span<double> out);

}  // namespace holmes
