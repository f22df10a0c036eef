// What every transport is created with. Each transport reads the fields it needs.
#pragma once

#include <chrono>
#include <string>

namespace holmes {

struct TransportOptions {
  std::string listen_host = "127.0.0.1";  // IP to listen on (tcp), or whose interface ucx uses
  std::string token;                      // job token every connection proves
  std::string context;                    // unique name of the communicator in the job
  std::chrono::milliseconds connect_timeout{60000};
  int sockets_per_peer = 2;  // tcp: 1..16
  bool checksum = false;     // tcp: CRC32C after every fragment (HOLMES_CHECKSUM=1)
  // tcp: combining receives (CombiningReceive::irecv_reduce) reduce each fragment as it lands, on
  // the thread that reads it, from a fragment-sized buffer that is reused while still in the cache
  // (HOLMES_TCP_FUSED_REDUCE=0 refuses them: the collective receives into scratch and reduces).
  bool tcp_fused_reduce = true;
  int socket_buffer_bytes = 4 << 20;  // tcp: SO_SNDBUF/SO_RCVBUF; 0 leaves kernel autotuning
  // tcp: HOLMES_TCP_CONGESTION, "" = auto (tcp/congestion.hpp): which congestion control links
  // get.
  std::string tcp_congestion;
  // tcp: the NICs to stripe over (HOLMES_TCP_NICS, or this host's NICs in the topology file),
  // as tcp/nics.hpp reads it; "" = the listen address alone.
  std::string tcp_nics;
  // ucx: false when every peer the transport serves is on another host. UCX then leaves out its
  // shared-memory transports (unless UCX_TLS is set): between hosts they can never carry
  // anything, but namespaces emulating hosts on one machine look like one host to UCX, which
  // would move their traffic through shared memory instead of the emulated network.
  bool ucx_same_host_peers = true;
};

}  // namespace holmes
