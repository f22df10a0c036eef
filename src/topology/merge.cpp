#include "topology/merge.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/status.hpp"
#include "topology/topology_file.hpp"

namespace holmes::topology {
namespace {

constexpr const char* kAbsent = "(absent)";

// Rates within 1% are the same link (sysfs rounds, files round differently).
bool same_rate(double a, double b) { return std::abs(a - b) <= 0.01 * std::max(a, b); }

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string describe_class(const LinkClass& link) {
  return link.gbit_per_s > 0
             ? fmt::format("{} {:g} Gbit/s ({})", fabric_name(link.fabric), link.gbit_per_s,
                           link.name)
             : fmt::format("{} rate unknown ({})", fabric_name(link.fabric), link.name);
}

const Nic* find_nic(const std::vector<Nic>& nics, const std::string& name) {
  for (const Nic& nic : nics) {
    if (nic.name == name) return &nic;
  }
  return nullptr;
}

class Merger {
 public:
  Merger(const Topology& file, const Discovery& discovered, const LocalOverrides& overrides)
      : discovered_(discovered), overrides_(overrides) {
    out_.topology = file;
    out_.host = overrides.host.value_or(discovered.host.name);
  }

  MergeResult run() {
    Host* host = find_host();
    out_.host_in_topology = host != nullptr;
    if (host == nullptr) {
      conflict(
          out_.host, "host", kAbsent,
          fmt::format("{} GPUs, {} NICs", discovered_.host.gpus, discovered_.host.nics.size()));
      for (const auto& [name, value] : {std::pair{"HOLMES_ISLAND", overrides_.island},
                                        std::pair{"HOLMES_FABRIC", overrides_.fabric}}) {
        if (!value) continue;
        out_.overrides.push_back(fmt::format("{}={} not applied: host '{}' is not in the topology",
                                             name, *value, out_.host));
      }
    } else {
      compare_host(*host);
      apply_overrides(host->name);
    }
    out_.topology.validate();
    return std::move(out_);
  }

 private:
  Host* find_host() {
    for (Host& host : out_.topology.hosts) {
      if (host.name == out_.host) return &host;
    }
    return nullptr;
  }

  void conflict(const std::string& host, std::string field, std::string file_value,
                std::string discovered_value) {
    out_.conflicts.push_back(
        {host, std::move(field), std::move(file_value), std::move(discovered_value)});
  }

  const LinkClass* discovered_class(const Nic& nic) const {
    auto it = discovered_.link_classes.find(nic.link_class);
    return it == discovered_.link_classes.end() ? nullptr : &it->second;
  }

  void compare_host(Host& host) {
    const Host& seen = discovered_.host;
    if (host.gpus != seen.gpus) {
      conflict(host.name, "gpus", std::to_string(host.gpus), std::to_string(seen.gpus));
    }
    if (host.gpu_model.empty()) {
      host.gpu_model = seen.gpu_model;
    } else if (!seen.gpu_model.empty()) {
      const std::string a = lower(host.gpu_model);
      const std::string b = lower(seen.gpu_model);
      // "A100" and "A100-SXM4-80GB" name the same part.
      if (a.find(b) == std::string::npos && b.find(a) == std::string::npos) {
        conflict(host.name, "gpu_model", host.gpu_model, seen.gpu_model);
      }
    }
    const Island& island = out_.topology.islands.at(host.island);
    if (island.fabric != discovered_.fabric) {
      conflict(host.name, "fabric",
               fmt::format("{} (island '{}')", fabric_name(island.fabric), island.name),
               fabric_name(discovered_.fabric));
    }
    for (Nic& nic : host.nics) compare_nic(host.name, nic);
    // RDMA ports the file does not declare; ethernet NICs (management, virtual) are left out:
    // files name only the NICs that carry training traffic.
    for (const Nic& found : seen.nics) {
      const LinkClass* link = discovered_class(found);
      if (link == nullptr || link->fabric == Fabric::kEthernet || found.state != "ACTIVE") continue;
      if (find_nic(host.nics, found.name) == nullptr) {
        conflict(host.name, "nic " + found.name, kAbsent, describe_class(*link));
      }
    }
  }

  void compare_nic(const std::string& host, Nic& nic) {
    const LinkClass& declared = out_.topology.link_class(nic.link_class);
    const Nic* found = find_nic(discovered_.host.nics, nic.name);
    if (found == nullptr) {
      conflict(host, "nic " + nic.name, describe_class(declared), kAbsent);
      return;
    }
    if (const LinkClass* link = discovered_class(*found)) {
      if (link->fabric != declared.fabric) {
        conflict(host, fmt::format("nic {} fabric", nic.name), fabric_name(declared.fabric),
                 fabric_name(link->fabric));
      }
      if (link->gbit_per_s > 0 && !same_rate(link->gbit_per_s, declared.gbit_per_s)) {
        conflict(host, fmt::format("nic {} rate", nic.name),
                 fmt::format("{:g} Gbit/s", declared.gbit_per_s),
                 fmt::format("{:g} Gbit/s", link->gbit_per_s));
      }
    }
    // What the file leaves open, discovery fills in.
    if (nic.state.empty()) nic.state = found->state;
    if (nic.subnet.empty()) nic.subnet = found->subnet;
    if (nic.pci_bus.empty()) nic.pci_bus = found->pci_bus;
    if (nic.numa_node < 0) nic.numa_node = found->numa_node;
    if (nic.mtu == 0) nic.mtu = found->mtu;
  }

  // A class of `fabric` for an island the environment creates: the host's current island's
  // when the fabric matches, else the first declared one of that fabric.
  std::string class_for_new_island(Fabric fabric, const Island& current) const {
    if (fabric == Fabric::kEthernet) return out_.topology.inter_island_link;
    if (current.fabric == fabric) return current.link_class;
    for (const auto& [name, link] : out_.topology.link_classes) {
      if (link.fabric == fabric) return name;
    }
    fail(HM_ERR_INVALID_ARGUMENT,
         "HOLMES_ISLAND={} is a new {} island, but the topology declares no {} link class",
         *overrides_.island, fabric_name(fabric), fabric_name(fabric));
  }

  void apply_overrides(const std::string& host_name) {
    Topology& topology = out_.topology;
    Host& host = *find_host();
    const std::string current = host.island;
    const std::string target = overrides_.island.value_or(current);
    std::optional<Fabric> fabric;
    if (overrides_.fabric) {
      Fabric parsed{};
      require(parse_fabric(*overrides_.fabric, &parsed) && parsed != Fabric::kNvlink,
              "HOLMES_FABRIC is '{}': expected ib, roce or ethernet", *overrides_.fabric);
      fabric = parsed;
    }
    auto existing = topology.islands.find(target);
    if (existing != topology.islands.end()) {
      if (fabric && existing->second.fabric != *fabric) {
        fail(HM_ERR_INVALID_ARGUMENT,
             "HOLMES_FABRIC={} but host '{}' is in island '{}' (fabric {}) in the topology; an "
             "island has one fabric: set HOLMES_ISLAND to a {} island (or a new name)",
             *overrides_.fabric, host_name, target, fabric_name(existing->second.fabric),
             *overrides_.fabric);
      }
      if (target == current) return;
    } else {
      const Island& from = topology.islands.at(current);
      Island created;
      created.name = target;
      created.fabric = fabric.value_or(from.fabric);
      created.link_class = class_for_new_island(created.fabric, from);
      out_.overrides.push_back(fmt::format("HOLMES_ISLAND={}: new {} island (link class {})",
                                           target, fabric_name(created.fabric),
                                           created.link_class));
      topology.islands.emplace(target, std::move(created));
    }
    host.island = target;
    out_.overrides.push_back(fmt::format("HOLMES_ISLAND={}: host '{}' moves from island '{}'",
                                         target, host_name, current));
    // Island::hosts follow Topology::hosts order.
    for (const std::string& name : {current, target}) {
      Island& island = topology.islands.at(name);
      island.hosts.clear();
      for (const Host& h : topology.hosts) {
        if (h.island == name) island.hosts.push_back(h.name);
      }
    }
    if (topology.islands.at(current).hosts.empty()) {
      topology.islands.erase(current);
      out_.overrides.push_back(fmt::format("island '{}' is left empty and removed", current));
    }
  }

  const Discovery& discovered_;
  const LocalOverrides& overrides_;
  MergeResult out_;
};

}  // namespace

std::string Conflict::message() const {
  if (field == "host") {
    return fmt::format("host '{}' is not in the topology file (discovered {})", host,
                       discovered_value);
  }
  return fmt::format(
      "host '{}': {}: the file says {}, discovery found {} (the file's value is "
      "used)",
      host, field, file_value, discovered_value);
}

MergeResult merge_discovery(const Topology& file, const Discovery& discovered,
                            const LocalOverrides& overrides) {
  return Merger(file, discovered, overrides).run();
}

Locality locality_in_topology(const Topology& topology, const std::string& host) {
  const Host* found = topology.find_host(host);
  require(found != nullptr, "host '{}' is not in the topology ({} hosts)", host,
          topology.hosts.size());
  const Island& island = topology.islands.at(found->island);
  return Locality{found->name, island.name, fabric_name(island.fabric)};
}

Locality rank_locality(const std::optional<std::string>& topology_file,
                       const LocalOverrides& overrides, std::string* note) {
  if (!topology_file) return local_locality(overrides);
  const Topology file = load_topology_file(*topology_file);
  std::string host = overrides.host.value_or("");
  if (host.empty()) {
    char name[256] = {0};
    ::gethostname(name, sizeof(name) - 1);
    host = name;
  }
  if (file.find_host(host) == nullptr) {
    if (note)
      *note = fmt::format("host '{}' is not in {}: placed by discovery", host, *topology_file);
    return local_locality(overrides);
  }
  Locality out = locality_in_topology(file, host);
  if (overrides.island) out.island = *overrides.island;
  if (overrides.fabric) out.fabric = *overrides.fabric;
  if (note) *note = fmt::format("host '{}' placed by {}", host, *topology_file);
  return out;
}

}  // namespace holmes::topology
