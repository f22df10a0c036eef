#include "transports/verbs/transport.hpp"

#include "core/log.hpp"
#include "core/status.hpp"
#include "transports/verbs/ibv_discovery.hpp"
#include "transports/verbs/ibv_nic.hpp"

namespace holmes::verbs {
namespace {

PortChoice find_port() {
  const auto prefs = read_port_preferences();
  return choose_port(query_ports(), prefs.device, prefs.gid_index, prefs.local_rank);
}

}  // namespace

bool verbs_available(std::string* why) {
  try {
    find_port();
    return true;
  } catch (const Error& e) {
    if (why != nullptr) *why = e.what();
    return false;
  }
}

std::unique_ptr<Transport> make_verbs_transport(const TransportOptions& options) {
  PortChoice choice;
  try {
    choice = find_port();
  } catch (const Error& e) {
    if (e.status() == HM_ERR_INVALID_ARGUMENT) throw;
    fail(HM_ERR_UNSUPPORTED, "verbs transport unavailable: {}", e.what());
  }
  const auto config = read_verbs_config();
  HM_LOG_DEBUG("verbs: using {} ({}), GID {} {} ({})", choice.port.name(),
               link_layer_name(choice.port.link_layer), choice.gid.index,
               format_gid(choice.gid.gid), gid_type_name(choice.gid.type));
  return make_verbs_transport_on(options, config, open_ibv_nic(choice));
}

}  // namespace holmes::verbs
