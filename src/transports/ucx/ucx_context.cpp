#include "transports/ucx/ucx_context.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <fmt/format.h>

#include "core/log.hpp"
#include "core/status.hpp"
#include "transports/ucx/ucx_devices.hpp"

namespace holmes::ucx {
namespace {

struct ConfigRelease {
  void operator()(ucp_config_t* config) const { ucp_config_release(config); }
};
using ConfigPtr = std::unique_ptr<ucp_config_t, ConfigRelease>;

// The user's UCX_* environment, as UCX reads it.
ConfigPtr read_config() {
  ucp_config_t* raw = nullptr;
  const ucs_status_t status = ucp_config_read(nullptr, nullptr, &raw);
  if (status != UCS_OK) {
    fail(HM_ERR_TRANSPORT, "ucx: cannot read the UCX configuration (check the UCX_* variables): {}",
         ucs_status_string(status));
  }
  return ConfigPtr(raw);
}

ucp_params_t context_params() {
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = "holmes";
  return params;
}

}  // namespace

UcxVersion ucx_version() {
  unsigned major = 0;
  unsigned minor = 0;
  unsigned release = 0;
  ucp_get_version(&major, &minor, &release);
  return {major, minor};
}

std::string probe_ucp() {
  try {
    const auto config = read_config();
    const ucp_params_t params = context_params();
    ucp_context_h context = nullptr;
    const ucs_status_t status = ucp_init(&params, config.get(), &context);
    if (status != UCS_OK) return fmt::format("ucp_init failed: {}", ucs_status_string(status));
    ucp_cleanup(context);
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

UcpWorker::UcpWorker(const UcxConfig& settings) {
  const std::string& listen_host = settings.listen_host;
  const auto config = read_config();
  const auto modify = [&](const char* name, const std::string& value, const char* why) {
    const ucs_status_t status = ucp_config_modify(config.get(), name, value.c_str());
    if (status != UCS_OK) {
      fail(HM_ERR_TRANSPORT, "ucx: cannot set UCX_{}={} ({}): {}", name, value, why,
           ucs_status_string(status));
    }
    HM_LOG_DEBUG("ucx: UCX_{}={} ({})", name, value, why);
  };
  if (settings.choices.tls) {
    modify("TLS", *settings.choices.tls, "HOLMES_UCX_TLS or UCX_TLS");
  } else if (!settings.same_host_peers) {
    // "^sm" is every transport but posix, sysv, cma, knem and xpmem.
    modify("TLS", "^sm", "every peer of this worker is on another host");
  }
  const std::vector<std::string> rdma_ports = rdma_device_ports();
  if (std::getenv("UCX_RNDV_THRESH") == nullptr) {
    if (const auto threshold = default_rndv_thresh(settings.same_host_peers, rdma_ports)) {
      modify("RNDV_THRESH", *threshold, "UCX carries tcp only here: no rendezvous");
    }
  }
  if (settings.choices.net_devices) {
    modify("NET_DEVICES", *settings.choices.net_devices,
           "HOLMES_UCX_NET_DEVICES or UCX_NET_DEVICES");
  } else if (const auto devices = default_net_devices(listen_host, rdma_ports)) {
    // Without this UCX also opens lanes on interfaces the job was not told to use (eth0 next to
    // the loopback of a single-host job); RDMA ports stay so that a cluster keeps its HCAs.
    modify("NET_DEVICES", *devices, "the interface of the listen address and the RDMA ports");
  } else {
    HM_LOG_DEBUG("ucx: no interface holds {}; UCX chooses its network devices itself", listen_host);
  }
  const ucp_params_t params = context_params();
  ucp_context_h context = nullptr;
  ucs_status_t status = ucp_init(&params, config.get(), &context);
  if (status != UCS_OK) {
    fail(HM_ERR_TRANSPORT, "ucx: ucp_init failed: {}", ucs_status_string(status));
  }
  context_.reset(context);

  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_EVENTS;
  // One progress thread makes every call on this worker.
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
  worker_params.events = UCP_WAKEUP_RX | UCP_WAKEUP_TX;
  ucp_worker_h worker = nullptr;
  status = ucp_worker_create(context_.get(), &worker_params, &worker);
  if (status != UCS_OK) {
    fail(HM_ERR_TRANSPORT, "ucx: cannot create a UCP worker: {}", ucs_status_string(status));
  }
  worker_.reset(worker);

  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_NAME |
                    UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
  status = ucp_worker_query(worker_.get(), &attr);
  if (status != UCS_OK) {
    fail(HM_ERR_TRANSPORT, "ucx: cannot query the UCP worker: {}", ucs_status_string(status));
  }
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(attr.address);
  address_.assign(bytes, bytes + attr.address_length);
  ucp_worker_release_address(worker_.get(), attr.address);
  name_ = attr.name;
  max_am_header_ = attr.max_am_header;

  status = ucp_worker_get_efd(worker_.get(), &event_fd_);
  if (status != UCS_OK) {
    fail(HM_ERR_TRANSPORT, "ucx: the UCP worker has no event fd: {}", ucs_status_string(status));
  }
}

void UcpWorker::close() {
  worker_.reset();
  context_.reset();
  event_fd_ = -1;
}

std::string describe_lanes(const std::string& print_info) {
  // Lane lines look like
  //   "#  lane[0]:  2:sysv/memory.0 md[2]  -> md[2]/sysv/sysdev[255] am am_bw#0"
  std::vector<std::string> lanes;
  std::istringstream lines(print_info);
  std::string line;
  while (std::getline(lines, line)) {
    const auto at = line.find("lane[");
    if (at == std::string::npos) continue;
    std::istringstream words(line.substr(at));
    std::vector<std::string> tokens;
    for (std::string word; words >> word;) tokens.push_back(word);
    if (tokens.size() < 2) continue;
    std::string resource = tokens[1];  // "2:sysv/memory.0"
    if (const auto colon = resource.find(':'); colon != std::string::npos) {
      resource.erase(0, colon + 1);
    }
    if (const auto dot = resource.rfind('.'); dot != std::string::npos && dot > 0) {
      resource.erase(dot);  // the interface index
    }
    std::string roles;
    const auto arrow = std::find(tokens.begin(), tokens.end(), "->");
    if (arrow != tokens.end() && arrow + 1 != tokens.end()) {
      for (auto it = arrow + 2; it != tokens.end(); ++it) {
        std::string role = *it;
        if (const auto hash = role.find('#'); hash != std::string::npos) role.erase(hash);
        roles += (roles.empty() ? "" : ", ") + role;
      }
    }
    lanes.push_back(roles.empty() ? resource : fmt::format("{} ({})", resource, roles));
  }
  std::string out;
  for (const auto& lane : lanes) out += (out.empty() ? "" : " + ") + lane;
  return out;
}

std::string endpoint_lanes(ucp_ep_h ep) {
  char* text = nullptr;
  std::size_t size = 0;
  FILE* stream = ::open_memstream(&text, &size);
  if (stream == nullptr) return {};
  ucp_ep_print_info(ep, stream);
  std::fclose(stream);
  std::string info(text, size);
  std::free(text);
  return describe_lanes(info);
}

}  // namespace holmes::ucx
