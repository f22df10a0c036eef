// Everything a world communicator needs to start, resolved from (in order of precedence) the
// caller's Config (its fields, then its settings by name), the environment (the registered
// variables and the launchers' own, core/setting_registry.hpp) and the defaults. Errors name the
// setting that is missing or wrong and where it could come from.
#pragma once

#include <holmes/holmes.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "core/parse.hpp"
#include "core/settings.hpp"

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
  // Every setting in effect, with its source: the layers below take their slices from it.
  Settings settings;
};

// The settings `config` runs with: the environment, overridden by the config's settings and
// fields (source hm_config_t). Throws HM_ERR_INVALID_ARGUMENT for a config value of the wrong
// type or range, naming it; values from the environment are checked when they are used.
Settings configured_settings(const Config& config);

ResolvedConfig resolve_config(const Config& config);

// The settings that act on the whole process, applied when a communicator is configured: the
// reduction kernels and the log level given through the config; checks HOLMES_REDUCE_ISA
// either way. Throws naming a bad value.
void apply_process_settings(const Settings& settings);

}  // namespace holmes::detail
