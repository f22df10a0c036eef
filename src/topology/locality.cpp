#include "topology/locality.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/env.hpp"
#include "core/status.hpp"

namespace holmes {
namespace {

std::string read_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

std::string machine_id() {
  char name[256] = {0};
  ::gethostname(name, sizeof(name) - 1);
  // The boot id tells apart two machines (or VMs) that share a hostname; ranks of one OS
  // instance, including ones in different network namespaces, read the same value.
  const std::string boot = read_line("/proc/sys/kernel/random/boot_id");
  return boot.empty() ? std::string(name) : std::string(name) + "/" + boot.substr(0, 8);
}

}  // namespace

// discover_fabric lives in discovery.cpp, next to the rest of the sysfs reading.

Locality local_locality() {
  Locality out;
  out.host = env_string("HOLMES_HOST").value_or(machine_id());
  const auto fabric_env = env_string("HOLMES_FABRIC");
  DiscoveredFabric discovered;
  if (fabric_env) {
    require(*fabric_env == "ib" || *fabric_env == "roce" || *fabric_env == "ethernet",
            "HOLMES_FABRIC is '{}': expected ib, roce or ethernet", *fabric_env);
    discovered.fabric = *fabric_env;
  } else {
    discovered = discover_fabric();
  }
  out.fabric = discovered.fabric;
  if (auto island = env_string("HOLMES_ISLAND")) {
    out.island = *island;
  } else if (out.rdma()) {
    out.island = out.fabric + ":" + discovered.subnet;
  } else {
    out.island = out.host;
  }
  return out;
}

}  // namespace holmes
