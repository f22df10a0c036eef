// Everything a world communicator needs to start, resolved from (in order of precedence) the
// caller's Config, the environment (bootstrap/launch_env.hpp) and the defaults. Errors name the
// setting that is missing or wrong and where it could come from.
#pragma once

#include <holmes/holmes.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "core/env.hpp"

namespace holmes::detail {

constexpr int kDefaultTimeoutMs = 300000;
constexpr int kDefaultSocketsPerPeer = 2;
constexpr std::size_t kDefaultChunkBytes = 512u << 10;

struct ResolvedConfig {
  int rank = 0;
  int world_size = 1;
  HostPort store;  // with kv_store not dialed: its host (if any) picks the listen address
  std::shared_ptr<KeyValueStore> kv_store;  // a store the caller brought, else null
  std::string token;
  std::optional<std::string> topology;
  bool serve_store = false;
  std::chrono::milliseconds timeout{kDefaultTimeoutMs};
  int sockets_per_peer = kDefaultSocketsPerPeer;
  bool checksum = false;         // HOLMES_CHECKSUM=1: CRC32C on every tcp fragment
  bool tcp_fused_reduce = true;  // HOLMES_TCP_FUSED_REDUCE=0: tcp refuses combining receives
  std::string tcp_congestion;    // HOLMES_TCP_CONGESTION; checked by the tcp transport
  std::optional<std::string> local_addr;
  std::size_t chunk_bytes = kDefaultChunkBytes;
};

ResolvedConfig resolve_config(const Config& config);

}  // namespace holmes::detail
