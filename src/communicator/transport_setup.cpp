#include "communicator/transport_setup.hpp"

#include <bit>

#include "core/log.hpp"
#include "core/status.hpp"

#ifdef HOLMES_HAVE_VERBS
#include "transports/verbs/ibv_discovery.hpp"
#include "transports/verbs/ibv_nic.hpp"
#include "transports/verbs/port_discovery.hpp"
#include "transports/verbs/transport.hpp"
#endif

namespace holmes::detail {

shm::ShmTuning shm_tuning(const Settings& settings) {
  shm::ShmTuning tuning;
  if (auto bytes = settings.integer_if_given(Setting::kShmRingBytes)) {
    tuning.ring_bytes = std::bit_floor(static_cast<std::uint64_t>(*bytes));
  }
  if (auto cma = settings.flag_if_given(Setting::kShmCma)) tuning.cma = *cma;
  if (auto min = settings.integer_if_given(Setting::kShmCmaMinBytes)) {
    tuning.cma_min_bytes = static_cast<std::uint64_t>(*min);
  }
  if (auto park = settings.integer_if_given(Setting::kShmParkUs)) {
    tuning.park_grace = std::chrono::microseconds(*park);
  }
  if (auto poll = settings.flag_if_given(Setting::kShmPoll)) tuning.caller_progress = *poll;
  if (auto window = settings.integer_if_given(Setting::kShmPollUs)) {
    tuning.poll_window = std::chrono::microseconds(*window);
  }
  if (auto fused = settings.flag_if_given(Setting::kShmFusedReduce)) tuning.fused_reduce = *fused;
  return tuning;
}

verbs::VerbsConfig verbs_config(const Settings& settings) {
  verbs::VerbsConfig config;
  const auto set = [&](Setting id, auto& field) {
    if (auto v = settings.integer_if_given(id)) {
      field = static_cast<std::remove_reference_t<decltype(field)>>(*v);
    }
  };
  set(Setting::kIbSlots, config.data_slots);
  set(Setting::kIbSlotBytes, config.slot_bytes);
  set(Setting::kIbSl, config.service_level);
  set(Setting::kIbTc, config.traffic_class);
  set(Setting::kIbTimeout, config.ack_timeout);
  set(Setting::kIbRetryCnt, config.retry_count);
  return config;
}

verbs::PortPreferences port_preferences(const Settings& settings) {
  verbs::PortPreferences prefs;
  prefs.device = settings.text_if_given(Setting::kIbDevice);
  if (auto v = settings.integer_if_given(Setting::kIbGidIndex))
    prefs.gid_index = static_cast<int>(*v);
  // Only the local rank matters here; a malformed one is reported where the launch settings are
  // resolved.
  try {
    prefs.local_rank = static_cast<int>(settings.integer_if_given(Setting::kLocalRank).value_or(0));
  } catch (const Error&) {
    prefs.local_rank = 0;
  }
  return prefs;
}

#ifdef HOLMES_HAVE_VERBS
namespace {

verbs::PortChoice find_port(const Settings& settings) {
  const auto prefs = port_preferences(settings);
  return verbs::choose_port(verbs::query_ports(), prefs.device, prefs.gid_index, prefs.local_rank);
}

}  // namespace
#endif

bool transport_usable(TransportKind kind, const Settings& settings, std::string* why) {
#ifdef HOLMES_HAVE_VERBS
  if (kind == TransportKind::kVerbs) {
    try {
      find_port(settings);
      return true;
    } catch (const Error& e) {
      if (why != nullptr) *why = e.what();
      return false;
    }
  }
#endif
  (void)settings;
  return transport_available(kind, why);
}

std::unique_ptr<Transport> create_transport(TransportKind kind, const TransportOptions& options,
                                            const Settings& settings) {
  switch (kind) {
#ifdef HOLMES_HAVE_SHM
    case TransportKind::kShm:
      if (!transport_available(kind, nullptr)) break;
      return shm::make_shm_transport(options, shm_tuning(settings));
#endif
#ifdef HOLMES_HAVE_VERBS
    case TransportKind::kVerbs: {
      verbs::PortChoice choice;
      try {
        choice = find_port(settings);
      } catch (const Error& e) {
        if (e.status() == HM_ERR_INVALID_ARGUMENT) throw;
        fail(HM_ERR_UNSUPPORTED, "verbs transport unavailable: {}", e.what());
      }
      const auto config = verbs_config(settings);
      HM_LOG_DEBUG("verbs: using {} ({}), GID {} {} ({})", choice.port.name(),
                   verbs::link_layer_name(choice.port.link_layer), choice.gid.index,
                   verbs::format_gid(choice.gid.gid), verbs::gid_type_name(choice.gid.type));
      return verbs::make_verbs_transport_on(options, config, verbs::open_ibv_nic(choice));
    }
#endif
    default:
      break;
  }
  return make_transport(kind, options);
}

}  // namespace holmes::detail
