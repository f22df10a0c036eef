#include "bootstrap/launch_env.hpp"

#include <climits>
#include <initializer_list>

#include "core/status.hpp"

namespace holmes {
namespace {

// The first of `names` that is set, as an integer in [min, max], and which one it was.
std::optional<int> first_int(std::initializer_list<const char*> names, int min, int max,
                             std::string& source) {
  for (const char* name : names) {
    if (auto value = env_int(name, min, max)) {
      source = name;
      return static_cast<int>(*value);
    }
  }
  return std::nullopt;
}

}  // namespace

LaunchEnv read_launch_env() {
  LaunchEnv env;
  env.rank = first_int({"HOLMES_RANK", "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"},
                       0, INT_MAX - 1, env.rank_source);
  env.world_size = first_int(
      {"HOLMES_WORLD_SIZE", "WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1,
      INT_MAX, env.world_size_source);
  std::string ignored;
  env.local_rank =
      first_int({"HOLMES_LOCAL_RANK", "LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"},
                0, INT_MAX - 1, ignored);

  if (auto store = env_string("HOLMES_STORE")) {
    env.store = parse_host_port(*store, "HOLMES_STORE");
    env.store_source = "HOLMES_STORE";
  } else {
    auto addr = env_string("MASTER_ADDR");
    auto port = env_int("MASTER_PORT", 1, 65535);
    if (addr && port) {
      env.store = HostPort{*addr, static_cast<std::uint16_t>(*port)};
      env.store_source = "MASTER_ADDR/MASTER_PORT";
    } else if (addr || port) {
      fail(HM_ERR_INVALID_ARGUMENT, "{} is set but {} is not: torchrun sets both",
           addr ? "MASTER_ADDR" : "MASTER_PORT", addr ? "MASTER_PORT" : "MASTER_ADDR");
    }
  }
  env.token = env_string("HOLMES_TOKEN");
  env.topology = env_string("HOLMES_TOPOLOGY");
  if (auto serve = env_int("HOLMES_STORE_SERVE", 0, 1)) env.serve_store = *serve == 1;
  if (auto t = env_int("HOLMES_TIMEOUT_MS", 1, INT_MAX)) env.timeout_ms = static_cast<int>(*t);
  if (auto s = env_int("HOLMES_SOCKETS", 1, 16)) env.sockets_per_peer = static_cast<int>(*s);
  env.local_addr = env_string("HOLMES_ADDR");
  if (auto c = env_int("HOLMES_CHUNK_BYTES", 4096, 64 << 20))
    env.chunk_bytes = static_cast<int>(*c);
  return env;
}

}  // namespace holmes
