#include "topology/topology.hpp"

#include <set>

#include "core/status.hpp"

namespace holmes::topology {

const char* fabric_name(Fabric fabric) {
  switch (fabric) {
    case Fabric::kEthernet:
      return "ethernet";
    case Fabric::kIb:
      return "ib";
    case Fabric::kRoce:
      return "roce";
    case Fabric::kNvlink:
      return "nvlink";
  }
  return "?";
}

bool parse_fabric(const std::string& name, Fabric* out) {
  for (Fabric f : {Fabric::kEthernet, Fabric::kIb, Fabric::kRoce, Fabric::kNvlink}) {
    if (name == fabric_name(f)) {
      *out = f;
      return true;
    }
  }
  return false;
}

int Topology::total_gpus() const {
  int total = 0;
  for (const Host& host : hosts) total += host.gpus;
  return total;
}

const Host* Topology::find_host(const std::string& name) const {
  for (const Host& host : hosts) {
    if (host.name == name) return &host;
  }
  return nullptr;
}

const LinkClass& Topology::link_class(const std::string& name) const {
  auto it = link_classes.find(name);
  if (it == link_classes.end())
    fail(HM_ERR_INVALID_ARGUMENT, "link class '{}' is not declared", name);
  return it->second;
}

const LinkClass& Topology::link_between(const Host& a, const Host& b) const {
  if (a.name == b.name) return link_class(intra_host_link);
  if (a.island == b.island) {
    // An ethernet island may declare its own (faster) LAN; without one, its hosts talk over the
    // inter-island link like everyone else.
    const Island& island = islands.at(a.island);
    if (!island.link_class.empty()) return link_class(island.link_class);
  }
  return link_class(inter_island_link);
}

double Topology::host_bandwidth(const Host& host, const std::string& link) const {
  int count = 0;
  for (const Nic& nic : host.nics) count += nic.link_class == link ? 1 : 0;
  return std::max(count, 1) * link_class(link).bytes_per_s();
}

void Topology::validate() const {
  for (const auto& [name, link] : link_classes) {
    require(link.name == name, "link class '{}' is stored under the name '{}'", link.name, name);
    require(link.gbit_per_s > 0, "link class '{}': bandwidth must be positive, got {} Gbit/s", name,
            link.gbit_per_s);
    require(link.latency_us >= 0, "link class '{}': latency must not be negative, got {} us", name,
            link.latency_us);
  }
  require(link_classes.count(intra_host_link) == 1, "intra-host link class '{}' is not declared",
          intra_host_link);
  require(link_classes.count(inter_island_link) == 1,
          "inter-island link class '{}' is not declared", inter_island_link);
  require(emulation_scale >= 1, "emulation scale must be at least 1, got {}", emulation_scale);
  std::set<std::string> seen;
  for (const Host& host : hosts) {
    require(!host.name.empty(), "a host has no name");
    require(seen.insert(host.name).second, "host '{}' is declared twice", host.name);
    require(host.gpus >= 0, "host '{}': gpus must not be negative, got {}", host.name, host.gpus);
    auto island = islands.find(host.island);
    require(island != islands.end(), "host '{}': island '{}' is not declared", host.name,
            host.island);
    bool listed = false;
    for (const std::string& member : island->second.hosts) listed = listed || member == host.name;
    require(listed, "host '{}': island '{}' does not list it", host.name, host.island);
    for (const Nic& nic : host.nics) {
      require(link_classes.count(nic.link_class) == 1,
              "host '{}': NIC '{}' has link class '{}', which is not declared", host.name, nic.name,
              nic.link_class);
    }
  }
  for (const auto& [name, island] : islands) {
    require(island.name == name, "island '{}' is stored under the name '{}'", island.name, name);
    if (island.fabric != Fabric::kEthernet || !island.link_class.empty()) {
      require(link_classes.count(island.link_class) == 1,
              "island '{}': link class '{}' is not declared", name, island.link_class);
    }
    for (const std::string& member : island.hosts) {
      const Host* host = find_host(member);
      require(host != nullptr, "island '{}' lists host '{}', which is not declared", name, member);
      require(host->island == name, "island '{}' lists host '{}', which is in island '{}'", name,
              member, host->island);
    }
  }
}

}  // namespace holmes::topology
