#include "transports/ucx/config.hpp"

#include "core/env.hpp"

namespace holmes::ucx {

UcxConfig read_ucx_config(const TransportOptions& options) {
  UcxConfig config;
  config.listen_host = options.listen_host;
  config.token = options.token;
  config.context = options.context;
  config.connect_timeout = options.connect_timeout;
  config.same_host_peers = options.ucx_same_host_peers;
  config.user_tls = env_string("UCX_TLS").has_value();
  config.user_net_devices = env_string("UCX_NET_DEVICES").has_value();
  return config;
}

}  // namespace holmes::ucx
