#include "collectives/tuning.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "collectives/engine/two_level_engine.hpp"
#include "collectives/pipeline.hpp"
#include "collectives/predictions.hpp"
#include "collectives/registry.hpp"
#include "core/status.hpp"

namespace holmes {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// The worst latency, wire and cores among a set of links.
struct Worst {
  double latency_us = 0;
  double gbytes_per_s = kInfinity;
  double cpu_gbytes_per_s = kInfinity;
  void add(const LinkCost& link) {
    latency_us = std::max(latency_us, link.latency_us);
    gbytes_per_s = std::min(gbytes_per_s, link.gbytes_per_s);
    cpu_gbytes_per_s = std::min(cpu_gbytes_per_s, link.cpu_gbytes_per_s);
  }
  LinkCost cost() const {
    return {latency_us, std::isfinite(gbytes_per_s) ? gbytes_per_s : 1e9, cpu_gbytes_per_s};
  }
};

// `link` with `share` of its wire: ranks of one host that send off it over the same tier share
// the host's uplink (the model has one per tier); each still has its own share of the cores.
LinkCost wire_share(LinkCost link, double share) {
  link.gbytes_per_s *= share;
  return link;
}

// `link` where the ranks that want the cores are `relief` of those the hierarchy's numbers
// assume (CostModel::ranks_per_core_of): the cores give each of them more.
LinkCost relieved(LinkCost link, double relief) {
  link.cpu_gbytes_per_s /= relief;
  return link;
}

// `link` as far as the cores are concerned: what its transfers cost them (CostModel::crowded).
LinkCost cores_only(LinkCost link) {
  link.gbytes_per_s = kInfinity;
  return link;
}

// The slowest link of a step in which each `from` rank sends to its `to` rank at once. Ranks of
// one host that send off it over the same tier share the host's uplink (the model has one per
// tier), so each gets its share of the bandwidth.
LinkCost step_link(const Hierarchy& h, const std::vector<std::pair<int, int>>& sends) {
  std::map<std::pair<int, Tier>, int> sharing;  // (host, tier): its ranks sending over it
  for (const auto& [from, to] : sends) {
    const Tier tier = h.tier(from, to);
    if (tier != Tier::kSameHost) ++sharing[{h.host[static_cast<std::size_t>(from)], tier}];
  }
  Worst worst;
  for (const auto& [from, to] : sends) {
    const Tier tier = h.tier(from, to);
    worst.add(tier == Tier::kSameHost
                  ? h.link(from, to)
                  : wire_share(h.link(from, to),
                               1.0 / sharing[{h.host[static_cast<std::size_t>(from)], tier}]));
  }
  return worst.cost();
}

// Which ranks recursive doubling pairs, as recursive.cpp's Fold numbers them: the first 2 rem
// ranks fold in pairs (2i, 2i + 1) and the odd one of each pair goes on as virtual rank i; the
// ranks after them as virtual ranks rem, rem + 1, ...
Hierarchy::RecursiveLinks recursive_links(const Hierarchy& h) {
  Hierarchy::RecursiveLinks links;
  const int n = h.size();
  if (n < 2) return links;
  const int p2 = floor_power_of_two(n);
  const int rem = n - p2;
  const auto real = [rem](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  std::vector<std::pair<int, int>> sends;
  for (int i = 0; i < rem; ++i) sends.emplace_back(2 * i, 2 * i + 1);
  links.fold = step_link(h, sends);
  for (int mask = 1; mask < p2; mask <<= 1) {
    sends.clear();
    for (int v = 0; v < p2; ++v) sends.emplace_back(real(v), real(v ^ mask));
    links.rounds.push_back(step_link(h, sends));
  }
  return links;
}

Hierarchy::Summary summarize(const Hierarchy& h) {
  Hierarchy::Summary s;
  const int n = h.size();
  s.islands = static_cast<int>(h.islands.size());
  s.largest_island = 0;
  s.smallest_island = n;
  for (const auto& island : h.islands) {
    s.largest_island = std::max(s.largest_island, static_cast<int>(island.size()));
    s.smallest_island = std::min(s.smallest_island, static_cast<int>(island.size()));
  }
  Worst ring;
  double ring_cpu_us_per_byte = 0;
  for (int i = 0; i < n && n > 1; ++i) {
    const LinkCost& link = h.link(h.ring_order[static_cast<std::size_t>(i)],
                                  h.ring_order[static_cast<std::size_t>((i + 1) % n)]);
    ring.add(link);
    ring_cpu_us_per_byte += 1.0 / link.cpu_gbytes_per_s;
  }
  s.ring = ring.cost();
  if (n > 1) s.ring_cores_gbytes_per_s = n / ring_cpu_us_per_byte;
  s.recursive = recursive_links(h);
  std::map<int, int> per_host;
  std::map<int, std::set<int>> hosts_of_island;
  for (int r = 0; r < n; ++r) {
    ++per_host[h.host[static_cast<std::size_t>(r)]];
    hosts_of_island[h.island[static_cast<std::size_t>(r)]].insert(
        h.host[static_cast<std::size_t>(r)]);
  }
  s.min_per_host = n;
  s.max_per_host = 0;
  for (const auto& [host, count] : per_host) {
    s.min_per_host = std::min(s.min_per_host, count);
    s.max_per_host = std::max(s.max_per_host, count);
  }
  s.min_hosts_per_island = n;
  s.max_hosts_per_island = 0;
  for (const auto& [island, hosts] : hosts_of_island) {
    s.min_hosts_per_island = std::min(s.min_hosts_per_island, static_cast<int>(hosts.size()));
    s.max_hosts_per_island = std::max(s.max_hosts_per_island, static_cast<int>(hosts.size()));
    if (hosts.size() > 1) s.hosts_in_shared_islands += static_cast<int>(hosts.size());
  }
  // Tiers present: two ranks on one host, two hosts in one island, two islands.
  Worst intra;
  if (s.max_per_host > 1) intra.add(h.same_host);
  if (s.max_hosts_per_island > 1) intra.add(h.same_island);
  s.intra = intra.cost();
  Worst any = intra;
  if (s.islands > 1) any.add(h.other_island);
  s.any = any.cost();
  Worst island_ring;
  double cpu_us_per_byte = 0;  // summed over the links
  int links = 0;
  for (const auto& island : h.islands) {
    const std::size_t size = island.size();
    for (std::size_t i = 0; i < size && size > 1; ++i, ++links) {
      const LinkCost& link = h.link(island[i], island[(i + 1) % size]);
      island_ring.add(link);
      cpu_us_per_byte += 1.0 / link.cpu_gbytes_per_s;
    }
  }
  s.island_ring = island_ring.cost();
  if (links > 0) s.island_ring.cpu_gbytes_per_s = links / cpu_us_per_byte;
  // The two-level engine's shape, as the communicator tests an island's members (in the order
  // of Hierarchy::islands) before it gives them the engine.
  for (const auto& island : h.islands) {
    if (island.size() < 2) continue;
    std::vector<int> host_of;
    for (int r : island) host_of.push_back(h.host[static_cast<std::size_t>(r)]);
    const int per_host = two_level_ranks_per_host(host_of);
    if (per_host == 0 || (s.two_level_per_host != 0 && per_host != s.two_level_per_host)) {
      s.two_level_per_host = 0;
      break;
    }
    s.two_level_per_host = per_host;
  }
  return s;
}

// The link a flat ring (or chain) of a call whose ranks each hold `call_bytes` steps at: its worst
// latency and wire, and for the cores, in a driven call, their mean over the ring's links. There
// the callers' threads move every link's bytes at once and yield their turns while they wait, so
// a step costs the cores all its copies, the cheap same-host ones beside the slow link's. In a
// carried call each rank's transport thread and its caller take turns on the cores, and the
// slowest link's crowded pace sets the ring's. Measured on 6 ranks of 2 cores, 3 hosts, 2
// islands (BENCHMARKS.md, "Ranks that share cores"), the same tiers for both: the mean predicts
// 0.82-0.91 of the ring's time at 64 KiB-1 MiB (the slowest link: 1.5-1.7x), the slowest link
// 1.2-1.4x at 2-16 MiB (the mean: 0.65-0.74); with each run's probe, 0.95-1.2x there.
LinkCost flat_ring_link(const Hierarchy& h, const CostModel& m, double call_bytes) {
  LinkCost link = h.summary.ring;
  if (m.driven(call_bytes)) link.cpu_gbytes_per_s = h.summary.ring_cores_gbytes_per_s;
  return link;
}

// The model and the relief of the links' cores (relieved()) for a phase in which `active` of
// `ranks` ranks work (CostModel::ranks_per_core_of).
struct PhaseCrowd {
  CostModel model;
  double relief = 1;
};
PhaseCrowd phase_crowd(const CostModel& m, double active, double ranks) {
  PhaseCrowd phase{m, 1};
  phase.model.ranks_per_core = m.ranks_per_core_of(active, ranks);
  phase.relief = phase.model.ranks_per_core / m.ranks_per_core;
  return phase;
}

double chunks_of(const CostModel& model, double bytes, double chunk_bytes) {
  (void)model;
  return std::max(1.0, std::ceil(bytes / chunk_bytes));
}

// Pipelined ring allreduce over n ranks whose slowest link is `link`.
double ring_allreduce_us(const CostModel& m, int n, double bytes, const LinkCost& link,
                         double chunk_bytes) {
  if (n <= 1) return 0;
  const double block = bytes / n;
  const double steps = 2.0 * (n - 1);
  // Chunks are reduced while the next ones travel: the slower of the two sets the pace (the
  // logarithmic algorithms below exchange, then reduce, and pay both).
  return m.paced(steps * (link.latency_us + chunks_of(m, block, chunk_bytes) * m.chunk_overhead_us),
                 std::max(steps * link.wire_us(block), m.reduce_alone_us((n - 1) * block)),
                 m.overlapped(steps * link.transfer_us(block), m.reduce_us((n - 1) * block)));
}

double fold_us(const CostModel& m, int n, double bytes, const LinkCost& link, double chunk_bytes) {
  if (n == floor_power_of_two(n)) return 0;
  return m.paced(2 * (link.latency_us + chunks_of(m, bytes, chunk_bytes) * m.chunk_overhead_us),
                 2 * link.wire_us(bytes) + m.reduce_alone_us(bytes),
                 2 * link.transfer_us(bytes) + m.reduce_us(bytes));
}

// One round of recursive doubling over `link`: the buffer each way, then reduced.
double rd_round_us(const CostModel& m, double bytes, const LinkCost& link, double chunk_bytes) {
  return m.paced(link.latency_us + chunks_of(m, bytes, chunk_bytes) * m.chunk_overhead_us,
                 link.wire_us(bytes) + m.reduce_alone_us(bytes),
                 link.transfer_us(bytes) + m.reduce_us(bytes));
}

// The crowds of recursive doubling's and halving's fold (2 (n - p) ranks work) and rounds (p
// ranks): in a driven call the ranks that wait yield their turns, and those that work have the
// cores; in a carried call the waiting ranks are no help (measured on 6 ranks of 2 cores: 16 MiB
// took what every rank working predicts, 0.5-0.8 of it with 4 of 6 working; 128-512 KiB took
// 0.93-1.05 of what 4 of 6 working predicts, 1.4-1.6 of it with all 6).
struct RecursiveCrowds {
  PhaseCrowd fold;
  PhaseCrowd rounds;
};
RecursiveCrowds recursive_crowds(const CostModel& m, int n, double bytes) {
  if (!m.driven(bytes)) return {{m, 1}, {m, 1}};
  const int p2 = floor_power_of_two(n);
  return {phase_crowd(m, 2.0 * (n - p2), n), phase_crowd(m, p2, n)};
}

// Each round over its own links: a round inside hosts costs the host tier, one across islands
// the slow tier.
double rd_allreduce_us(const CostModel& m, int n, double bytes,
                       const Hierarchy::RecursiveLinks& links, double chunk_bytes) {
  if (n <= 1) return 0;
  const auto [fold, rounds] = recursive_crowds(m, n, bytes);
  double t = fold_us(fold.model, n, bytes, relieved(links.fold, fold.relief), chunk_bytes);
  for (const LinkCost& link : links.rounds) {
    t += rd_round_us(rounds.model, bytes, relieved(link, rounds.relief), chunk_bytes);
  }
  return t;
}

// The same link in every round (the lanes of a hierarchical allreduce): asked on every such
// call, so without building the rounds' list.
double rd_allreduce_us(const CostModel& m, int n, double bytes, const LinkCost& link,
                       double chunk_bytes) {
  if (n <= 1) return 0;
  return ceil_log2(floor_power_of_two(n)) * rd_round_us(m, bytes, link, chunk_bytes) +
         fold_us(m, n, bytes, link, chunk_bytes);
}

// Halving: the round of mask k (p/2 down to 1) sends k/p of the buffer; doubling sends it back.
double rhd_allreduce_us(const CostModel& m, int n, double bytes,
                        const Hierarchy::RecursiveLinks& links, double chunk_bytes) {
  if (n <= 1) return 0;
  const int p2 = floor_power_of_two(n);
  const auto [fold, rounds] = recursive_crowds(m, n, bytes);
  const CostModel& r = rounds.model;
  double t = fold_us(fold.model, n, bytes, relieved(links.fold, fold.relief), chunk_bytes);
  // Each halving round reduces what it received: (p2 - 1) / p2 of the buffer in all.
  for (std::size_t i = 0; i < links.rounds.size(); ++i) {
    const LinkCost link = relieved(links.rounds[i], rounds.relief);
    const double part = bytes * static_cast<double>(1 << i) / p2;
    t += r.paced(2 * (link.latency_us + chunks_of(r, part, chunk_bytes) * r.chunk_overhead_us),
                 2 * link.wire_us(part) + r.reduce_alone_us(part),
                 2 * link.transfer_us(part) + r.reduce_us(part));
  }
  return t;
}

double chain_us(const CostModel& m, int n, double bytes, const LinkCost& link, double chunk_bytes,
                bool reduces) {
  if (n <= 1) return 0;
  const double chunks = chunks_of(m, bytes, chunk_bytes);
  const double chunk = bytes / chunks;
  const double reduced = reduces ? chunk : 0.0;
  return (n - 1 + chunks - 1) * m.paced(link.latency_us + m.chunk_overhead_us,
                                        link.wire_us(chunk) + m.reduce_alone_us(reduced),
                                        link.transfer_us(chunk) + m.reduce_us(reduced));
}

double tree_us(const CostModel& m, int n, double bytes, const LinkCost& link, double chunk_bytes,
               bool reduces) {
  if (n <= 1) return 0;
  const double reduced = reduces ? bytes : 0.0;
  return ceil_log2(n) *
         m.paced(link.latency_us + chunks_of(m, bytes, chunk_bytes) * m.chunk_overhead_us,
                 link.wire_us(bytes) + m.reduce_alone_us(reduced),
                 link.transfer_us(bytes) + m.reduce_us(reduced));
}

double rooted_us(const CostModel& m, int n, double bytes, const LinkCost& link, double chunk_bytes,
                 bool reduces) {
  return std::min(chain_us(m, n, bytes, link, chunk_bytes, reduces),
                  tree_us(m, n, bytes, link, chunk_bytes, reduces));
}

// Whether the communicator has a shared board and `bytes` fit one of its slots.
bool fits_board(const Hierarchy& h, double bytes) {
  return h.board_bytes > 0 && bytes <= static_cast<double>(h.board_bytes);
}

// A hierarchical collective cut in segments of relative sizes `weights`, whose islands take
// `islands_us` and whose lanes take `lanes_us`, `lanes_cpu_us` of it the cores' (the rest waits
// for a wire slower than them). Segments overlap the tiers: the slower one sets the pace, and
// the cores' work of both adds up where ranks share them (CostModel::overlapped); of the
// shorter tier's work, the first segment's way in and the last's way out show besides (each
// half of the tier's work: in and out). One segment: one tier after the other.
double overlapped_tiers(const CostModel& m, const std::vector<double>& weights, double islands_us,
                        double lanes_us, double lanes_cpu_us) {
  const double edge =
      (weights.front() + weights.back()) / 2 / std::accumulate(weights.begin(), weights.end(), 0.0);
  const double cores = m.overlapped(std::max(islands_us, lanes_cpu_us),
                                    std::min(islands_us, lanes_cpu_us) * (1 - edge));
  return std::max(cores, lanes_us) + std::min(islands_us, lanes_us) * edge;
}

// The hierarchical allgather, or with `reduces` the reduce-scatter (the same steps reversed,
// reducing on the way; hierarchical/reduce_scatter.cpp), of `bytes` in all over the ranks of `h`.
double hierarchical_blocks_us(const Hierarchy& h, const CostModel& m, double bytes, bool reduces) {
  const Hierarchy::Summary& s = h.summary;
  if (s.islands > kMaxBlockIslands) return kInfinity;
  const int lanes = s.smallest_island;
  const double islands = s.islands;
  const double block = bytes / h.size();
  const double part = bytes / islands / lanes;  // an island's share of a lane, islands alike
  const double reduced = reduces ? 1.0 : 0.0;   // of each piece
  // `steps` ring steps of `piece` bytes over `link`; reductions overlap the transfers.
  const auto ring = [&](double steps, double piece, const LinkCost& link) {
    if (steps <= 0) return 0.0;
    return steps *
           m.paced(link.latency_us + chunks_of(m, piece, m.chunk_bytes) * m.chunk_overhead_us,
                   std::max(link.wire_us(piece), m.reduce_alone_us(piece * reduced)),
                   m.overlapped(link.transfer_us(piece), m.reduce_us(piece * reduced)));
  };
  // One island phase over `piece`-sized blocks: Holmes's ring over the island's ranks; or the
  // two-level engine (two_level_engine.hpp), H - 1 steps between the counterparts, a host's P
  // ranks sending over its link to the island at once, and inside each host a ring of P - 1
  // steps for each host's blocks, one after the other.
  const bool two_level = m.two_level_islands && s.two_level_per_host >= 2;
  const auto island_phase = [&](double piece) {
    if (!two_level) return ring(s.largest_island - 1.0, piece, s.island_ring);
    const double per_host = s.two_level_per_host;
    const double hosts = s.largest_island / s.two_level_per_host;  // the largest island's
    return ring(hosts - 1, piece, wire_share(h.same_island, 1.0 / per_host)) +
           hosts * ring(per_host - 1, piece, h.same_host);
  };
  // Inside the islands: the allgather passes its own blocks around, then the other islands'
  // parts; the reduce-scatter reduces every island's parts, and its lanes hand the rest of their
  // group their blocks.
  double islands_us = reduces ? islands * island_phase(part)
                              : island_phase(block) + (islands - 1) * island_phase(part);
  if (reduces && s.largest_island > lanes) {
    islands_us += std::ceil(static_cast<double>(s.largest_island) / lanes - 1) *
                  (s.intra.latency_us + s.intra.transfer_us(block));
  }
  if (s.islands < 2) return islands_us;
  // The lanes of a host share its uplink. Segments of equal size (island_blocks.hpp; as many as
  // the allreduce's where the tag has room for their phases, which two islands always have).
  const LinkCost lane = wire_share(h.other_island, 1.0 / s.min_per_host);
  const int segments = hierarchical_segments(h, m, bytes);
  return overlapped_tiers(m, std::vector<double>(static_cast<std::size_t>(segments), 1.0),
                          islands_us, ring(islands - 1, part, lane),
                          ring(islands - 1, part, cores_only(lane)));
}

// The hierarchical alltoall (hierarchical/alltoall.cpp) of `bytes` per rank (a block per rank).
double hierarchical_alltoall_us(const Hierarchy& h, const CostModel& m, double bytes) {
  const Hierarchy::Summary& s = h.summary;
  const int lanes = s.smallest_island;
  const double block = bytes / h.size();
  const double largest = s.largest_island;
  // Blocks a rank of the smallest island (lanes ranks) has for other islands.
  const double elsewhere = h.size() - static_cast<double>(lanes);
  const LinkCost& intra = s.intra;
  // Inside: the own island's blocks to their ranks, the others' to the lanes; at the end the
  // lanes hand them out: each a message per block.
  double t = (largest - 1 + 2 * elsewhere) * (intra.latency_us + m.chunk_overhead_us) +
             intra.transfer_us((largest - 1 + 2 * elsewhere) * block);
  if (s.islands > 1) {
    // Across: a lane sends what its island has for the other islands' groups, one message per
    // island; the lanes of a host share its uplink.
    const LinkCost lane = wire_share(h.other_island, 1.0 / s.min_per_host);
    t += (s.islands - 1) * (lane.latency_us + m.chunk_overhead_us) +
         lane.transfer_us(largest * elsewhere / lanes * block);
  }
  return t;
}

// The flat ring of a reduce-scatter (which reduces on the way) or an allgather.
double ring_blocks_us(const Hierarchy& h, const CostModel& m, double bytes, bool reduces) {
  const int n = h.size();
  const double block = bytes / n;
  const double reduced = reduces ? block : 0.0;
  const LinkCost ring = flat_ring_link(h, m, block);  // each rank holds a block
  return (n - 1) *
         m.paced(ring.latency_us + chunks_of(m, block, m.chunk_bytes) * m.chunk_overhead_us,
                 ring.wire_us(block) + m.reduce_alone_us(reduced),
                 ring.transfer_us(block) + m.reduce_us(reduced));
}

// Across the islands' leaders, then inside each island.
double hierarchical_rooted_us(const Hierarchy& h, const CostModel& m, double bytes, bool reduces) {
  const Hierarchy::Summary& s = h.summary;
  return rooted_us(m, s.islands, bytes, h.other_island, m.chunk_bytes, reduces) +
         rooted_us(m, s.largest_island, bytes, s.intra, m.chunk_bytes, reduces);
}

}  // namespace

const char* tier_name(Tier tier) {
  switch (tier) {
    case Tier::kSameHost:
      return "same host";
    case Tier::kSameIsland:
      return "same island";
    case Tier::kOtherIsland:
      return "other island";
  }
  return "tier";
}

bool TierCosts::empty() const {
  return !reduce_gbytes_per_s &&
         std::none_of(tiers.begin(), tiers.end(), [](const auto& t) { return t.has_value(); });
}

std::string TierCosts::describe() const {
  std::string out;
  for (int t = 0; t < kTiers; ++t) {
    const auto& link = tiers[static_cast<std::size_t>(t)];
    if (!link) continue;
    out += fmt::format("{}{} {:.1f} us {:.3f} GB/s", out.empty() ? "" : "; ",
                       tier_name(static_cast<Tier>(t)), link->latency_us, link->gbytes_per_s);
  }
  if (reduce_gbytes_per_s) {
    out += fmt::format("{}reduce {:.2f} GB/s", out.empty() ? "" : "; ", *reduce_gbytes_per_s);
  }
  return out.empty() ? "nothing measured" : out;
}

CostModel CostModel::from_settings(const Settings& settings) {
  CostModel model;
  const std::tuple<Setting, LinkCost*, unsigned> tiers[] = {
      {Setting::kCostShm, &model.shm, kSetShm},
      {Setting::kCostHostTcp, &model.host_tcp, kSetHostTcp},
      {Setting::kCostIslandRdma, &model.island_rdma, kSetIslandRdma},
      {Setting::kCostIslandTcp, &model.island_tcp, kSetIslandTcp},
      {Setting::kCostInterIsland, &model.inter_island, kSetInterIsland},
  };
  for (const auto& [setting, link, bit] : tiers) {
    if (auto given = settings.link_if_given(setting)) {
      *link = {given->latency_us, given->gbytes_per_s};
      model.set_by_setting |= bit;
    }
  }
  if (auto rate = settings.rate_if_given(Setting::kCostReduceGbps)) {
    model.reduce_gbytes_per_s = *rate;
    model.set_by_setting |= kSetReduce;
  }
  model.probe = settings.flag(Setting::kCostProbe);
  return model;
}

Hierarchy make_hierarchy(const std::vector<std::string>& hosts,
                         const std::vector<std::string>& islands, const LinkCost& same_host,
                         const LinkCost& same_island, const LinkCost& other_island) {
  Hierarchy h;
  h.same_host = same_host;
  h.same_island = same_island;
  h.other_island = other_island;
  const std::size_t n = hosts.size();
  std::map<std::string, int> host_index;
  std::map<std::string, int> island_index;
  for (std::size_t r = 0; r < n; ++r) {
    h.host.push_back(
        host_index.emplace(hosts[r], static_cast<int>(host_index.size())).first->second);
    h.island.push_back(
        island_index.emplace(islands[r], static_cast<int>(island_index.size())).first->second);
  }
  h.islands.resize(island_index.size());
  // Within an island, hosts in order of their first rank, and ranks in order within a host.
  for (std::size_t i = 0; i < h.islands.size(); ++i) {
    std::vector<int> hosts_seen;
    for (std::size_t r = 0; r < n; ++r) {
      if (h.island[r] == static_cast<int>(i) &&
          std::find(hosts_seen.begin(), hosts_seen.end(), h.host[r]) == hosts_seen.end()) {
        hosts_seen.push_back(h.host[r]);
      }
    }
    for (int host : hosts_seen) {
      for (std::size_t r = 0; r < n; ++r) {
        if (h.island[r] == static_cast<int>(i) && h.host[r] == host) {
          h.islands[i].push_back(static_cast<int>(r));
        }
      }
    }
    h.ring_order.insert(h.ring_order.end(), h.islands[i].begin(), h.islands[i].end());
  }
  h.summary = summarize(h);
  return h;
}

namespace predictions {

double ring_allreduce(const Hierarchy& h, const CostModel& m, double bytes) {
  return ring_allreduce_us(m, h.size(), bytes, flat_ring_link(h, m, bytes), m.chunk_bytes);
}

double rd_allreduce(const Hierarchy& h, const CostModel& m, double bytes) {
  return rd_allreduce_us(m, h.size(), bytes, h.summary.recursive, m.chunk_bytes);
}

double rhd_allreduce(const Hierarchy& h, const CostModel& m, double bytes) {
  return rhd_allreduce_us(m, h.size(), bytes, h.summary.recursive, m.chunk_bytes);
}

double hierarchical_allreduce(const Hierarchy& h, const CostModel& m, double bytes) {
  // Host level: M0 shards (M0 = ranks of the smallest host) over shared memory; island level:
  // M1 shards of those (M1 = hosts of the smallest island) over the island's fabric; then lanes
  // of one rank per island across the slow tier, the M0 lanes of a host sharing its uplink.
  // Where ranks share cores, each level's work is crowded by the ranks that take part in it
  // (the others wait, asleep or yielding their turns: measured on 6 ranks of 2 cores, crowding
  // the levels of a driven call by every rank predicted 1.3-1.5x the time at 256 KiB-1 MiB).
  const Hierarchy::Summary& s = h.summary;
  const double chunk = m.chunk_bytes;
  const double n = h.size();
  const double reduce_us_per_byte = 1.0 / (m.effective_reduce_gbytes_per_s() * 1e3);
  // Segments keep every rank busy with one phase or another: no level has the cores to itself.
  const int segments = hierarchical_segments(h, m, bytes);
  const auto crowd_of = [&](double active) {
    return segments > 1 ? m.ranks_per_core : m.ranks_per_core_of(active, n);
  };
  auto level_us = [&](int group, double shards, double data, const LinkCost& link, double active) {
    if (group <= 1) return 0.0;
    const double crowd = crowd_of(active);
    const double relief = crowd / m.ranks_per_core;
    const double shard = data / shards;
    const double steps = group - 1.0;
    return m.paced(2 * steps * (link.latency_us + chunks_of(m, shard, chunk) * m.chunk_overhead_us),
                   std::max(2 * steps * link.wire_us(shard), m.reduce_alone_us(steps * shard)),
                   m.overlapped_at(2 * steps * relieved(link, relief).transfer_us(shard),
                                   steps * shard * reduce_us_per_byte * relief, crowd));
  };
  // Host level: every rank of a host with two or more; island level: M0 ranks of every host in
  // an island of two hosts or more, the M0 groups at once, each rank of a host sending over its
  // link to the island (as the lanes share the uplink across islands below).
  const LinkCost island = wire_share(h.same_island, 1.0 / s.min_per_host);
  const double intra =
      level_us(s.max_per_host, s.min_per_host, bytes, h.same_host, n) +
      level_us(s.max_hosts_per_island, s.min_hosts_per_island, bytes / s.min_per_host, island,
               static_cast<double>(s.min_per_host) * s.hosts_in_shared_islands);
  if (s.islands < 2) return intra;
  const double shard = bytes / (s.min_per_host * s.min_hosts_per_island);
  const double lanes = static_cast<double>(s.min_per_host) * s.min_hosts_per_island * s.islands;
  // The lanes' model: their own crowd (the hierarchy's bandwidths are the crowded ones).
  CostModel lanes_model = m;
  lanes_model.ranks_per_core = crowd_of(lanes);
  const double relief = lanes_model.ranks_per_core / m.ranks_per_core;
  const LinkCost lane = relieved(wire_share(h.other_island, 1.0 / s.min_per_host), relief);
  const auto lanes_us = [&](const LinkCost& link) {
    return std::min(ring_allreduce_us(lanes_model, s.islands, shard, link, chunk),
                    rd_allreduce_us(lanes_model, s.islands, shard, link, chunk));
  };
  return overlapped_tiers(m, hierarchical_segment_weights(segments), intra, lanes_us(lane),
                          lanes_us(cores_only(lane)));
}

double shared_memory_allreduce(const Hierarchy& h, const CostModel& m, double bytes) {
  // One publication, then each rank reads and reduces every peer's buffer: the latency of the
  // host tier once (waiting for the last rank), no chunks.
  const double peers = h.size() - 1;
  return m.paced(h.same_host.latency_us,
                 peers * (h.same_host.wire_us(bytes) + m.reduce_alone_us(bytes)),
                 peers * (h.same_host.transfer_us(bytes) + m.reduce_us(bytes)));
}

double ring_reduce_scatter(const Hierarchy& h, const CostModel& m, double bytes) {
  return ring_blocks_us(h, m, bytes, true);
}

double hierarchical_reduce_scatter(const Hierarchy& h, const CostModel& m, double bytes) {
  return hierarchical_blocks_us(h, m, bytes, true);
}

double ring_allgather(const Hierarchy& h, const CostModel& m, double bytes) {
  return ring_blocks_us(h, m, bytes, false);
}

double hierarchical_allgather(const Hierarchy& h, const CostModel& m, double bytes) {
  return hierarchical_blocks_us(h, m, bytes, false);
}

double chain_broadcast(const Hierarchy& h, const CostModel& m, double bytes) {
  return chain_us(m, h.size(), bytes, flat_ring_link(h, m, bytes), m.chunk_bytes, false);
}

double tree_broadcast(const Hierarchy& h, const CostModel& m, double bytes) {
  return tree_us(m, h.size(), bytes, h.summary.any, m.chunk_bytes, false);
}

double hierarchical_broadcast(const Hierarchy& h, const CostModel& m, double bytes) {
  return hierarchical_rooted_us(h, m, bytes, false);
}

double shared_memory_broadcast(const Hierarchy& h, const CostModel&, double bytes) {
  // Every rank reads the root's slot at once.
  return h.same_host.latency_us + h.same_host.transfer_us(bytes);
}

double chain_reduce(const Hierarchy& h, const CostModel& m, double bytes) {
  return chain_us(m, h.size(), bytes, flat_ring_link(h, m, bytes), m.chunk_bytes, true);
}

double tree_reduce(const Hierarchy& h, const CostModel& m, double bytes) {
  return tree_us(m, h.size(), bytes, h.summary.any, m.chunk_bytes, true);
}

double hierarchical_reduce(const Hierarchy& h, const CostModel& m, double bytes) {
  return hierarchical_rooted_us(h, m, bytes, true);
}

double shared_memory_reduce(const Hierarchy& h, const CostModel& m, double bytes) {
  // The root reads and reduces every other rank's slot.
  return shared_memory_allreduce(h, m, bytes);
}

double pairwise_alltoall(const Hierarchy& h, const CostModel& m, double bytes) {
  const int n = h.size();
  return (n - 1) * (h.summary.any.latency_us + m.chunk_overhead_us) +
         h.summary.any.transfer_us((n - 1.0) / n * bytes);
}

double hierarchical_alltoall(const Hierarchy& h, const CostModel& m, double bytes) {
  return hierarchical_alltoall_us(h, m, bytes);
}

double dissemination_barrier(const Hierarchy& h, const CostModel& m, double) {
  return ceil_log2(h.size()) * (h.summary.any.latency_us + m.chunk_overhead_us);
}

double hierarchical_barrier(const Hierarchy& h, const CostModel& m, double) {
  // Arrive and release inside the islands, the leaders across in between.
  const Hierarchy::Summary& s = h.summary;
  return 2 * ceil_log2(s.largest_island) * (s.intra.latency_us + m.chunk_overhead_us) +
         ceil_log2(s.islands) * (h.other_island.latency_us + m.chunk_overhead_us);
}

double shared_memory_barrier(const Hierarchy& h, const CostModel&, double) {
  return h.same_host.latency_us;
}

double never(const Hierarchy&, const CostModel&, double) { return kInfinity; }

}  // namespace predictions

double predict(const Hierarchy& h, const CostModel& m, CollectiveKind kind, Algorithm algorithm,
               double bytes) {
  const AlgorithmEntry* entry = find_algorithm(kind, algorithm);
  if (entry == nullptr) return kInfinity;
  // Only with a board the buffer fits (not even alone: a communicator of one rank has none).
  if (algorithm == Algorithm::kSharedMemory && !fits_board(h, bytes)) return kInfinity;
  if (h.size() <= 1) return 0;
  return entry->predict(h, m, bytes);
}

int hierarchical_segments(const Hierarchy& h, const CostModel& model, double bytes) {
  (void)model;
  // Below a few MiB a segment's latency costs more than the overlap saves. Above, segments of
  // about kSegmentBytes: the segments take the phases in turn (a pipeline), so the islands' work
  // before the first segment reaches the slow tier, and after the last leaves it, is one
  // segment's; measured on the two-islands emulation (BENCHMARKS.md), 8 segments of 8 MiB beat
  // 4 of 16 MiB, and 12 gained nothing more.
  constexpr double kMinBytes = 4 << 20;
  constexpr double kSegmentBytes = 8 << 20;
  constexpr int kMinSegments = 4;
  if (h.islands.size() < 2 || bytes < kMinBytes) return 1;
  const double wanted = std::floor(bytes / kSegmentBytes);
  return static_cast<int>(
      std::clamp(wanted, double{kMinSegments}, double{kMaxHierarchicalSegments}));
}

std::vector<double> hierarchical_segment_weights(int segments) {
  std::vector<double> weights(static_cast<std::size_t>(std::max(1, segments)), 1.0);
  // Measured on three-fabrics (3 islands x 2 hosts, 64 MiB in 8 segments of 8 MiB): the lanes
  // ran at the slow tier's bound but the call took 60-70 ms longer, the first segment's
  // reduction inside its island before them and the last's allgather after. The ramp cuts
  // those to a quarter; the segments after the first are reduced while it crosses.
  if (segments >= 6) {
    weights.front() = weights.back() = 0.25;
    weights[1] = weights[weights.size() - 2] = 0.5;
  } else if (segments >= 4) {
    weights.front() = weights.back() = 0.5;
  }
  return weights;
}

int hierarchical_lane_window(const Hierarchy& h, double lane_bytes, int segments) {
  const int islands = h.summary.islands;
  if (islands < 2 || lane_bytes <= 0) return 1;
  const int turnaround = segments >= 2 ? 2 : 1;
  // A ring of I lanes takes 2(I-1) steps (allreduce; the block collectives half as many); each
  // step's chunks leave only after the step before has landed, so a lone segment leaves its
  // link idle for up to a latency per step, and once more while its last chunk travels.
  const double busy_us = h.other_island.transfer_us(lane_bytes);
  const double idle_us = 2.0 * (islands - 1) * h.other_island.latency_us;
  // Below this share of a segment's time the idle spells cost less than a further segment's
  // contention for the islands' cores.
  constexpr double kNegligible = 0.02;
  if (busy_us <= 0 || idle_us <= kNegligible * busy_us) return turnaround;
  return std::max(turnaround, static_cast<int>(std::clamp(1.0 + std::ceil(idle_us / busy_us), 1.0,
                                                          double{kMaxLaneWindow})));
}

Algorithm choose_lane_allreduce(const CostModel& model, int ranks, double bytes,
                                const LinkCost& link) {
  return rd_allreduce_us(model, ranks, bytes, link, model.chunk_bytes) <
                 ring_allreduce_us(model, ranks, bytes, link, model.chunk_bytes)
             ? Algorithm::kRecursiveDoubling
             : Algorithm::kRing;
}

Algorithm choose_rooted(const CostModel& model, int ranks, double bytes, const LinkCost& link,
                        bool reduces) {
  return tree_us(model, ranks, bytes, link, model.chunk_bytes, reduces) <
                 chain_us(model, ranks, bytes, link, model.chunk_bytes, reduces)
             ? Algorithm::kTree
             : Algorithm::kChain;
}

Prediction choose(const Hierarchy& h, const CostModel& model, CollectiveKind kind, double bytes,
                  Algorithm forced) {
  if (forced != Algorithm::kAuto && algorithm_applies(kind, forced)) {
    const double t = predict(h, model, kind, forced, bytes);
    if (t < kInfinity) return {forced, t};
  }
  Prediction best{algorithms_for(kind).front(), kInfinity};
  for (auto algorithm : algorithms_for(kind)) {
    // Hierarchical equals the flat algorithms with one island that is one host or one rank per
    // host; keep those then. (An island of hosts with several ranks each is not flat: the
    // hierarchy reduces inside each host before the island's fabric carries anything.)
    const bool flat = h.islands.size() < 2 &&
                      (h.summary.max_per_host == 1 || h.summary.max_hosts_per_island == 1);
    if (algorithm == Algorithm::kHierarchical && flat) continue;
    const double t = predict(h, model, kind, algorithm, bytes);
    if (t < best.microseconds) best = {algorithm, t};
  }
  return best;
}

}  // namespace holmes
