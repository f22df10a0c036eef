// Discovery of this host: what its kernel shows about RDMA ports, ethernet NICs and GPUs, with
// PCI/NUMA locality, as a topology Host plus notes a person can act on.
//
// Sources (every path under a root parameter, so tests run on fake trees):
//   <sysfs>/class/infiniband/<dev>/ports/<n>   state, link_layer (InfiniBand -> ib, Ethernet ->
//                                              roce), rate ("200 Gb/sec (4X HDR)"), gids/0
//   <sysfs>/class/net/<if>                     speed (Mb/s; -1 or unreadable on virtual NICs),
//                                              mtu, operstate; lo is skipped
//   <dev>/device                               PCI bus id (the link's target) and numa_node
//   hwloc                                      the same locality for the real system, where sysfs
//                                              has none (finding nothing is fine)
//   getifaddrs                                 addresses (real system only)
//   <procfs>/driver/nvidia/gpus/*              GPU count and model (0 without the driver)
//
// Rates and latencies of the link classes created ("discovered-ib-200") come from the port's
// rate and typical per-fabric latencies; nothing is measured on the wire here.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "topology/topology.hpp"

namespace holmes::topology {

// One port of an RDMA device.
struct RdmaPort {
  std::string device;  // mlx5_0
  int port = 0;        // 1-based, as the kernel numbers them
  std::string state;   // "ACTIVE", "DOWN", ... (the text after "4: ")
  bool active = false;
  Fabric fabric = Fabric::kIb;  // link_layer InfiniBand -> ib, Ethernet -> roce
  double gbit_per_s = 0;        // 0 when the rate is unreadable
  std::string subnet;           // first 64 bits of GID 0: "fe80:0000:0000:0000"
};

// Every port under <sysfs_root>/class/infiniband, sorted by device then port.
std::vector<RdmaPort> read_rdma_ports(const std::string& sysfs_root);

// "200 Gb/sec (4X HDR)" -> 200; 0 when the text does not start with a rate.
double parse_rdma_rate(const std::string& text);

struct DiscoveryOptions {
  std::string sysfs_root = "/sys";
  std::string procfs_root = "/proc";
  std::string host_name;  // empty: the hostname (holmes-topo passes HOLMES_HOST here)
  // hwloc and getifaddrs see the real system only: by default they run when sysfs_root is
  // "/sys", never for a fake tree.
  std::optional<bool> use_hwloc;
  std::optional<bool> read_addresses;
};

struct Discovery {
  // name, gpus, gpu_model, nics (RDMA ports first, then ethernet NICs); island = island hint.
  Host host;
  // The classes host.nics name: "discovered-<fabric>-<Gbit/s>", or "...-unknown" with
  // gbit_per_s 0 when the NIC does not report its speed (virtual NICs).
  std::map<std::string, LinkClass> link_classes;
  // The island hint, as Locality builds it: the best active RDMA fabric (ib before roce) and
  // its subnet prefix, island "<fabric>:<subnet>"; ethernet when no RDMA port is active, and
  // then the host is its own island.
  Fabric fabric = Fabric::kEthernet;
  std::string subnet;
  std::map<std::string, std::vector<std::string>> addresses;  // NIC -> "10.0.0.5/24", ...
  std::vector<std::string> notes;                             // what is missing or odd, in words
};

Discovery discover_host(const DiscoveryOptions& options = {});

}  // namespace holmes::topology
