// The ucx transport's settings: the slice of TransportOptions it runs on, and the choices of
// UCX's transports and devices that Holmes passes on to UCX (HOLMES_UCX_TLS and
// HOLMES_UCX_NET_DEVICES, which read UCX's own UCX_TLS and UCX_NET_DEVICES as aliases). UCX
// reads the rest of its UCX_* environment itself (ucp_config_read); where the user gave no
// choice, Holmes narrows UCX's (ucx_context.hpp).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "transports/options.hpp"

namespace holmes::ucx {

// What the user chose for UCX, each applied with ucp_config_modify; nullopt: Holmes chooses.
struct UcxChoices {
  std::optional<std::string> tls;          // UCX's TLS list ("rc,sm", "tcp,self", ...)
  std::optional<std::string> net_devices;  // UCX's NET_DEVICES list ("mlx5_0:1,eth1")
};

struct UcxConfig {
  std::string listen_host;  // whose interface UCX uses (with every RDMA port)
  std::string token;        // the job token every message's cookie proves
  std::string context;      // the communicator's name in the job
  std::chrono::milliseconds connect_timeout{60000};
  // False when every peer the transport serves is on another host: UCX's shared-memory
  // transports are then left out unless choices.tls says otherwise
  // (TransportOptions::ucx_same_host_peers).
  bool same_host_peers = true;
  UcxChoices choices;
};

// The ucx slice of `options`, with the user's choices.
UcxConfig ucx_config(const TransportOptions& options, const UcxChoices& choices);

}  // namespace holmes::ucx
