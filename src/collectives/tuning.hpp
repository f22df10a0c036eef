// The cost model: how long each algorithm takes for a message size on this communicator's
// links, and the choice of the fastest. All of it is here, in one place (as NCCL keeps its
// model in tuning.cc), so that the numbers can be read, questioned and calibrated together.
//
// Links fall in tiers by where the two ranks sit (same host, same island, other island) and by
// the transport between them; each tier has an alpha (latency per message, microseconds) and a
// beta (bandwidth, GB/s). An algorithm's time is the sum over its steps of alpha plus the bytes
// of the step over the bandwidth of the slowest link the step uses, plus the bytes it reduces
// over the reduction speed. Links that share one host's uplink share its bandwidth.
//
// Every rank computes the same choice from the same inputs (the ranks' localities, exchanged
// at creation, and the tier numbers); the chosen algorithm is part of each message's signature,
// so ranks configured differently fail with HM_ERR_MISMATCH instead of corrupting data.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "collectives/algorithm.hpp"
#include "collectives/context.hpp"
#include "core/settings.hpp"
#include "topology/nominal_links.hpp"

namespace holmes {

// Calls up to this size drive their transport from the caller's thread (begin_caller_drive):
// they are over in microseconds to a few milliseconds and wait polling, and each of their steps
// would otherwise cost two thread wake-ups (the transport's, then the caller's). 4-rank allreduce
// here (BENCHMARKS.md), driving against not: tcp 256 KiB 0.71 against 0.36 GB/s busbw, 1 MiB
// 1.16 against 0.74; shm 256 KiB 2.3 against 1.9, 1 MiB 6.4 against 4.9; from 2 MiB on it made
// no difference or cost a little, so larger calls leave the transport's thread to move data
// while the caller reduces. (The dispatch decides; the cost model knows that ranks waiting in
// such a call keep taking turns on the cores.)
inline constexpr std::size_t kCallerDriveMaxBytes = std::size_t{1} << 20;
// Device buffers stage through host memory, and a caller waiting for a staging copy sleeps on a
// condition variable: while it drives, that holds the tcp io thread parked for up to its lease
// (1 ms) per wait, so only small device calls drive.
inline constexpr std::size_t kDeviceCallerDriveMaxBytes = std::size_t{64} << 10;

struct LinkCost {
  double latency_us = 0;
  double gbytes_per_s = 1;  // the wire's (a tier's number; a share of it where ranks share one)
  // What the cores give one rank for moving the link's bytes where ranks share them
  // (CostModel::crowded); infinity: the wire alone sets the pace.
  double cpu_gbytes_per_s = std::numeric_limits<double>::infinity();
  // The pace the link's bytes move at: the slower of the wire and the cores.
  double rate() const { return std::min(gbytes_per_s, cpu_gbytes_per_s); }
  // Microseconds to move `bytes` over the link once its latency is paid.
  double transfer_us(double bytes) const { return bytes / (rate() * 1e3); }
  // The same where the rank has a core to itself: the wire alone sets the pace.
  double wire_us(double bytes) const { return bytes / (gbytes_per_s * 1e3); }
};

// The tiers of links, by where the two ranks sit.
enum class Tier : int { kSameHost = 0, kSameIsland = 1, kOtherIsland = 2 };
inline constexpr int kTiers = 3;
const char* tier_name(Tier tier);

// Numbers for some tiers from a source other than the defaults: the topology file
// (communicator/topology_costs.hpp) or the init probe (link_probe.hpp). A tier without numbers
// keeps what it had.
struct TierCosts {
  std::array<std::optional<LinkCost>, kTiers> tiers;
  std::optional<double> reduce_gbytes_per_s;
  const std::optional<LinkCost>& operator[](Tier tier) const {
    return tiers[static_cast<std::size_t>(tier)];
  }
  bool empty() const;
  // "same host 4.1 us 6.200 GB/s; ...; reduce 3.90 GB/s"
  std::string describe() const;
};

// Tier numbers. Defaults are nominal figures for the hardware each tier stands for; every one
// can be set with HOLMES_COST_<TIER>="latency_us,GB/s" (e.g. HOLMES_COST_INTER_ISLAND=100,0.125)
// and HOLMES_COST_REDUCE_GBPS, in the environment or the config. A topology file (HOLMES_TOPOLOGY)
// gives the island and inter-island tiers its link classes' numbers; with HOLMES_COST_PROBE=1 the
// communicator measures the tiers it has at init (link_probe.hpp). Which wins, per tier: a
// HOLMES_COST_<TIER> variable, then the probe, then the topology file, then the defaults.
struct CostModel {
  static constexpr LinkCost tier(const nominal::TierFigures& figures) {
    return {figures.latency_us, figures.gbytes_per_s};
  }
  // Bits of set_by_setting: which numbers a HOLMES_COST_* setting gave (environment or config).
  static constexpr unsigned kSetShm = 1;
  static constexpr unsigned kSetHostTcp = 2;
  static constexpr unsigned kSetIslandRdma = 4;
  static constexpr unsigned kSetIslandTcp = 8;
  static constexpr unsigned kSetInterIsland = 16;
  static constexpr unsigned kSetReduce = 32;

  // The nominal tiers (topology/nominal_links.hpp says where each number comes from).
  LinkCost shm = tier(nominal::kShmTier);                   // same host, shared memory
  LinkCost host_tcp = tier(nominal::kHostTcpTier);          // same host over loopback tcp
  LinkCost island_rdma = tier(nominal::kIslandRdmaTier);    // hosts of one RDMA island
  LinkCost island_tcp = tier(nominal::kIslandTcpTier);      // hosts of one island over tcp
  LinkCost inter_island = tier(nominal::kInterIslandTier);  // between islands
  double reduce_gbytes_per_s = nominal::kReduceGbytesPerS;  // CPU reduction, bytes of result
  double chunk_overhead_us = 10;   // per chunk handed through a pipeline stage
  double chunk_bytes = 512 << 10;  // the communicator's pipeline chunk
  unsigned set_by_setting = 0;
  bool probe = false;  // HOLMES_COST_PROBE=1: measure the tiers at init
  // Ranks per core on the most crowded machine (ranks_per_core(), topology/locality.hpp): above
  // 1, every byte a rank moves or reduces waits for a core, so the reduction's bandwidth divides
  // by it (here) and so does what the cores give each link (crowded(), applied to the tiers in
  // CommunicatorImpl::make_hierarchy). Latencies stay: they are the wire's and the wake-ups'.
  double ranks_per_core = 1;
  // Whether the islands' phases of the hierarchical allgather and reduce-scatter run on the
  // two-level group engine where the islands have its shape (Hierarchy::Summary::
  // two_level_per_host): so they do for host buffers unless HOLMES_GROUP_ENGINE names ring or
  // blockwise (communicator/group_engines.hpp). Else the model prices Holmes's ring there.
  bool two_level_islands = true;
  double effective_reduce_gbytes_per_s() const { return reduce_gbytes_per_s / ranks_per_core; }
  // Microseconds to reduce `bytes`, on the crowded cores and on a core of the rank's own.
  double reduce_us(double bytes) const { return bytes / (effective_reduce_gbytes_per_s() * 1e3); }
  double reduce_alone_us(double bytes) const { return bytes / (reduce_gbytes_per_s * 1e3); }
  // A step's time where ranks share cores (a roofline): its latency, then its bytes at the pace
  // of a core of its own (`alone_us`); or, where longer, the crowded cores' time for the bytes
  // (`crowded_us`). While a rank waits out a step's latency (its peer's wake-up, the wire) the
  // others use the cores: a rank is slowed by the crowd only where the cores' work is more than
  // the waiting hides. Measured on 6 ranks of 2 cores (BENCHMARKS.md, "Ranks that share cores"):
  // recursive doubling at 16-32 KiB took 86-119 us, the crowded bytes after the latencies 1.5-1.7x
  // that.
  double paced(double latency_us, double alone_us, double crowded_us) const {
    return std::max(latency_us + alone_us, crowded_us);
  }
  // `link` as a rank sees it where ranks share cores. The cores move a link's bytes (copies
  // through shared memory or the kernel's tcp) at the link's own rate or at the host tcp tier's,
  // the faster: what one rank on a core of its own moves through the kernel. That, shared by the
  // ranks of a core, caps the link. A wire slower than the cap (a NIC shaped to 1 Gbit/s beside
  // 8 ranks on 2 cores) keeps its rate: measured on the two-islands emulation, dividing such a
  // wire by the crowd predicted 2-4.4x the time (BENCHMARKS.md, "Two emulated islands").
  LinkCost crowded(LinkCost link) const {
    if (ranks_per_core > 1) {
      link.cpu_gbytes_per_s = std::max(link.gbytes_per_s, host_tcp.gbytes_per_s) / ranks_per_core;
    }
    return link;
  }
  // Two pieces of work a rank's algorithm overlaps (transfers with reductions, one tier with
  // another): the longer sets the pace while each has cores to itself; where ranks share cores
  // (2 or more per core), both want the same cores and the times add up.
  double overlapped(double a, double b) const { return overlapped_at(a, b, ranks_per_core); }
  double overlapped_at(double a, double b, double crowd) const {
    const double hidden = std::clamp(2.0 - crowd, 0.0, 1.0);  // of the shorter one
    return std::max(a, b) + std::min(a, b) * (1 - hidden);
  }
  // Ranks per core in a phase where only `active` of the communicator's `ranks` work (the
  // island level and the lanes of a hierarchical allreduce in one segment; the rounds of recursive
  // doubling in a driven call): the others wait, asleep or yielding their turns, and fewer ranks
  // want the cores, down to one per core. The bandwidths the model holds are divided by
  // ranks_per_core, so such a phase's transfer and reduction times take the factor
  // crowd / ranks_per_core.
  double ranks_per_core_of(double active, double ranks) const {
    if (ranks_per_core <= 1 || !(ranks > 0)) return ranks_per_core;
    return std::max(1.0, ranks_per_core * std::min(1.0, active / ranks));
  }
  // Calls up to this many bytes per rank drive their transports from the caller's thread (the
  // dispatch decides the same way): kCallerDriveMaxBytes, kDeviceCallerDriveMaxBytes for device
  // buffers.
  double drive_max_bytes = kCallerDriveMaxBytes;
  bool driven(double call_bytes) const { return call_bytes <= drive_max_bytes; }
  // The model for a call on device buffers: the islands' phases run on the engine device buffers
  // get there (NCCL, CUDA IPC or Holmes's ring, staged; group_engines.hpp), never the two-level
  // one, and only small calls drive. The rest is the host's model: the engines' own speeds are
  // not in it.
  CostModel for_device_buffers() const {
    CostModel model = *this;
    model.two_level_islands = false;
    model.drive_max_bytes = kDeviceCallerDriveMaxBytes;
    return model;
  }

  // Defaults overridden by the HOLMES_COST_* settings given; throws HM_ERR_INVALID_ARGUMENT
  // naming a bad one.
  static CostModel from_settings(const Settings& settings);
};

// Where each rank of a communicator sits, as the cost model and the hierarchical algorithms
// need it.
struct Hierarchy {
  std::vector<int> host;    // host index of each rank (0, 1, ... in order of first rank)
  std::vector<int> island;  // island index of each rank
  // Ranks of each island, grouped by host, in rank order within a host.
  std::vector<std::vector<int>> islands;
  // The ring order the flat ring uses: islands one after the other, hosts together, so that
  // the ring crosses each slower tier as few times as possible.
  std::vector<int> ring_order;
  // The tier of links between hosts of one island, and whether hosts share shared memory.
  LinkCost same_host;
  LinkCost same_island;
  LinkCost other_island;
  // The largest buffer the communicator's shared board holds (transports/shared_board.hpp);
  // 0 when it has none (ranks on several hosts, or not every peer on shm).
  std::size_t board_bytes = 0;

  // The links of recursive doubling's and halving/doubling's steps (recursive.cpp): the pairs
  // of the fold (rank 2i hands its data to 2i + 1, for the first n - p ranks, p the largest power
  // of two), then per round (partners that differ by mask 1, 2, 4, ... among the p ranks left)
  // the slowest link a pair of that round uses.
  struct RecursiveLinks {
    LinkCost fold;
    std::vector<LinkCost> rounds;  // [i]: the round of mask 1 << i
  };

  // What the predictions read, derived once by make_hierarchy (not on every call).
  struct Summary {
    int islands = 1;
    int largest_island = 1;
    int smallest_island = 1;  // also the lanes of the hierarchical collectives
    LinkCost ring;            // worst link of the ring order
    // The cores' mean over the ring's links (GB/s): what a ring step of a driven call costs them,
    // every link's copies beside the slowest's (flat_ring_link in tuning.cpp).
    double ring_cores_gbytes_per_s = std::numeric_limits<double>::infinity();
    LinkCost any;    // worst link between any two ranks
    LinkCost intra;  // worst link inside an island
    // The rings inside the islands (each island's ranks in order, hosts together): their worst
    // latency and wire, and the cores' mean over their links. Where ranks share cores a ring
    // step takes the work of all its transfers on them, the cheap same-host copies beside the
    // dearer ones, not the slowest link's time for each.
    LinkCost island_ring;
    RecursiveLinks recursive;
    // Group sizes of the hierarchical allreduce's levels.
    int min_per_host = 1;
    int max_per_host = 1;
    int min_hosts_per_island = 1;
    int max_hosts_per_island = 1;
    int hosts_in_shared_islands = 0;  // hosts of islands that have two or more
    // P where every island of two ranks or more lies host after host with P >= 2 of its ranks
    // on each of two hosts or more, P alike in all (two_level_ranks_per_host): the shape in
    // which host buffers take the two-level group engine inside the islands (the largest island
    // then has largest_island / P hosts); 0 otherwise.
    int two_level_per_host = 0;
  };
  Summary summary;

  int size() const { return static_cast<int>(host.size()); }
  Tier tier(int a, int b) const {
    return host[a] == host[b]       ? Tier::kSameHost
           : island[a] == island[b] ? Tier::kSameIsland
                                    : Tier::kOtherIsland;
  }
  const LinkCost& link(int a, int b) const {
    switch (tier(a, b)) {
      case Tier::kSameHost:
        return same_host;
      case Tier::kSameIsland:
        return same_island;
      case Tier::kOtherIsland:
        break;
    }
    return other_island;
  }
};

// Builds the hierarchy from each rank's host and island names (index = rank) and the tier
// numbers of the transports this communicator uses for each tier.
Hierarchy make_hierarchy(const std::vector<std::string>& hosts,
                         const std::vector<std::string>& islands, const LinkCost& same_host,
                         const LinkCost& same_island, const LinkCost& other_island);

struct Prediction {
  Algorithm algorithm = Algorithm::kAuto;
  double microseconds = 0;
};

// Predicted time of `algorithm` for `kind` moving `bytes` (the whole buffer: for allgather and
// reduce_scatter the concatenation of all ranks' blocks): its row's prediction in the algorithm
// table (registry.hpp; the formulas are in tuning.cpp). Infinity where it does not apply.
double predict(const Hierarchy& h, const CostModel& model, CollectiveKind kind, Algorithm algorithm,
               double bytes);

// The fastest applicable algorithm for `kind`, or `forced` with its prediction where `forced`
// can run at all (the shared-memory allreduce needs a board and a buffer that fits it; forced
// elsewhere, the choice falls back to the fastest).
Prediction choose(const Hierarchy& h, const CostModel& model, CollectiveKind kind, double bytes,
                  Algorithm forced = Algorithm::kAuto);

// How many segments a hierarchical allreduce of `bytes` cuts its buffer into so that the
// phases of different segments overlap (1: no overlap; small messages, one island). At most
// kMaxHierarchicalSegments: each segment's phases take their own numbers in the collective tag.
constexpr int kMaxHierarchicalSegments = 12;
// The hierarchical allgather and reduce-scatter take one phase per island
// (hierarchical/island_blocks.hpp): with more islands than this they do not apply.
constexpr int kMaxBlockIslands = 48;
int hierarchical_segments(const Hierarchy& h, const CostModel& model, double bytes);
// The relative sizes of a hierarchical allreduce's `segments` segments: the pipeline's first
// segment is reduced inside the islands before anything crosses the slow tier, and its last is
// spread inside them after; those two are all of the islands' work the pipeline cannot hide, so
// they are smaller than the segments between (a ramp: 1/4, 1/2, 1, ..., 1, 1/2, 1/4).
std::vector<double> hierarchical_segment_weights(int segments);

// How many segments of a hierarchical collective of `segments` segments may be in the lanes'
// phase at once (segments.hpp, PhaseTurns). At least 2 once there are two segments and two
// islands: each segment's lanes end with a ring step's turnaround (wake, reduce or store the last
// chunk, send it, for the next segment's first step to start), and a lone segment leaves the link
// idle meanwhile. More where the slow tier's latency would leave its links idle for a noticeable
// part of a segment's time there: enough segments to cover the latencies of the lanes' ring steps
// (bandwidth x RTT in flight), at most kMaxLaneWindow. `lane_bytes`: what one segment sends out
// of one lane's link in that phase.
constexpr int kMaxLaneWindow = 4;
int hierarchical_lane_window(const Hierarchy& h, double lane_bytes, int segments);

// Inner choices of the hierarchical algorithms, for `ranks` ranks joined by `link`.
Algorithm choose_lane_allreduce(const CostModel& model, int ranks, double bytes,
                                const LinkCost& link);
Algorithm choose_rooted(const CostModel& model, int ranks, double bytes, const LinkCost& link,
                        bool reduces);

}  // namespace holmes
