#include "topology/locality.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/status.hpp"
#include "core/thread_affinity.hpp"

namespace holmes {
namespace {

std::string read_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

}  // namespace

std::string machine_id() {
  char name[256] = {0};
  ::gethostname(name, sizeof(name) - 1);
  // The boot id tells apart two machines (or VMs) that share a hostname; ranks of one OS
  // instance, including ones in different network namespaces, read the same value.
  const std::string boot = read_line("/proc/sys/kernel/random/boot_id");
  return boot.empty() ? std::string(name) : std::string(name) + "/" + boot.substr(0, 8);
}

double ranks_per_core(const std::vector<Locality>& localities) {
  struct Machine {
    int ranks = 0;
    std::set<int> cpus;
    bool known = true;
  };
  std::map<std::string, Machine> machines;
  for (const auto& l : localities) {
    if (l.machine.empty()) return 1;
    auto& m = machines[l.machine];
    ++m.ranks;
    m.known = m.known && !l.cpus.empty();
    m.cpus.insert(l.cpus.begin(), l.cpus.end());
  }
  double most = 1;
  for (const auto& [name, m] : machines) {
    if (m.known) most = std::max(most, static_cast<double>(m.ranks) / m.cpus.size());
  }
  return most;
}

// discover_fabric lives in discovery.cpp, next to the rest of the sysfs reading.

LocalOverrides LocalOverrides::from_settings(const Settings& settings) {
  LocalOverrides out;
  out.host = settings.text_if_given(Setting::kHost);
  out.island = settings.text_if_given(Setting::kIsland);
  out.fabric = settings.text_if_given(Setting::kFabric);  // checked: ib, roce or ethernet
  return out;
}

Locality local_locality(const LocalOverrides& overrides) {
  Locality out;
  out.machine = machine_id();
  out.cpus = thread_cpus();  // the CPUs this rank may run on
  out.host = overrides.host.value_or(out.machine);
  const auto& fabric = overrides.fabric;
  DiscoveredFabric discovered;
  if (fabric) {
    require(*fabric == "ib" || *fabric == "roce" || *fabric == "ethernet",
            "HOLMES_FABRIC is '{}': expected ib, roce or ethernet", *fabric);
    discovered.fabric = *fabric;
  } else {
    discovered = discover_fabric();
  }
  out.fabric = discovered.fabric;
  if (overrides.island) {
    out.island = *overrides.island;
  } else if (out.rdma()) {
    out.island = out.fabric + ":" + discovered.subnet;
  } else {
    out.island = out.host;
  }
  return out;
}

}  // namespace holmes
