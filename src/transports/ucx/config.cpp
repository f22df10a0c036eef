#include "transports/ucx/config.hpp"

namespace holmes::ucx {

UcxConfig ucx_config(const TransportOptions& options, const UcxChoices& choices) {
  UcxConfig config;
  config.listen_host = options.listen_host;
  config.token = options.token;
  config.context = options.context;
  config.connect_timeout = options.connect_timeout;
  config.same_host_peers = options.ucx_same_host_peers;
  config.choices = choices;
  return config;
}

}  // namespace holmes::ucx
