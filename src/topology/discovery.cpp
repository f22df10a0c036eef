#include "topology/discovery.hpp"

#include <hwloc.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <memory>

#include "core/net_interfaces.hpp"
#include "topology/locality.hpp"
#include "topology/nominal_links.hpp"

namespace holmes {
namespace topology {
namespace {

namespace fs = std::filesystem;

// Typical one-way latencies of each fabric (verbs ping-pong on HDR/EDR, RoCE through one
// switch, kernel TCP); discovery does not measure them.
constexpr double kIbLatencyUs = nominal::kDiscoveredIbLatencyUs;
constexpr double kRoceLatencyUs = nominal::kDiscoveredRoceLatencyUs;
constexpr double kEthernetLatencyUs = nominal::kDiscoveredEthernetLatencyUs;

std::string read_line(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

std::optional<long long> read_int(const fs::path& path) {
  const std::string text = read_line(path);
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

std::vector<fs::path> sorted_entries(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

// "0000:3b:00.0"
bool is_pci_address(const std::string& name) {
  if (name.size() != 12 || name[4] != ':' || name[7] != ':' || name[10] != '.') return false;
  for (std::size_t i : {0, 1, 2, 3, 5, 6, 8, 9}) {
    if (!std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
  }
  return std::isdigit(static_cast<unsigned char>(name[11])) != 0;
}

// PCI bus id and NUMA node of the device a class entry's `device` link points at: the nearest
// PCI address and numa_node on the way from the device up to the sysfs root (a virtio NIC sits
// below its PCI function).
void read_device_locality(const fs::path& device_link, const fs::path& sysfs_root, Nic& nic) {
  std::error_code ec;
  if (!fs::exists(device_link, ec)) return;
  const fs::path device = fs::weakly_canonical(device_link, ec);
  if (ec) return;
  const fs::path stop = fs::weakly_canonical(sysfs_root, ec);
  for (fs::path dir = device; !dir.empty() && dir != stop && dir != dir.root_path();
       dir = dir.parent_path()) {
    if (nic.pci_bus.empty() && is_pci_address(dir.filename().string())) {
      nic.pci_bus = dir.filename().string();
    }
    if (nic.numa_node < 0) {
      if (auto node = read_int(dir / "numa_node"); node && *node >= 0) {
        nic.numa_node = static_cast<int>(*node);
      }
    }
    if (!nic.pci_bus.empty() && nic.numa_node >= 0) break;
  }
}

std::string rate_text(double gbit_per_s) {
  return gbit_per_s > 0 ? fmt::format("{:g}", gbit_per_s) : "unknown";
}

// The discovered class for a fabric and rate, added to `classes` on first use.
std::string class_for(Fabric fabric, double gbit_per_s, std::map<std::string, LinkClass>& classes) {
  const std::string name =
      fmt::format("discovered-{}-{}", fabric_name(fabric), rate_text(gbit_per_s));
  if (classes.count(name) == 0) {
    LinkClass link;
    link.name = name;
    link.fabric = fabric;
    link.gbit_per_s = gbit_per_s;
    link.latency_us = fabric == Fabric::kIb     ? kIbLatencyUs
                      : fabric == Fabric::kRoce ? kRoceLatencyUs
                                                : kEthernetLatencyUs;
    classes.emplace(name, link);
  }
  return name;
}

std::string host_name(const DiscoveryOptions& options) {
  if (!options.host_name.empty()) return options.host_name;
  char name[256] = {0};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

// The best active port: InfiniBand before RoCE, then device order.
const RdmaPort* best_port(const std::vector<RdmaPort>& ports) {
  const RdmaPort* best = nullptr;
  for (const RdmaPort& port : ports) {
    if (!port.active) continue;
    if (port.fabric == Fabric::kIb) return &port;
    if (best == nullptr) best = &port;
  }
  return best;
}

void read_gpus(const DiscoveryOptions& options, Discovery& out) {
  const fs::path dir = fs::path(options.procfs_root) / "driver" / "nvidia" / "gpus";
  const std::vector<fs::path> gpus = sorted_entries(dir);
  out.host.gpus = static_cast<int>(gpus.size());
  if (gpus.empty()) {
    out.notes.push_back(fmt::format("no NVIDIA GPU: {} is absent or empty", dir.string()));
    return;
  }
  // "Model: \t\t NVIDIA A100-SXM4-80GB"
  std::ifstream in(gpus.front() / "information");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Model:", 0) != 0) continue;
    std::string model = line.substr(6);
    model.erase(0, model.find_first_not_of(" \t"));
    while (!model.empty() && std::isspace(static_cast<unsigned char>(model.back()))) {
      model.pop_back();
    }
    if (model.rfind("NVIDIA ", 0) == 0) model.erase(0, 7);
    out.host.gpu_model = model;
    break;
  }
}

void read_rdma_nics(const DiscoveryOptions& options, Discovery& out) {
  const fs::path root = fs::path(options.sysfs_root) / "class" / "infiniband";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    out.notes.push_back(
        fmt::format("no RDMA device: the kernel has no {}; only ethernet NICs", root.string()));
    return;
  }
  const std::vector<RdmaPort> ports = read_rdma_ports(options.sysfs_root);
  if (ports.empty()) {
    out.notes.push_back(fmt::format("no RDMA port under {}; only ethernet NICs", root.string()));
  }
  std::map<std::string, int> ports_per_device;
  for (const RdmaPort& port : ports) ++ports_per_device[port.device];
  for (const RdmaPort& port : ports) {
    Nic nic;
    nic.name = ports_per_device[port.device] == 1 ? port.device
                                                  : fmt::format("{}:{}", port.device, port.port);
    nic.link_class = class_for(port.fabric, port.gbit_per_s, out.link_classes);
    nic.state = port.state;
    nic.subnet = port.subnet;
    read_device_locality(root / port.device / "device", options.sysfs_root, nic);
    if (!port.active) {
      out.notes.push_back(fmt::format("{} port {} is {}: not used", port.device, port.port,
                                      port.state.empty() ? "not active" : port.state));
    }
    out.host.nics.push_back(std::move(nic));
  }
  if (!ports.empty() && best_port(ports) == nullptr) {
    out.notes.push_back("no active RDMA port: only ethernet NICs carry traffic");
  }
}

void read_ethernet_nics(const DiscoveryOptions& options, Discovery& out) {
  const fs::path root = fs::path(options.sysfs_root) / "class" / "net";
  int found = 0;
  for (const fs::path& dir : sorted_entries(root)) {
    const std::string name = dir.filename().string();
    if (name == "lo") continue;
    ++found;
    Nic nic;
    nic.name = name;
    const auto speed_mbit = read_int(dir / "speed");
    const double gbit = speed_mbit && *speed_mbit > 0 ? static_cast<double>(*speed_mbit) / 1000 : 0;
    if (gbit == 0) {
      out.notes.push_back(fmt::format("{}: speed not reported (virtual NIC?): rate unknown", name));
    }
    nic.link_class = class_for(Fabric::kEthernet, gbit, out.link_classes);
    nic.state = read_line(dir / "operstate");
    nic.mtu = static_cast<int>(read_int(dir / "mtu").value_or(0));
    read_device_locality(dir / "device", options.sysfs_root, nic);
    out.host.nics.push_back(std::move(nic));
  }
  if (found == 0) {
    out.notes.push_back(fmt::format("no ethernet NIC other than lo under {}", root.string()));
  }
}

Nic* find_nic(Discovery& out, const std::string& name) {
  for (Nic& nic : out.host.nics) {
    if (nic.name == name) return &nic;
  }
  return nullptr;
}

// Fills PCI bus ids and NUMA nodes that sysfs did not give, from hwloc's view of the machine.
void read_hwloc_locality(Discovery& out) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) {
    out.notes.push_back("hwloc: cannot initialise; PCI/NUMA locality from sysfs only");
    return;
  }
  const std::unique_ptr<hwloc_topology, void (*)(hwloc_topology_t)> topo(raw,
                                                                         hwloc_topology_destroy);
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(raw) != 0) {
    out.notes.push_back("hwloc: cannot load the machine topology; PCI/NUMA from sysfs only");
    return;
  }
  int seen = 0;
  for (hwloc_obj_t os = hwloc_get_next_osdev(raw, nullptr); os != nullptr;
       os = hwloc_get_next_osdev(raw, os)) {
    const auto type = os->attr->osdev.type;
    if (type != HWLOC_OBJ_OSDEV_NETWORK && type != HWLOC_OBJ_OSDEV_OPENFABRICS) continue;
    ++seen;
    Nic* nic = os->name != nullptr ? find_nic(out, os->name) : nullptr;
    if (nic == nullptr) continue;
    hwloc_obj_t pci = os->parent;
    while (pci != nullptr && pci->type != HWLOC_OBJ_PCI_DEVICE) pci = pci->parent;
    if (pci != nullptr && nic->pci_bus.empty()) {
      const auto& bus = pci->attr->pcidev;
      nic->pci_bus =
          fmt::format("{:04x}:{:02x}:{:02x}.{:x}", bus.domain, bus.bus, bus.dev, bus.func);
    }
    hwloc_obj_t ancestor = hwloc_get_non_io_ancestor_obj(raw, os);
    if (nic->numa_node < 0 && ancestor != nullptr && ancestor->nodeset != nullptr &&
        hwloc_bitmap_weight(ancestor->nodeset) == 1) {
      nic->numa_node = hwloc_bitmap_first(ancestor->nodeset);
    }
  }
  if (seen == 0) {
    out.notes.push_back("hwloc: no network device with PCI information (a VM or container?)");
  }
}

// Addresses of the NICs found, and each NIC's first IPv4 network as its subnet.
void read_addresses(Discovery& out) {
  std::string error;
  const auto addresses = interface_addresses(&error);
  if (!error.empty()) {
    out.notes.push_back(error + ": NIC addresses unknown");
    return;
  }
  for (const InterfaceAddress& a : addresses) {
    Nic* nic = find_nic(out, a.interface);
    if (nic == nullptr) continue;
    out.addresses[nic->name].push_back(fmt::format("{}/{}", a.address, a.prefix));
    if (!a.ipv6 && a.prefix > 0 && nic->subnet.empty())
      nic->subnet = ipv4_network(a.address, a.prefix);
  }
}

}  // namespace

double parse_rdma_rate(const std::string& text) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && value > 0 ? value : 0;
}

std::vector<RdmaPort> read_rdma_ports(const std::string& sysfs_root) {
  std::vector<RdmaPort> ports;
  for (const fs::path& device : sorted_entries(fs::path(sysfs_root) / "class" / "infiniband")) {
    std::vector<fs::path> dirs = sorted_entries(device / "ports");
    // Ports are numbered 1, 2, ... 10: sort by number, not by text.
    std::vector<std::pair<long long, fs::path>> numbered;
    for (const fs::path& dir : dirs) {
      long long number = 0;
      const std::string name = dir.filename().string();
      const auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), number);
      if (error == std::errc() && end == name.data() + name.size())
        numbered.emplace_back(number, dir);
    }
    std::sort(numbered.begin(), numbered.end());
    for (const auto& [number, dir] : numbered) {
      RdmaPort port;
      port.device = device.filename().string();
      port.port = static_cast<int>(number);
      const std::string state = read_line(dir / "state");  // "4: ACTIVE"
      const auto colon = state.find(':');
      port.state = colon == std::string::npos ? state : state.substr(colon + 1);
      port.state.erase(0, port.state.find_first_not_of(' '));
      port.active = port.state == "ACTIVE";
      port.fabric = read_line(dir / "link_layer") == "Ethernet" ? Fabric::kRoce : Fabric::kIb;
      port.gbit_per_s = parse_rdma_rate(read_line(dir / "rate"));
      // GID 0 holds the subnet prefix in its first 64 bits: "fe80:0000:0000:0000:...".
      const std::string gid = read_line(dir / "gids" / "0");
      port.subnet = gid.size() >= 19 ? gid.substr(0, 19) : gid;
      ports.push_back(std::move(port));
    }
  }
  return ports;
}

Discovery discover_host(const DiscoveryOptions& options) {
  Discovery out;
  const bool real_system = fs::path(options.sysfs_root).lexically_normal() == fs::path("/sys");
  out.host.name = host_name(options);
  read_gpus(options, out);
  read_rdma_nics(options, out);
  read_ethernet_nics(options, out);
  if (options.use_hwloc.value_or(real_system)) read_hwloc_locality(out);
  if (options.read_addresses.value_or(real_system)) read_addresses(out);

  const std::vector<RdmaPort> ports = read_rdma_ports(options.sysfs_root);
  if (const RdmaPort* best = best_port(ports)) {
    out.fabric = best->fabric;
    out.subnet = best->subnet;
    out.host.island = fmt::format("{}:{}", fabric_name(out.fabric), out.subnet);
  } else {
    out.host.island = out.host.name;  // no RDMA reaches beyond this host
  }
  return out;
}

}  // namespace topology

// The one implementation of the fabric hint; Locality reads it when the environment is silent.
DiscoveredFabric discover_fabric(const std::string& sysfs_root) {
  const std::vector<topology::RdmaPort> ports = topology::read_rdma_ports(sysfs_root);
  if (const topology::RdmaPort* best = topology::best_port(ports)) {
    return {topology::fabric_name(best->fabric), best->subnet};
  }
  return {"ethernet", ""};
}

}  // namespace holmes
