// Hand-built topologies for the planner's tests: islands of identical hosts, no file parser.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "topology/topology.hpp"

namespace holmes::planner::hand {

using topology::Fabric;
using topology::Host;
using topology::Island;
using topology::Nic;
using topology::Topology;

struct IslandSpec {
  std::string name;
  topology::Fabric fabric;
  std::string link;
  int hosts;
  int nics;
};

// Hosts named <island>-<i> with 8 A100s; `interleave` lists hosts round-robin over islands (a
// launcher's hostfile that mixes them) instead of island by island.
inline Topology make_topology(const std::vector<IslandSpec>& specs, bool interleave = false,
                              int gpus = 8) {
  Topology t;
  t.link_classes["nvlink"] = {"nvlink", Fabric::kNvlink, 2400, 1};
  t.link_classes["ib-hdr"] = {"ib-hdr", Fabric::kIb, 200, 2};
  t.link_classes["roce-100"] = {"roce-100", Fabric::kRoce, 100, 4};
  t.link_classes["roce-25"] = {"roce-25", Fabric::kRoce, 25, 4};
  t.link_classes["eth-25"] = {"eth-25", Fabric::kEthernet, 25, 30};
  t.intra_host_link = "nvlink";
  t.inter_island_link = "eth-25";
  std::vector<std::vector<Host>> per_island;
  for (const IslandSpec& s : specs) {
    Island island{s.name, s.fabric, s.link, {}};
    per_island.emplace_back();
    for (int i = 0; i < s.hosts; ++i) {
      Host h{fmt::format("{}-{}", s.name, i), s.name, gpus, "A100", {}};
      for (int n = 0; n < s.nics; ++n) {
        Nic nic;
        nic.name = fmt::format("nic{}", n);
        nic.link_class = s.link;
        h.nics.push_back(nic);
      }
      per_island.back().push_back(h);
    }
    t.islands[s.name] = island;
  }
  std::size_t longest = 0;
  for (const auto& hosts : per_island) longest = std::max(longest, hosts.size());
  if (interleave) {
    for (std::size_t i = 0; i < longest; ++i) {
      for (const auto& hosts : per_island) {
        if (i < hosts.size()) t.hosts.push_back(hosts[i]);
      }
    }
  } else {
    for (const auto& hosts : per_island) t.hosts.insert(t.hosts.end(), hosts.begin(), hosts.end());
  }
  for (const Host& h : t.hosts) t.islands[h.island].hosts.push_back(h.name);
  t.validate();
  return t;
}

inline Topology paper_topology(bool interleave = false) {
  return make_topology(
      {{"ib", Fabric::kIb, "ib-hdr", 4, 4}, {"roce", Fabric::kRoce, "roce-100", 4, 2}}, interleave);
}

}  // namespace holmes::planner::hand
