#include "communicator/shaping.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/log.hpp"
#include "core/status.hpp"
#include "planner/job_topology.hpp"
#include "topology/topology_file.hpp"

namespace holmes::detail {
namespace {

int ranks_of_host(const std::vector<Locality>& localities, const std::string& host) {
  return static_cast<int>(std::count_if(localities.begin(), localities.end(),
                                        [&](const Locality& l) { return l.host == host; }));
}

}  // namespace

ShapingMode shaping_mode(const Settings& settings) {
  const auto value = settings.text_if_given(Setting::kShaping);  // checked: 1, 0, one-network
  if (!value) return ShapingMode::kAuto;
  if (*value == "1") return ShapingMode::kOn;
  if (*value == "0") return ShapingMode::kOff;
  return ShapingMode::kOneNetwork;
}

std::vector<std::optional<LinkShape>> link_shapes(const std::vector<Locality>& localities, int rank,
                                                  const topology::Topology* file, ShapingMode mode,
                                                  int ranks_on_host) {
  const auto size = localities.size();
  require(rank >= 0 && static_cast<std::size_t>(rank) < size, "rank {} is outside [0, {})", rank,
          size);
  std::vector<std::optional<LinkShape>> shapes(size);
  const bool scaled = file != nullptr && file->emulation_scale > 1;
  if (mode == ShapingMode::kOff || (mode == ShapingMode::kAuto && !scaled)) return shapes;

  const planner::JobTopology job = planner::job_topology(localities, file);
  const topology::Topology& topo = job.topology;
  const Locality& me = localities[static_cast<std::size_t>(rank)];
  const topology::Host* my_host = topo.find_host(me.host);
  if (my_host == nullptr) fail(HM_ERR_INTERNAL, "shaping: host '{}' is not in the job", me.host);
  if (ranks_on_host <= 0) ranks_on_host = ranks_of_host(localities, me.host);
  ranks_on_host = std::max(ranks_on_host, 1);
  std::map<std::string, int> buckets;  // link class -> its bucket: one per class of NICs
  // The job topology gives link classes at the emulated rates (the file's / its scale) and a
  // scale of 1; a scale left in it would still be applied here. Logs name the file's numbers.
  const double file_scale = file != nullptr ? file->emulation_scale : 1.0;
  for (std::size_t peer = 0; peer < size; ++peer) {
    if (localities[peer].host == me.host) continue;
    const topology::Host* their_host = topo.find_host(localities[peer].host);
    if (their_host == nullptr) continue;  // job_topology lists every rank's host
    const topology::LinkClass& link = mode == ShapingMode::kOneNetwork
                                          ? topo.link_class(topo.inter_island_link)
                                          : topo.link_between(*my_host, *their_host);
    const double host_rate = topo.host_bandwidth(*my_host, link.name);
    const long nics = std::lround(host_rate / link.bytes_per_s());
    LinkShape shape;
    shape.bytes_per_s = host_rate / topo.emulation_scale / ranks_on_host;
    shape.latency = std::chrono::ceil<std::chrono::nanoseconds>(
        std::chrono::duration<double, std::micro>(link.latency_us));
    double file_gbit = link.gbit_per_s;
    if (file != nullptr) {
      const auto declared = file->link_classes.find(link.name);
      if (declared != file->link_classes.end()) file_gbit = declared->second.gbit_per_s;
    }
    shape.origin = fmt::format("link class {}: {} Gbit/s x {} NIC{} / scale {} / {} rank{} of {}",
                               link.name, file_gbit, nics, nics == 1 ? "" : "s", file_scale,
                               ranks_on_host, ranks_on_host == 1 ? "" : "s", me.host);
    shape.bucket = buckets.emplace(link.name, static_cast<int>(buckets.size())).first->second;
    shapes[peer] = std::move(shape);
  }
  return shapes;
}

TopologyLinks topology_links(const std::vector<Locality>& localities, int rank,
                             const std::optional<std::string>& topology_file, ShapingMode mode,
                             const std::vector<Locality>* job) {
  std::optional<topology::Topology> file;
  if (topology_file) file = topology::load_topology_file(*topology_file);
  TopologyLinks links;
  links.costs = topology_tier_costs(localities, file ? &*file : nullptr, mode);
  links.shapes.resize(localities.size());
  if (mode == ShapingMode::kOff || (mode == ShapingMode::kAuto && !topology_file)) return links;
  int ranks_on_host = 0;
  if (job != nullptr && static_cast<std::size_t>(rank) < localities.size()) {
    const std::string& host = localities[static_cast<std::size_t>(rank)].host;
    ranks_on_host = std::max(ranks_of_host(*job, host), ranks_of_host(localities, host));
  }
  auto& shapes = links.shapes;
  shapes = link_shapes(localities, rank, file ? &*file : nullptr, mode, ranks_on_host);
  // One log line per distinct shape: "ranks 2, 3: shaped to ...".
  std::map<std::string, std::string> peers_by_shape;
  for (std::size_t peer = 0; peer < shapes.size(); ++peer) {
    if (!shapes[peer]) continue;
    auto& peers = peers_by_shape[shapes[peer]->describe()];
    peers += fmt::format("{}{}", peers.empty() ? "" : ", ", peer);
  }
  for (const auto& [shape, peers] : peers_by_shape) {
    HM_LOG_INFO("rank {}: emulated links to ranks {}: {}", rank, peers, shape);
  }
  return links;
}

std::vector<std::optional<LinkShape>> link_shapes(const std::vector<Locality>& localities, int rank,
                                                  const std::optional<std::string>& topology_file,
                                                  ShapingMode mode,
                                                  const std::vector<Locality>* job) {
  return topology_links(localities, rank, topology_file, mode, job).shapes;
}

TierCosts topology_tier_costs(const std::vector<Locality>& localities,
                              const topology::Topology* file, ShapingMode mode) {
  const bool scaled = file != nullptr && file->emulation_scale > 1;
  const bool shaped = mode == ShapingMode::kOn || mode == ShapingMode::kOneNetwork ||
                      (mode == ShapingMode::kAuto && scaled);
  const bool real_rates = file != nullptr && !scaled;
  TierCosts costs;
  if (localities.empty() || (!shaped && !real_rates)) return costs;
  const planner::JobTopology job = planner::job_topology(localities, file);
  const topology::Topology& topo = job.topology;
  std::map<std::string, std::vector<const topology::Host*>> hosts_by_island;
  for (const auto& l : localities) {
    const topology::Host* host = topo.find_host(l.host);
    if (host == nullptr) continue;  // job_topology lists every rank's host
    auto& hosts = hosts_by_island[host->island];
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
  }
  // The slowest host of a tier sets its numbers, as the slowest link sets a ring's pace.
  const auto worst = [&topo](std::optional<LinkCost>& tier, const topology::Host& host,
                             const topology::LinkClass& link) {
    const double gbytes_per_s = topo.host_bandwidth(host, link.name) / topo.emulation_scale / 1e9;
    if (!tier) tier = LinkCost{link.latency_us, gbytes_per_s};
    tier->latency_us = std::max(tier->latency_us, link.latency_us);
    tier->gbytes_per_s = std::min(tier->gbytes_per_s, gbytes_per_s);
  };
  const topology::LinkClass& inter = topo.link_class(topo.inter_island_link);
  for (const auto& [island, hosts] : hosts_by_island) {
    for (const topology::Host* host : hosts) {
      if (hosts.size() >= 2) {
        const auto& link = mode == ShapingMode::kOneNetwork
                               ? inter
                               : topo.link_between(*host, *hosts[host == hosts[0] ? 1 : 0]);
        worst(costs.tiers[static_cast<std::size_t>(Tier::kSameIsland)], *host, link);
      }
      if (hosts_by_island.size() >= 2) {
        worst(costs.tiers[static_cast<std::size_t>(Tier::kOtherIsland)], *host, inter);
      }
    }
  }
  return costs;
}

}  // namespace holmes::detail
