// The ucx transport's settings: the slice of TransportOptions it runs on, and which of UCX's own
// variables the user set. UCX reads its UCX_* environment itself (ucp_config_read); Holmes only
// needs to know whether UCX_TLS and UCX_NET_DEVICES were given, so that it narrows UCX's choice
// only where the user did not (ucx_context.hpp).
#pragma once

#include <chrono>
#include <string>

#include "transports/options.hpp"

namespace holmes::ucx {

struct UcxConfig {
  std::string listen_host;  // whose interface UCX uses (with every RDMA port)
  std::string token;        // the job token every message's cookie proves
  std::string context;      // the communicator's name in the job
  std::chrono::milliseconds connect_timeout{60000};
  // False when every peer the transport serves is on another host: UCX's shared-memory
  // transports are then left out (TransportOptions::ucx_same_host_peers).
  bool same_host_peers = true;
  bool user_tls = false;          // UCX_TLS is set: UCX's transports are the user's choice
  bool user_net_devices = false;  // UCX_NET_DEVICES is set: so are its devices
};

// The ucx slice of `options`, and UCX_TLS and UCX_NET_DEVICES from the environment.
UcxConfig read_ucx_config(const TransportOptions& options);

}  // namespace holmes::ucx
