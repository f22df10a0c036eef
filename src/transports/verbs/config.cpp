#include "transports/verbs/config.hpp"

#include "core/status.hpp"
#include "transports/verbs/credit_window.hpp"
#include "transports/verbs/qp_info.hpp"
#include "transports/verbs/wire.hpp"

namespace holmes::verbs {

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

}  // namespace holmes::verbs
