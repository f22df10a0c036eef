// Which links of a communicator are shaped, and to what: the topology's link classes, scaled
// down, held by the router's LinkShaper (transports/shaping) so that ranks on one machine run
// like the cluster a topology file describes (docs/topology.md, "Emulation: the shaping layer").
//
// Rules, for the link from this rank to each peer:
//  - only links to peers on another host (by locality) are shaped: traffic inside a host is
//    left as it is;
//  - rate = the bandwidth of this host's NICs of the link class between the two hosts
//    (Topology::link_between, Topology::host_bandwidth) / emulation_scale / the ranks of this
//    host, for all of this rank's links of that class together (one token bucket per link
//    class: sending to several peers at once splits the rate, as it would split a NIC);
//  - simplifications: the host's NICs are shared evenly by its ranks: each rank (a separate
//    process, with its own shaper per communicator) holds its traffic to its share, and idle
//    ranks lend nothing to busy ones, so a rank sending alone gets its share, not the whole NIC;
//    two communicators of one rank shape independently (their sum may exceed the share); only
//    sends are held, so a rank receiving from many senders at once may receive faster than its
//    NIC could;
//  - latency = the link class's latency (not scaled);
//  - the topology comes from the ranks' localities and the topology file, as the planner sees
//    the job (planner::job_topology); without a file, its nominal link classes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "collectives/tuning.hpp"
#include "core/settings.hpp"
#include "topology/locality.hpp"
#include "topology/topology.hpp"
#include "transports/shaping/link_shaper.hpp"

namespace holmes::detail {

// HOLMES_SHAPING: unset or empty: kAuto (shaped when the job's topology file has
// emulation_scale > 1); "1": kOn (shaped even at scale 1 or without a file); "0": kOff;
// "one-network": kOneNetwork, shaped, but every link to another host is the inter-island one, as
// a job on NCCL gets when its hosts do not share one RDMA fabric (the naive baseline of the demo).
enum class ShapingMode { kAuto, kOn, kOff, kOneNetwork };
// Throws HM_ERR_INVALID_ARGUMENT naming the setting for any other value.
ShapingMode shaping_mode(const Settings& settings);

// The shape of the link from `rank` to each peer (index = peer; nullopt: not shaped). `file`
// may be null. `ranks_on_host`: the ranks sharing this rank's host's NICs; 0 counts them in
// `localities`.
std::vector<std::optional<LinkShape>> link_shapes(const std::vector<Locality>& localities, int rank,
                                                  const topology::Topology* file, ShapingMode mode,
                                                  int ranks_on_host = 0);

// As above for a communicator: the file loaded from `topology_file` (when shaping may apply),
// in `mode` (HOLMES_SHAPING). `job` (when given: the parent communicator's localities) counts
// the ranks sharing this host's NICs, which a split's members alone would undercount. Logs the
// shaped links at info level.
std::vector<std::optional<LinkShape>> link_shapes(const std::vector<Locality>& localities, int rank,
                                                  const std::optional<std::string>& topology_file,
                                                  ShapingMode mode,
                                                  const std::vector<Locality>* job = nullptr);

// What the cost model should hold for the island and inter-island tiers, from the same topology
// and mode: per tier, the slowest host's bandwidth of the link class between its hosts
// (Topology::host_bandwidth, the whole host: the model divides it among the ranks that share
// it) / emulation_scale, and the class's latency; in kOneNetwork, the inter-island class for
// both. Only where the links run at those rates: shaped, or a file at scale 1 (a real
// cluster's). Empty otherwise (kOff with a scaled file, kAuto without a file). The same-host
// tier is never shaped and is left out. `file` may be null.
TierCosts topology_tier_costs(const std::vector<Locality>& localities,
                              const topology::Topology* file, ShapingMode mode);

// Both for a communicator, from one reading of `topology_file`, in `mode`: the shape
// of each link (as link_shapes, logged) and the tier numbers (as topology_tier_costs).
struct TopologyLinks {
  std::vector<std::optional<LinkShape>> shapes;
  TierCosts costs;
};
TopologyLinks topology_links(const std::vector<Locality>& localities, int rank,
                             const std::optional<std::string>& topology_file, ShapingMode mode,
                             const std::vector<Locality>* job = nullptr);

}  // namespace holmes::detail
