// The topology: hosts, their GPUs and NICs, the islands they form and the link classes between
// them. It is loaded from a file (topology_file.hpp), discovered on a host (discovery.hpp), or
// both merged (merge.hpp); the planner (src/planner) reads it and never the wire.
//
// Ranks of a job are laid out host by host in `hosts` order, `gpus` ranks per host: rank r of a
// planned job is GPU (r - first rank of its host) of its host. The file's order is the order a
// launcher would start ranks in (the naive placement keeps it; the planner reorders groups).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace holmes::topology {

// The kind of network a link or NIC belongs to. IB and RoCE cannot exchange RDMA traffic, so
// islands of different fabrics talk over ethernet.
enum class Fabric { kEthernet, kIb, kRoce, kNvlink };

const char* fabric_name(Fabric fabric);  // "ethernet", "ib", "roce", "nvlink"
// Parses a fabric name; false when it is none of the above.
bool parse_fabric(const std::string& name, Fabric* out);

// Speed of one kind of link, per NIC (or per GPU for nvlink), in one direction.
struct LinkClass {
  std::string name;
  Fabric fabric = Fabric::kEthernet;
  double gbit_per_s = 0;  // bandwidth, Gbit/s (decimal)
  double latency_us = 0;  // one-way per-message latency

  double bytes_per_s() const { return gbit_per_s * 1e9 / 8; }
};

struct Nic {
  std::string name;        // mlx5_0, eth0, ...
  std::string link_class;  // a key of Topology::link_classes
  // What discovery saw (empty / -1 when the file declares the NIC without these).
  std::string state;    // "ACTIVE", "up", "down" ...
  std::string subnet;   // IB subnet prefix, RoCE GID prefix or IPv4 CIDR
  std::string pci_bus;  // 0000:3b:00.0
  int numa_node = -1;
  int mtu = 0;
};

struct Host {
  std::string name;
  std::string island;     // a key of Topology::islands; every host belongs to exactly one island
  int gpus = 0;           // GPUs on the host = ranks the host runs
  std::string gpu_model;  // "A100", "H100", "H200", "cpu" ... (empty: unknown)
  std::vector<Nic> nics;
};

struct Island {
  std::string name;
  Fabric fabric = Fabric::kEthernet;  // ethernet: an island of hosts reachable only over TCP
  std::string
      link_class;  // the link inside the island: RDMA, or for ethernet islands an optional LAN
  std::vector<std::string> hosts;  // in Topology::hosts order
};

struct Topology {
  std::string name;  // optional label from the file ("paper-gpt-7.5b"); empty when discovered
  std::map<std::string, LinkClass> link_classes;
  std::string intra_host_link;    // link class between GPUs of one host (nvlink or shm)
  std::string inter_island_link;  // link class of the ethernet that joins islands (per host)
  std::map<std::string, Island> islands;
  std::vector<Host> hosts;
  // Emulation: rates of every link class are divided by this to run a scaled-down copy of the
  // cluster on one machine (shaping transport, namespaces). 1 = real rates.
  double emulation_scale = 1.0;

  int total_gpus() const;
  const Host* find_host(const std::string& name) const;        // nullptr when absent
  const LinkClass& link_class(const std::string& name) const;  // throws when absent

  // The link class GPUs on hosts `a` and `b` talk over: intra_host_link when a == b, the
  // island's RDMA link class when they share an island, else inter_island_link.
  const LinkClass& link_between(const Host& a, const Host& b) const;

  // Aggregate bandwidth (bytes/s) of a host's NICs of one link class (NICs declared with that
  // class); the island's bandwidth per host. At least one NIC's worth when none is declared.
  double host_bandwidth(const Host& host, const std::string& link_class) const;

  // Checks internal consistency (islands name existing hosts, every host in one island, link
  // classes exist, positive rates); throws HM_ERR_INVALID_ARGUMENT naming the host and field.
  void validate() const;
};

}  // namespace holmes::topology
