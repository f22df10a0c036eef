// holmes-topo: what Holmes sees of the cluster.
//
//   holmes-topo                      discover this host: GPUs, RDMA ports, ethernet NICs, notes
//   holmes-topo --file F             load a topology file, merge this host's discovery into it,
//                                    print link classes, islands, hosts and the conflicts
//   holmes-topo ... --json           the same as JSON
//
// HOLMES_HOST, HOLMES_ISLAND and HOLMES_FABRIC apply as they do for a rank. --sysfs/--procfs
// read another tree (a copy of a cluster node's /sys, a test fixture).
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "core/settings.hpp"
#include "core/status.hpp"
#include "topology/discovery.hpp"
#include "topology/merge.hpp"
#include "topology/topology_file.hpp"

namespace {

using holmes::topology::Discovery;
using holmes::topology::fabric_name;
using holmes::topology::Host;
using holmes::topology::LinkClass;
using holmes::topology::MergeResult;
using holmes::topology::Nic;
using holmes::topology::Topology;
using nlohmann::json;

// Left-aligned columns sized to their widest cell.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& out) const {
    std::vector<std::size_t> width(rows_.front().size(), 0);
    for (const auto& row : rows_) {
      for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    }
    for (const auto& row : rows_) {
      std::string line;
      for (std::size_t i = 0; i < row.size(); ++i) {
        line += i + 1 == row.size() ? row[i] : fmt::format("{:<{}}  ", row[i], width[i]);
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out << "  " << line << "\n";
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string rate(const LinkClass& link) {
  return link.gbit_per_s > 0 ? fmt::format("{:g} Gbit/s", link.gbit_per_s) : "unknown";
}

std::string or_dash(const std::string& text) { return text.empty() ? "-" : text; }
std::string or_dash(int value, int unknown) {
  return value == unknown ? "-" : std::to_string(value);
}

json nic_json(const Nic& nic) {
  return {{"name", nic.name},     {"link_class", nic.link_class}, {"state", nic.state},
          {"subnet", nic.subnet}, {"pci_bus", nic.pci_bus},       {"numa_node", nic.numa_node},
          {"mtu", nic.mtu}};
}

json host_json(const Host& host) {
  json nics = json::array();
  for (const Nic& nic : host.nics) nics.push_back(nic_json(nic));
  return {{"name", host.name},
          {"island", host.island},
          {"gpus", host.gpus},
          {"gpu_model", host.gpu_model},
          {"nics", nics}};
}

json classes_json(const std::map<std::string, LinkClass>& classes) {
  json out = json::object();
  for (const auto& [name, link] : classes) {
    out[name] = {{"fabric", fabric_name(link.fabric)},
                 {"gbit_per_s", link.gbit_per_s},
                 {"latency_us", link.latency_us}};
  }
  return out;
}

json discovery_json(const Discovery& d) {
  return {{"host", host_json(d.host)},
          {"link_classes", classes_json(d.link_classes)},
          {"fabric", fabric_name(d.fabric)},
          {"subnet", d.subnet},
          {"island", d.host.island},
          {"addresses", d.addresses},
          {"notes", d.notes}};
}

json topology_json(const Topology& t) {
  json islands = json::array();
  for (const auto& [name, island] : t.islands) {
    islands.push_back({{"name", name},
                       {"fabric", fabric_name(island.fabric)},
                       {"link_class", island.link_class},
                       {"hosts", island.hosts}});
  }
  json hosts = json::array();
  for (const Host& host : t.hosts) hosts.push_back(host_json(host));
  return {{"name", t.name},
          {"emulation_scale", t.emulation_scale},
          {"link_classes", classes_json(t.link_classes)},
          {"intra_host_link", t.intra_host_link},
          {"inter_island_link", t.inter_island_link},
          {"islands", islands},
          {"hosts", hosts},
          {"total_gpus", t.total_gpus()}};
}

void print_notes(const std::vector<std::string>& notes, const std::string& title) {
  if (notes.empty()) return;
  std::cout << "\n" << title << ":\n";
  for (const std::string& note : notes) std::cout << "  - " << note << "\n";
}

void print_discovery(const Discovery& d) {
  std::cout << fmt::format("host {}: {} GPU{}{}, fabric {}, island hint {}\n", d.host.name,
                           d.host.gpus, d.host.gpus == 1 ? "" : "s",
                           d.host.gpu_model.empty() ? "" : " (" + d.host.gpu_model + ")",
                           fabric_name(d.fabric), d.host.island);
  bool rdma = false;
  for (const Nic& nic : d.host.nics) {
    rdma = rdma || d.link_classes.at(nic.link_class).fabric != holmes::topology::Fabric::kEthernet;
  }
  if (!rdma) std::cout << "no RDMA NIC: traffic between hosts goes over ethernet (TCP)\n";
  std::cout << "\nNICs:\n";
  Table table({"NIC", "fabric", "rate", "state", "MTU", "PCI", "NUMA", "subnet", "addresses",
               "link class"});
  for (const Nic& nic : d.host.nics) {
    const LinkClass& link = d.link_classes.at(nic.link_class);
    std::string addresses;
    if (auto it = d.addresses.find(nic.name); it != d.addresses.end()) {
      addresses = fmt::format("{}", fmt::join(it->second, " "));
    }
    table.add({nic.name, fabric_name(link.fabric), rate(link), or_dash(nic.state),
               or_dash(nic.mtu, 0), or_dash(nic.pci_bus), or_dash(nic.numa_node, -1),
               or_dash(nic.subnet), or_dash(addresses), nic.link_class});
  }
  table.print(std::cout);
  print_notes(d.notes, "notes");
}

void print_merge(const MergeResult& m, bool summary) {
  const Topology& t = m.topology;
  std::cout << fmt::format("topology {}: {} hosts, {} GPUs, {} islands", or_dash(t.name),
                           t.hosts.size(), t.total_gpus(), t.islands.size());
  if (t.emulation_scale != 1) std::cout << fmt::format(", emulated at 1/{:g}", t.emulation_scale);
  std::cout << "\n\nlink classes:\n";
  Table classes({"class", "fabric", "rate", "latency", "used for"});
  for (const auto& [name, link] : t.link_classes) {
    std::string use = name == t.intra_host_link     ? "intra-host"
                      : name == t.inter_island_link ? "inter-island"
                                                    : "";
    classes.add(
        {name, fabric_name(link.fabric), rate(link), fmt::format("{:g} us", link.latency_us), use});
  }
  classes.print(std::cout);

  std::cout << "\nislands:\n";
  Table islands({"island", "fabric", "link class", "hosts", "GPUs"});
  for (const auto& [name, island] : t.islands) {
    int gpus = 0;
    for (const std::string& host : island.hosts) gpus += t.find_host(host)->gpus;
    islands.add({name, fabric_name(island.fabric), island.link_class,
                 std::to_string(island.hosts.size()), std::to_string(gpus)});
  }
  islands.print(std::cout);

  if (!summary) {
    std::cout << "\nhosts:\n";
    Table hosts({"host", "island", "GPUs", "model", "NICs"});
    for (const Host& host : t.hosts) {
      // "mlx5_0 mlx5_1 (ib-hdr)": NICs grouped by class, in order.
      std::string nics;
      for (std::size_t i = 0; i < host.nics.size(); ++i) {
        nics += (i == 0 ? "" : " ") + host.nics[i].name;
        if (i + 1 == host.nics.size() || host.nics[i + 1].link_class != host.nics[i].link_class) {
          nics += " (" + host.nics[i].link_class + ")";
        }
      }
      hosts.add({host.name, host.island, std::to_string(host.gpus), or_dash(host.gpu_model),
                 or_dash(nics)});
    }
    hosts.print(std::cout);
  }

  std::cout << fmt::format("\nthis host: {}{}\n", m.host,
                           m.host_in_topology ? "" : " (not in the topology file)");
  std::vector<std::string> conflicts;
  for (const auto& c : m.conflicts) conflicts.push_back(c.message());
  print_notes(conflicts, "conflicts (the file wins)");
  print_notes(m.overrides, "environment overrides");
}

int run(int argc, char** argv) {
  CLI::App app{"holmes-topo: discover this host, or load a topology file and merge it"};
  std::string file;
  bool as_json = false;
  bool summary = false;
  holmes::topology::DiscoveryOptions options;
  app.add_option("--file,-f", file, "topology file (YAML) to load and merge with this host");
  app.add_flag("--json", as_json, "print JSON instead of tables");
  app.add_flag("--summary", summary, "with --file: leave out the per-host table");
  app.add_option("--sysfs", options.sysfs_root, "sysfs root to discover from")
      ->capture_default_str();
  app.add_option("--procfs", options.procfs_root, "procfs root to count GPUs from")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  // HOLMES_HOST, HOLMES_ISLAND and HOLMES_FABRIC place this host, as they place a rank.
  const auto overrides =
      holmes::LocalOverrides::from_settings(holmes::Settings::from_environment());
  if (options.host_name.empty()) options.host_name = overrides.host.value_or("");
  const Discovery discovered = holmes::topology::discover_host(options);
  if (file.empty()) {
    if (as_json) {
      std::cout << discovery_json(discovered).dump(2) << "\n";
    } else {
      print_discovery(discovered);
    }
    return 0;
  }
  const Topology topology = holmes::topology::load_topology_file(file);
  const MergeResult merged = holmes::topology::merge_discovery(topology, discovered, overrides);
  if (as_json) {
    json conflicts = json::array();
    for (const auto& c : merged.conflicts) {
      conflicts.push_back({{"host", c.host},
                           {"field", c.field},
                           {"file_value", c.file_value},
                           {"discovered_value", c.discovered_value},
                           {"message", c.message()}});
    }
    const json out = {{"topology", topology_json(merged.topology)},
                      {"this_host", merged.host},
                      {"host_in_topology", merged.host_in_topology},
                      {"conflicts", conflicts},
                      {"overrides", merged.overrides},
                      {"discovery", discovery_json(discovered)}};
    std::cout << out.dump(2) << "\n";
  } else {
    print_merge(merged, summary);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const holmes::Error& e) {
    std::cerr << "holmes-topo: " << e.what() << "\n";
    return 1;
  }
}
