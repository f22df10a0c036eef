// Topology files: a YAML description of the cluster (link classes, islands, hosts, GPUs, NICs)
// that declares what discovery cannot see from one host, or overrides it. docs/topology.md has
// the full reference; examples/topologies/ has files for the paper's setups.
//
//   name: paper-gpt-7.5b            # optional label
//   emulation_scale: 1              # optional, >= 1: emulation divides every rate by it
//   link_classes:                   # required: name -> {fabric, gbit_per_s, latency_us}
//     nvlink:   {fabric: nvlink,   gbit_per_s: 2400, latency_us: 1}
//     ib-hdr:   {fabric: ib,       gbit_per_s: 200,  latency_us: 2}
//     eth-25:   {fabric: ethernet, gbit_per_s: 25,   latency_us: 30}
//   intra_host_link: nvlink         # default: the class named "nvlink" when declared
//   inter_island_link: eth-25       # an ethernet class; required with more than one island or
//                                   # with an ethernet island, else the island's own class
//   islands:                        # required list, in order; hosts nest in their island
//     - name: ib
//       fabric: ib                  # ib | roce | ethernet
//       link_class: ib-hdr          # required unless fabric is ethernet; same fabric
//       hosts:                      # required, non-empty list
//         - {name: ib-0, gpus: 8, gpu_model: A100,
//            nics: [{name: mlx5_0, link_class: ib-hdr}, {name: mlx5_1}]}
//         - {name_prefix: ib-, first: 1, count: 3, width: 0, gpus: 8,      # ib-1 ib-2 ib-3
//            nics: {count: 4, name_prefix: mlx5_, first: 0, link_class: ib-hdr}}  # mlx5_0..3
//
// Rules: keys are checked (an unknown key, e.g. a typo, is an error that suggests the nearest
// known one); rates are positive, latencies not negative; host and island names are unique;
// every link class named must be declared; a NIC's link_class defaults to its island's (the
// inter-island class for an ethernet island). `width` zero-pads range numbers (width 3: ib-001).
// Hosts appear in Topology::hosts in file order, island by island.
//
// Every error is HM_ERR_INVALID_ARGUMENT with "source:line:column: what was wrong" (1-based).
#pragma once

#include <string>
#include <string_view>

#include "topology/topology.hpp"

namespace holmes::topology {

// Parses a topology file's text; `source_name` (a path, "<env>", ...) prefixes every error.
// The result has passed Topology::validate().
Topology parse_topology_yaml(std::string_view text, std::string_view source_name);

// Reads and parses a file; a file that cannot be read is HM_ERR_INVALID_ARGUMENT naming it.
Topology load_topology_file(const std::string& path);

}  // namespace holmes::topology
