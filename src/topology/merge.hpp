// Merging a topology file with what one host discovered about itself, and the environment
// overrides a rank can state (HOLMES_HOST, HOLMES_ISLAND, HOLMES_FABRIC).
//
// Precedence: environment > file > discovery. The file describes the whole cluster and wins on
// every field it declares; discovery only fills in what the file leaves open (NIC state, subnet,
// PCI bus, NUMA node, MTU, an undeclared GPU model) and every disagreement becomes a Conflict so
// a person can fix the file or the machine. The environment then places this host: it names the
// host (HOLMES_HOST), moves it to another island (HOLMES_ISLAND) or states its fabric
// (HOLMES_FABRIC); this is how ranks in network namespaces describe an emulated cluster.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "topology/discovery.hpp"
#include "topology/locality.hpp"
#include "topology/topology.hpp"

namespace holmes::topology {

// One field on which the file and discovery disagree (the file's value is the one used).
struct Conflict {
  std::string host;
  std::string field;             // "host", "gpus", "gpu_model", "nic mlx5_0", "nic mlx5_0 rate"
  std::string file_value;        // "(absent)" when the file does not declare it
  std::string discovered_value;  // "(absent)" when discovery did not find it

  // "host 'ib-0': gpus: the file says 8, discovery found 4 (the file's value is used)"
  std::string message() const;
};

// The overrides for this host (topology/locality.hpp); empty fields change nothing.
using holmes::LocalOverrides;

struct MergeResult {
  Topology topology;                   // validated
  std::string host;                    // this host's name after HOLMES_HOST
  bool host_in_topology = false;       // false: the file does not list this host
  std::vector<Conflict> conflicts;     // file vs discovery, in host/NIC order
  std::vector<std::string> overrides;  // what the environment changed, in words
};

// Merges `file` with `discovered` (this host) and applies `overrides`. An island named by
// HOLMES_ISLAND that the file lacks is created with HOLMES_FABRIC's fabric (or the host's
// current one) and the file's first link class of that fabric; an island the file declares
// with another fabric than HOLMES_FABRIC is HM_ERR_INVALID_ARGUMENT (an island has one fabric).
MergeResult merge_discovery(const Topology& file, const Discovery& discovered,
                            const LocalOverrides& overrides = {});

// The locality of `host` as the topology declares it: its island and that island's fabric.
// HM_ERR_INVALID_ARGUMENT when the topology has no such host.
Locality locality_in_topology(const Topology& topology, const std::string& host);

// This rank's locality in a job started with a topology file (HOLMES_TOPOLOGY), or without one
// (nullopt): a host the file lists (by overrides.host, else the hostname) takes its island and
// fabric from the file, and overrides.island / fabric still override them; a host the file
// lacks, or no file, is placed by discovery and the environment (local_locality). `note`, when
// given, says which happened. A malformed file is HM_ERR_INVALID_ARGUMENT with line:column.
Locality rank_locality(const std::optional<std::string>& topology_file,
                       const LocalOverrides& overrides, std::string* note = nullptr);

}  // namespace holmes::topology
