#include "transports/verbs/transport.hpp"

#include "core/log.hpp"
#include "core/status.hpp"
#include "transports/verbs/ibv_discovery.hpp"
#include "transports/verbs/ibv_nic.hpp"

namespace holmes::verbs {
namespace {

PortChoice find_port(const PortPreferences& prefs) {
  return choose_port(query_ports(), prefs.device, prefs.gid_index, prefs.local_rank);
}

}  // namespace

bool verbs_available(std::string* why, const PortPreferences& prefs) {
  try {
    find_port(prefs);
    return true;
  } catch (const Error& e) {
    if (why != nullptr) *why = e.what();
    return false;
  }
}

std::unique_ptr<Transport> make_verbs_transport(const TransportOptions& options,
                                                const VerbsConfig& config,
                                                const PortPreferences& prefs) {
  PortChoice choice;
  try {
    choice = find_port(prefs);
  } catch (const Error& e) {
    if (e.status() == HM_ERR_INVALID_ARGUMENT) throw;
    fail(HM_ERR_UNSUPPORTED, "verbs transport unavailable: {}", e.what());
  }
  HM_LOG_DEBUG("verbs: using {} ({}), GID {} {} ({})", choice.port.name(),
               link_layer_name(choice.port.link_layer), choice.gid.index,
               format_gid(choice.gid.gid), gid_type_name(choice.gid.type));
  return make_verbs_transport_on(options, config, open_ibv_nic(choice));
}

}  // namespace holmes::verbs
