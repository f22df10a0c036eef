#include "transports/tcp/config.hpp"

#include "core/status.hpp"

namespace holmes::tcp {

TcpConfig tcp_config(const TransportOptions& options) {
  require(options.sockets_per_peer >= 1 && options.sockets_per_peer <= kMaxSocketsPerPeer,
          "tcp: sockets per peer must be in [1, {}], got {}", kMaxSocketsPerPeer,
          options.sockets_per_peer);
  TcpConfig config;
  config.listen_host = options.listen_host;
  config.token = options.token;
  config.context = options.context;
  config.connect_timeout = options.connect_timeout;
  config.sockets_per_peer = options.sockets_per_peer;
  config.checksum = options.checksum;
  config.fused_reduce = options.tcp_fused_reduce;
  config.socket_buffer_bytes = options.socket_buffer_bytes;
  config.congestion = options.tcp_congestion;
  config.nics = resolve_tcp_nics(options.tcp_nics, "HOLMES_TCP_NICS");
  return config;
}

}  // namespace holmes::tcp
