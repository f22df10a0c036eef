// The tcp transport's settings: the slice of TransportOptions it runs on, checked once when the
// transport is made. The communicator fills TransportOptions (from hm_config_t and the
// environment: HOLMES_SOCKETS_PER_PEER, HOLMES_CHECKSUM, HOLMES_TCP_FUSED_REDUCE,
// HOLMES_TCP_CONGESTION, HOLMES_TCP_NICS, ...); nothing in this folder reads the environment.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "transports/options.hpp"
#include "transports/tcp/nics.hpp"

namespace holmes::tcp {

// What make_tcp_transport takes.
using TcpOptions = TransportOptions;

constexpr int kMaxSocketsPerPeer = 16;

struct TcpConfig {
  std::string listen_host;  // the IP this endpoint listens on
  std::string token;        // the job token every connection proves
  std::string context;      // the communicator's name in the job
  std::chrono::milliseconds connect_timeout{60000};
  int sockets_per_peer = 2;  // 1..kMaxSocketsPerPeer
  bool checksum = false;     // CRC32C after every fragment
  // Combining receives (irecv_reduce) reduce each fragment as it lands, on the thread that
  // reads it, from a fragment-sized buffer that is reused while still in the cache; false
  // refuses them (the collective receives into scratch and reduces).
  bool fused_reduce = true;
  int socket_buffer_bytes = 4 << 20;  // SO_SNDBUF/SO_RCVBUF; 0 leaves kernel autotuning
  std::string congestion;             // "" = auto (congestion.hpp)
  std::vector<TcpNic> nics;           // empty: the listen address alone (nics.hpp)
};

// The tcp slice of `options`; throws HM_ERR_INVALID_ARGUMENT for sockets per peer outside
// [1, kMaxSocketsPerPeer] and for a NIC list that does not resolve (naming HOLMES_TCP_NICS).
TcpConfig tcp_config(const TransportOptions& options);

}  // namespace holmes::tcp
