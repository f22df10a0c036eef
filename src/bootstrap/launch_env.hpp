// Where a rank learns who it is: Holmes's own variables, or those of the launcher that started
// it (torchrun, Slurm, Open MPI), so ranks started by any of them need nothing else.
//
//   rank        HOLMES_RANK, RANK (torchrun), SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK
//   world size  HOLMES_WORLD_SIZE, WORLD_SIZE, SLURM_NTASKS, OMPI_COMM_WORLD_SIZE, PMI_SIZE
//   local rank  HOLMES_LOCAL_RANK, LOCAL_RANK, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK
//   store       HOLMES_STORE=host:port, else MASTER_ADDR + MASTER_PORT (torchrun)
//   token       HOLMES_TOKEN          topology  HOLMES_TOPOLOGY
//   serve       HOLMES_STORE_SERVE=0|1 (default: rank 0 serves the store)
//   timeout     HOLMES_TIMEOUT_MS     sockets   HOLMES_SOCKETS     address  HOLMES_ADDR
// The first variable set in each list wins; each value says which variable it came from. The
// variables are those of the settings registry (core/setting_registry.hpp), which reads them.
#pragma once

#include <optional>
#include <string>

#include "core/parse.hpp"

namespace holmes {

struct LaunchEnv {
  std::optional<int> rank;
  std::string rank_source;  // e.g. "SLURM_PROCID"
  std::optional<int> world_size;
  std::string world_size_source;
  std::optional<int> local_rank;
  std::optional<HostPort> store;
  std::string store_source;
  std::optional<std::string> token;
  std::optional<std::string> topology;
  std::optional<bool> serve_store;
  std::optional<int> timeout_ms;
  std::optional<int> sockets_per_peer;
  std::optional<std::string> local_addr;
  std::optional<int> chunk_bytes;
};

// Reads the environment; malformed values throw HM_ERR_INVALID_ARGUMENT naming the variable.
LaunchEnv read_launch_env();

}  // namespace holmes
