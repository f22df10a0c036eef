#include "communicator/config.hpp"

#include <fstream>

#include "bootstrap/launch_env.hpp"
#include "core/env.hpp"
#include "core/status.hpp"

namespace holmes::detail {

ResolvedConfig resolve_config(const Config& config) {
  const LaunchEnv env = read_launch_env();
  ResolvedConfig out;

  if (config.world_size) {
    require(*config.world_size >= 1, "world size {} must be at least 1", *config.world_size);
    out.world_size = *config.world_size;
  } else if (env.world_size) {
    out.world_size = *env.world_size;
  } else {
    fail(HM_ERR_INVALID_ARGUMENT,
         "world size unknown: set HOLMES_WORLD_SIZE (or WORLD_SIZE, SLURM_NTASKS, "
         "OMPI_COMM_WORLD_SIZE), or the world_size field of the config");
  }
  if (config.rank) {
    out.rank = *config.rank;
  } else if (env.rank) {
    out.rank = *env.rank;
  } else {
    fail(HM_ERR_INVALID_ARGUMENT,
         "rank unknown: set HOLMES_RANK (or RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK), or the "
         "rank field of the config");
  }
  require(out.rank >= 0 && out.rank < out.world_size,
          "rank {} is outside [0, {}) (rank from {}, "
          "world size from {})",
          out.rank, out.world_size, config.rank ? "config" : env.rank_source,
          config.world_size ? "config" : env.world_size_source);

  out.kv_store = config.kv_store;
  // With a brought store, `store` is not dialed: its host only picks this rank's address.
  if (config.store) {
    out.store = parse_host_port(*config.store, "store address in config");
  } else if (env.store) {
    out.store = *env.store;
  } else if (!out.kv_store) {
    fail(HM_ERR_INVALID_ARGUMENT,
         "rendezvous store unknown: set HOLMES_STORE=host:port (or MASTER_ADDR and "
         "MASTER_PORT), or the store field of the config");
  }
  out.token = config.token.value_or(env.token.value_or(""));
  out.topology = config.topology ? config.topology : env.topology;
  if (out.topology) {
    std::ifstream probe(*out.topology);
    require(probe.good(), "topology file '{}' (HOLMES_TOPOLOGY) cannot be read", *out.topology);
  }
  // With a brought store there is no Holmes store to serve.
  out.serve_store =
      !out.kv_store && config.serve_store.value_or(env.serve_store.value_or(out.rank == 0));
  if (config.timeout) {
    require(config.timeout->count() > 0, "timeout must be positive, got {} ms",
            config.timeout->count());
    out.timeout = *config.timeout;
  } else if (env.timeout_ms) {
    out.timeout = std::chrono::milliseconds(*env.timeout_ms);
  }
  if (config.sockets_per_peer) {
    require(*config.sockets_per_peer >= 1 && *config.sockets_per_peer <= 16,
            "sockets per peer must be in [1, 16], got {}", *config.sockets_per_peer);
    out.sockets_per_peer = *config.sockets_per_peer;
  } else if (env.sockets_per_peer) {
    out.sockets_per_peer = *env.sockets_per_peer;
  }
  out.local_addr = config.local_addr ? config.local_addr : env.local_addr;
  if (const auto checksum = env_string("HOLMES_CHECKSUM")) {
    require(*checksum == "0" || *checksum == "1",
            "HOLMES_CHECKSUM is '{}': expected 1 (CRC32C on every tcp fragment) or 0", *checksum);
    out.checksum = *checksum == "1";
  }
  if (const auto fused = env_int("HOLMES_TCP_FUSED_REDUCE", 0, 1))
    out.tcp_fused_reduce = *fused == 1;
  if (const auto congestion = env_string("HOLMES_TCP_CONGESTION")) out.tcp_congestion = *congestion;
  if (env.chunk_bytes) out.chunk_bytes = static_cast<std::size_t>(*env.chunk_bytes);
  return out;
}

}  // namespace holmes::detail
