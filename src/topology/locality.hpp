// Where a rank sits: its host, its island (the hosts that share one RDMA fabric) and that
// fabric. The communicator compares two ranks' localities to pick the transport between them.
//
// Each field comes from the rank's overrides when given (the settings HOLMES_HOST, HOLMES_ISLAND,
// HOLMES_FABRIC: how ranks in network namespaces describe an emulated cluster), else from
// discovery:
//   host    the machine's hostname plus its boot id, so ranks of one OS instance agree and two
//           machines with the same hostname do not
//   fabric  "ib" or "roce" when an RDMA port is active (/sys/class/infiniband), else "ethernet"
//   island  for RDMA fabrics the fabric plus its subnet (IB subnet prefix from the port's GID);
//           for ethernet the host itself (no RDMA reaches beyond it)
// The topology file and probes of issue 5 refine this; the fields and their meaning stay.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/settings.hpp"

namespace holmes {

struct Locality {
  std::string host;
  std::string island;
  std::string fabric;  // "ib", "roce" or "ethernet"
  // The operating system the rank runs in (hostname and boot id, whatever the overrides say:
  // emulated hosts of one machine share it) and the CPUs it may run on (its affinity), so the
  // cost model can tell how many ranks share each core. Empty where unknown.
  std::string machine{};
  std::vector<int> cpus{};

  bool rdma() const { return fabric == "ib" || fabric == "roce"; }
};

// The most ranks per core on any machine of `localities`: the ranks of a machine over the CPUs
// any of them may run on, at least 1 (also where the CPUs are unknown). Above 1, ranks wait for
// a core for every byte they move or reduce.
double ranks_per_core(const std::vector<Locality>& localities);

// What a rank states about where it sits; empty fields change nothing.
struct LocalOverrides {
  std::optional<std::string> host;    // HOLMES_HOST
  std::optional<std::string> island;  // HOLMES_ISLAND
  std::optional<std::string> fabric;  // HOLMES_FABRIC: ib, roce or ethernet

  // The three settings; an unknown HOLMES_FABRIC is HM_ERR_INVALID_ARGUMENT naming it.
  static LocalOverrides from_settings(const Settings& settings);
};

// The operating system this process runs in: its hostname and boot id (Locality::machine).
std::string machine_id();

// This process's locality. Throws HM_ERR_INVALID_ARGUMENT for an unknown fabric.
Locality local_locality(const LocalOverrides& overrides);

// Discovery only (no environment), from a sysfs root (tests pass a fake tree).
struct DiscoveredFabric {
  std::string fabric;  // "ib", "roce" or "ethernet"
  std::string subnet;  // IB subnet prefix or RoCE GID prefix; empty for ethernet
};
DiscoveredFabric discover_fabric(const std::string& sysfs_root = "/sys");

}  // namespace holmes
