#include "communicator/config.hpp"

#include <fstream>

#include "core/log.hpp"
#include "core/reduce_isa.hpp"
#include "core/status.hpp"

namespace holmes::detail {
namespace {

// Where a value came from, as the errors of resolve_config say it: "config", or the variable.
std::string source_of(const Settings& settings, Setting id) {
  const auto& v = settings.value(id);
  return v.source == SettingSource::kConfig ? "config" : v.origin;
}

}  // namespace

Settings configured_settings(const Config& config) {
  Settings settings = Settings::from_environment();
  for (const auto& [name, value] : config.settings) {
    settings.set(name, value, SettingSource::kConfig);
  }
  // The config's fields are settings too; they win over the same setting given by name.
  const auto set = [&](Setting id, const std::string& text) {
    settings.set(id, text, SettingSource::kConfig);
  };
  if (config.world_size) {
    require(*config.world_size >= 1, "world size {} must be at least 1", *config.world_size);
    set(Setting::kWorldSize, std::to_string(*config.world_size));
  }
  if (config.rank) {
    require(*config.rank >= 0, "rank {} is negative", *config.rank);
    set(Setting::kRank, std::to_string(*config.rank));
  }
  if (config.store) set(Setting::kStore, *config.store);
  if (config.token) set(Setting::kToken, *config.token);
  if (config.topology) set(Setting::kTopology, *config.topology);
  if (config.serve_store) set(Setting::kStoreServe, *config.serve_store ? "1" : "0");
  if (config.timeout) {
    require(config.timeout->count() > 0, "timeout must be positive, got {} ms",
            config.timeout->count());
    set(Setting::kTimeoutMs, std::to_string(config.timeout->count()));
  }
  if (config.sockets_per_peer) {
    require(*config.sockets_per_peer >= 1 && *config.sockets_per_peer <= 16,
            "sockets per peer must be in [1, 16], got {}", *config.sockets_per_peer);
    set(Setting::kSockets, std::to_string(*config.sockets_per_peer));
  }
  if (config.local_addr) set(Setting::kAddr, *config.local_addr);
  return settings;
}

ResolvedConfig resolve_config(const Config& config) {
  ResolvedConfig out;
  out.settings = configured_settings(config);
  const Settings& s = out.settings;

  const auto world_size = s.integer_if_given(Setting::kWorldSize);
  const auto rank = s.integer_if_given(Setting::kRank);
  const auto store = s.address_if_given(Setting::kStore);
  if (!world_size) {
    fail(HM_ERR_INVALID_ARGUMENT,
         "world size unknown: set HOLMES_WORLD_SIZE (or WORLD_SIZE, SLURM_NTASKS, "
         "OMPI_COMM_WORLD_SIZE), or the world_size field of the config");
  }
  out.world_size = static_cast<int>(*world_size);
  if (!rank) {
    fail(HM_ERR_INVALID_ARGUMENT,
         "rank unknown: set HOLMES_RANK (or RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK), or the "
         "rank field of the config");
  }
  out.rank = static_cast<int>(*rank);
  require(out.rank < out.world_size,
          "rank {} is outside [0, {}) (rank from {}, "
          "world size from {})",
          out.rank, out.world_size, source_of(s, Setting::kRank),
          source_of(s, Setting::kWorldSize));
  out.kv_store = config.kv_store;
  // With a brought store, `store` is not dialed: its host only picks this rank's address.
  if (store) {
    out.store = *store;
  } else if (!out.kv_store) {
    fail(HM_ERR_INVALID_ARGUMENT,
         "rendezvous store unknown: set HOLMES_STORE=host:port (or MASTER_ADDR and "
         "MASTER_PORT), or the store field of the config");
  }
  out.token = s.text_if_given(Setting::kToken).value_or("");
  out.topology = s.text_if_given(Setting::kTopology);
  if (out.topology) {
    std::ifstream probe(*out.topology);
    require(probe.good(), "topology file '{}' (HOLMES_TOPOLOGY) cannot be read", *out.topology);
  }
  // With a brought store there is no Holmes store to serve.
  out.serve_store = !out.kv_store && s.flag_if_given(Setting::kStoreServe).value_or(out.rank == 0);
  out.timeout = std::chrono::milliseconds(s.integer(Setting::kTimeoutMs));
  out.sockets_per_peer = static_cast<int>(s.integer(Setting::kSockets));
  out.local_addr = s.text_if_given(Setting::kAddr);
  out.checksum = s.flag(Setting::kChecksum);
  out.tcp_fused_reduce = s.flag(Setting::kTcpFusedReduce);
  out.tcp_congestion = s.text_if_given(Setting::kTcpCongestion).value_or("");
  out.chunk_bytes = static_cast<std::size_t>(s.integer(Setting::kChunkBytes));
  return out;
}

void apply_process_settings(const Settings& settings) {
  const auto isa = settings.text_if_given(Setting::kReduceIsa);
  if (settings.value(Setting::kReduceIsa).source == SettingSource::kConfig) {
    use_reduce_isa(choose_reduce_isa(std::optional<std::string_view>(*isa),
                                     reduce_isa_supported(ReduceIsa::kAvx2)));
  } else {
    reduce_isa();  // the environment's choice, decided once: a bad value fails here
  }
  if (settings.value(Setting::kLogLevel).source == SettingSource::kConfig) {
    logger().set_level(spdlog::level::from_str(settings.text(Setting::kLogLevel)));
  }
}

}  // namespace holmes::detail
