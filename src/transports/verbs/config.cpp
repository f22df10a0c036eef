#include "transports/verbs/config.hpp"

#include "bootstrap/launch_env.hpp"
#include "core/env.hpp"
#include "core/status.hpp"
#include "transports/verbs/credit_window.hpp"
#include "transports/verbs/qp_info.hpp"
#include "transports/verbs/wire.hpp"

namespace holmes::verbs {

VerbsConfig read_verbs_config() {
  VerbsConfig config;
  if (auto v = env_int("HOLMES_IB_SLOTS", 4, kMaxSlots)) {
    config.data_slots = static_cast<std::uint32_t>(*v);
  }
  if (auto v = env_int("HOLMES_IB_SLOT_BYTES", 1024, kMaxSlotBytes)) {
    config.slot_bytes = static_cast<std::uint32_t>(*v);
  }
  if (auto v = env_int("HOLMES_IB_SL", 0, 15)) config.service_level = static_cast<std::uint8_t>(*v);
  if (auto v = env_int("HOLMES_IB_TC", 0, 255))
    config.traffic_class = static_cast<std::uint8_t>(*v);
  if (auto v = env_int("HOLMES_IB_TIMEOUT", 1, 31))
    config.ack_timeout = static_cast<std::uint8_t>(*v);
  if (auto v = env_int("HOLMES_IB_RETRY_CNT", 1, 7)) {
    config.retry_count = static_cast<std::uint8_t>(*v);
  }
  return config;
}

const VerbsConfig& checked_verbs_config(const VerbsConfig& config) {
  require(config.data_slots >= CreditWindow::kMinSlots && config.data_slots <= kMaxSlots &&
              config.control_slots >= CreditWindow::kMinSlots && config.control_slots <= kMaxSlots,
          "verbs: slots per queue pair must be in [{}, {}]", CreditWindow::kMinSlots, kMaxSlots);
  require(config.slot_bytes > kWireHeaderBytes && config.slot_bytes >= kMinSlotBytes &&
              config.slot_bytes <= kMaxSlotBytes,
          "verbs: slot bytes must be in [{}, {}], got {}", kMinSlotBytes, kMaxSlotBytes,
          config.slot_bytes);
  return config;
}

PortPreferences read_port_preferences() {
  PortPreferences prefs;
  prefs.device = env_string("HOLMES_IB_DEVICE");
  if (auto v = env_int("HOLMES_IB_GID_INDEX", 0, 65535)) prefs.gid_index = static_cast<int>(*v);
  // Only the local rank matters here; a malformed launcher variable is reported by the
  // communicator, which reads them all.
  try {
    prefs.local_rank = read_launch_env().local_rank.value_or(0);
  } catch (const Error&) {
    prefs.local_rank = 0;
  }
  return prefs;
}

}  // namespace holmes::verbs
