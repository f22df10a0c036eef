#include "planner/job_topology.hpp"

#include <map>

#include "core/status.hpp"
#include "topology/nominal_links.hpp"

namespace holmes::planner {
namespace {

using topology::Fabric;
using topology::LinkClass;

// Nominal link classes for jobs without a topology file (topology/nominal_links.hpp): NVLink
// inside a host, HDR InfiniBand, 100 GbE RoCE, 10 GbE TCP between islands.
const std::vector<LinkClass>& default_links() {
  const auto link = [](const char* name, Fabric fabric, const nominal::LinkClassFigures& f) {
    return LinkClass{name, fabric, f.gbit_per_s, f.latency_us};
  };
  static const std::vector<LinkClass> links = {
      link("default-intra-host", Fabric::kNvlink, nominal::kIntraHost),
      link("default-ib", Fabric::kIb, nominal::kIb),
      link("default-roce", Fabric::kRoce, nominal::kRoce),
      link("default-ethernet", Fabric::kEthernet, nominal::kEthernet),
  };
  return links;
}

const LinkClass& default_link(Fabric fabric) {
  for (const LinkClass& link : default_links()) {
    if (link.fabric == fabric) return link;
  }
  return default_links().back();
}

// The link class an island of `fabric` uses: the file's first class of that fabric, else the
// default one (added to the topology).
std::string link_for(topology::Topology& topo, Fabric fabric, std::vector<std::string>& notes) {
  for (const auto& [name, link] : topo.link_classes) {
    if (link.fabric == fabric) return name;
  }
  const LinkClass& link = default_link(fabric);
  if (topo.link_classes.emplace(link.name, link).second) {
    notes.push_back(fmt::format("no {} link class declared: using {} ({} Gbit/s, {} us)",
                                topology::fabric_name(fabric), link.name, link.gbit_per_s,
                                link.latency_us));
  }
  return link.name;
}

}  // namespace

JobTopology job_topology(const std::vector<Locality>& ranks, const topology::Topology* file) {
  require(!ranks.empty(), "a job without ranks cannot be planned");
  JobTopology out;
  topology::Topology& topo = out.topology;
  if (file) {
    // A file with an emulation scale describes a cluster this job emulates at 1/scale of its
    // rates (the shaping layer holds every link to that): predict for the rates it will see.
    topo.link_classes = file->link_classes;
    for (auto& [name, link] : topo.link_classes) link.gbit_per_s /= file->emulation_scale;
    if (file->emulation_scale > 1) {
      out.notes.push_back(
          fmt::format("emulation: every link at 1/{} of the file's rate", file->emulation_scale));
    }
    topo.intra_host_link = file->intra_host_link;
    topo.inter_island_link = file->inter_island_link;
    // The rates above are already the emulated ones.
    topo.emulation_scale = 1;
  }
  if (topo.intra_host_link.empty())
    topo.intra_host_link = link_for(topo, Fabric::kNvlink, out.notes);
  if (topo.inter_island_link.empty()) {
    topo.inter_island_link = link_for(topo, Fabric::kEthernet, out.notes);
  }
  std::map<std::string, int> host_index;
  std::vector<int> host_of_rank;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const Locality& l = ranks[r];
    auto [it, inserted] = host_index.emplace(l.host, static_cast<int>(topo.hosts.size()));
    if (inserted) {
      topology::Host host;
      if (const topology::Host* declared = file ? file->find_host(l.host) : nullptr)
        host = *declared;
      host.name = l.host;
      host.island = l.island;
      host.gpus = 0;
      topo.hosts.push_back(host);
    }
    ++topo.hosts[it->second].gpus;
    host_of_rank.push_back(it->second);
  }
  for (topology::Host& host : topo.hosts) {
    const topology::Host* declared = file ? file->find_host(host.name) : nullptr;
    if (file && !declared) {
      out.notes.push_back(
          fmt::format("host '{}' is not in the topology file: nominal numbers", host.name));
    } else if (declared && declared->gpus != host.gpus) {
      out.notes.push_back(fmt::format("host '{}': the file declares {} GPUs, the job runs {} ranks",
                                      host.name, declared->gpus, host.gpus));
    }
    // NICs naming classes the job's topology lacks would fail validation: keep known ones.
    std::erase_if(host.nics, [&](const topology::Nic& nic) {
      return topo.link_classes.count(nic.link_class) == 0;
    });
  }
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const Locality& l = ranks[r];
    Fabric fabric = Fabric::kEthernet;
    require(topology::parse_fabric(l.fabric, &fabric), "rank {}: unknown fabric '{}'", r, l.fabric);
    auto found = topo.islands.find(l.island);
    if (found == topo.islands.end()) {
      topology::Island island;
      island.name = l.island;
      island.fabric = fabric;
      const topology::Island* declared = nullptr;
      if (file) {
        auto it = file->islands.find(l.island);
        if (it != file->islands.end()) declared = &it->second;
      }
      if (declared && declared->fabric == fabric) {
        island.link_class = declared->link_class;
      } else if (fabric != Fabric::kEthernet) {
        island.link_class = link_for(topo, fabric, out.notes);
      }
      found = topo.islands.emplace(l.island, island).first;
    } else {
      require(found->second.fabric == fabric,
              "island '{}': rank {} says its fabric is {}, an earlier rank said {}", l.island, r,
              l.fabric, topology::fabric_name(found->second.fabric));
    }
  }
  for (const topology::Host& host : topo.hosts)
    topo.islands.at(host.island).hosts.push_back(host.name);
  topo.validate();
  out.layout = JobLayout(std::move(host_of_rank));
  return out;
}

}  // namespace holmes::planner
