#include "bootstrap/launch_env.hpp"

#include "core/settings.hpp"
#include "core/status.hpp"

namespace holmes {

LaunchEnv read_launch_env() {
  // The registry reads each variable (and the launchers' aliases) in order; here they are only
  // typed, each value naming the variable it came from.
  const Settings settings = Settings::from_environment();
  LaunchEnv env;
  const auto as_int = [&](Setting id) -> std::optional<int> {
    if (auto v = settings.integer_if_given(id)) return static_cast<int>(*v);
    return std::nullopt;
  };
  const auto origin = [&](Setting id) {
    return settings.given(id) ? settings.value(id).origin : std::string();
  };
  env.rank = as_int(Setting::kRank);
  env.rank_source = origin(Setting::kRank);
  env.world_size = as_int(Setting::kWorldSize);
  env.world_size_source = origin(Setting::kWorldSize);
  env.local_rank = as_int(Setting::kLocalRank);
  env.store = settings.address_if_given(Setting::kStore);
  env.store_source = origin(Setting::kStore);
  env.token = settings.text_if_given(Setting::kToken);
  env.topology = settings.text_if_given(Setting::kTopology);
  env.serve_store = settings.flag_if_given(Setting::kStoreServe);
  env.timeout_ms = as_int(Setting::kTimeoutMs);
  env.sockets_per_peer = as_int(Setting::kSockets);
  env.local_addr = settings.text_if_given(Setting::kAddr);
  env.chunk_bytes = as_int(Setting::kChunkBytes);
  return env;
}

}  // namespace holmes
