// The init probe (HOLMES_COST_PROBE=1): measures the links this communicator has, tier by tier,
// so that the cost model (tuning.hpp) predicts from this cluster's numbers rather than nominal
// ones. For each tier present (two ranks on one host, two hosts of one island, two islands) one
// pair of ranks plays ping-pong with 8-byte messages (latency: half the round trip) and sends
// 64 KiB and 1 MiB messages that the peer acknowledges (bandwidth: the extra bytes over the
// extra time, so latency and fixed costs cancel). Every rank also times its reduction kernel.
// Medians of a few repetitions; about 20 ms on one host, 70 ms over a 1 Gbit/s link.
//
// The numbers travel to every rank at the end and every rank keeps the same ones (the slowest
// any rank saw), so every rank still makes the same choice from them.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "collectives/context.hpp"
#include "collectives/tuning.hpp"

namespace holmes {

enum class Tier : int { kSameHost = 0, kSameIsland = 1, kOtherIsland = 2 };
inline constexpr int kTiers = 3;
const char* tier_name(Tier tier);

// The ranks that measure a tier: `a` (the lowest rank with a peer across that tier) times, `b`
// (its lowest such peer) answers.
struct ProbePair {
  Tier tier = Tier::kSameHost;
  int a = 0;
  int b = 0;
};
// One pair per tier present, in tier order.
std::vector<ProbePair> probe_pairs(const Hierarchy& h);

// What one pair timed, in microseconds.
struct LinkSamples {
  std::vector<double> round_trip_us;  // 8-byte ping-pong
  double small_bytes = 0;
  double large_bytes = 0;
  std::vector<double> small_us;  // small_bytes one way, 8-byte acknowledgement back
  std::vector<double> large_us;  // large_bytes the same way
};
// Latency: half the median round trip. Bandwidth: (large - small bytes) over the difference of
// the median times. nullopt when a sample set is empty or the large messages did not take
// longer than the small ones (the transfer drowned in noise): the tier keeps its nominal numbers.
std::optional<LinkCost> fit_samples(const LinkSamples& samples);

// Microseconds per GB (of the result) of a reduction from timed runs: the median.
double reduce_us_per_gb(std::span<const double> run_us, double bytes);

// What each rank contributes to the exchange of results: per tier, the latency (us) and the
// time per GB (us), then the reduction's time per GB; 0 where this rank measured nothing.
inline constexpr std::size_t kProbeValues = 2 * kTiers + 1;
using ProbeValues = std::array<double, kProbeValues>;

struct MeasuredCosts {
  std::array<std::optional<LinkCost>, kTiers> tiers;
  std::optional<double> reduce_gbytes_per_s;
  bool empty() const;
  // "same host 4.1 us 6.20 GB/s; ...; reduce 3.9 GB/s"
  std::string describe() const;
};
ProbeValues encode_measurements(const MeasuredCosts& costs);
// Every rank's values (rank after rank) to the costs every rank keeps: per tier and number the
// worst any rank measured (largest latency, largest time per GB). The maximum does not depend on
// the order, so every rank gets bitwise the same numbers.
MeasuredCosts agree_measurements(std::span<const double> all_ranks);

// This rank's part of the probe: the pairs it belongs to (one after the other), then its
// reduction. Its results (what it measured as `a` of a pair, and its reduction) go to `out`.
// Every rank of `ctx` must call it at once, with the same hierarchy.
void measure_links(CollectiveContext& ctx, const Hierarchy& h, std::span<double> out);

}  // namespace holmes
