#include "communicator/transport_setup.hpp"

#include <bit>
#include <set>

#include "core/log.hpp"
#include "core/net_interfaces.hpp"
#include "core/status.hpp"
#include "topology/topology_file.hpp"

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

ucx::UcxChoices ucx_choices(const Settings& settings) {
  return {settings.text_if_given(Setting::kUcxTls),
          settings.text_if_given(Setting::kUcxNetDevices)};
}

TransportTunings transport_tunings(const Settings& settings) {
  return {shm_tuning(settings), ucx_choices(settings), verbs_config(settings),
          port_preferences(settings)};
}

std::string tcp_nics(const Settings& settings, const std::string& host,
                     const std::set<std::string>& interfaces) {
  if (auto given = settings.text_if_given(Setting::kTcpNics)) return *given;
  const auto file = settings.text_if_given(Setting::kTopology);
  if (!file) return "";
  const topology::Topology topo = topology::load_topology_file(*file);
  const topology::Host* here = topo.find_host(host);
  if (here == nullptr) return "";
  std::vector<std::pair<std::string, double>> ethernet;  // name, Gbit/s
  for (const auto& nic : here->nics) {
    const auto& link = topo.link_class(nic.link_class);
    if (link.fabric == topology::Fabric::kEthernet) {
      ethernet.emplace_back(nic.name, link.gbit_per_s / topo.emulation_scale);
    }
  }
  if (ethernet.size() < 2) return "";
  std::string list;
  for (const auto& [name, gbit] : ethernet) {
    if (!interfaces.contains(name)) {
      HM_LOG_INFO(
          "host {}: {} gives it NIC {}, which this machine does not have: tcp uses its "
          "listen address alone (HOLMES_TCP_NICS sets the NICs)",
          host, *file, name);
      return "";
    }
    list += fmt::format("{}{}@{:g}", list.empty() ? "" : ",", name, gbit);
  }
  return list;
}

std::string tcp_nics(const Settings& settings, const std::string& host) {
  std::set<std::string> interfaces;
  if (!settings.given(Setting::kTcpNics) && settings.given(Setting::kTopology)) {
    for (const auto& a : interface_addresses()) interfaces.insert(a.interface);
  }
  return tcp_nics(settings, host, interfaces);
}

bool transport_usable(TransportKind kind, const Settings& settings, std::string* why) {
  return transport_available(kind, why, transport_tunings(settings));
}

std::unique_ptr<Transport> create_transport(TransportKind kind, const TransportOptions& options,
                                            const Settings& settings) {
  return make_transport(kind, options, transport_tunings(settings));
}

}  // namespace holmes::detail
