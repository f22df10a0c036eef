// The topology of a running job, for planning it: one host per distinct host among the ranks
// (in order of each host's first rank), as many GPUs as it runs ranks, islands as the ranks'
// localities say (which already reflect HOLMES_TOPOLOGY, discovery and HOLMES_HOST/ISLAND/
// FABRIC). Link classes, GPU models and NICs come from the topology file when there is one (its
// hosts matched by name); otherwise from nominal defaults per fabric, stated in the notes. A file
// with an emulation scale gives link classes at 1/scale of its rates (what the emulating job's
// links carry) and the job topology's own emulation_scale is then 1.
#pragma once

#include <string>
#include <vector>

#include "planner/placement.hpp"
#include "topology/locality.hpp"
#include "topology/topology.hpp"

namespace holmes::planner {

struct JobTopology {
  topology::Topology topology;
  JobLayout layout{std::vector<int>{}};
  std::vector<std::string> notes;  // defaults used, file entries that differ from the job
};

// `file` may be null. Throws HM_ERR_INVALID_ARGUMENT for an empty job or an island whose ranks
// disagree on its fabric.
JobTopology job_topology(const std::vector<Locality>& ranks, const topology::Topology* file);

}  // namespace holmes::planner
