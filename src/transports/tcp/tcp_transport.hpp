// tcp transport over Boost.Asio: the tier for Ethernet links.
//
// - Each rank listens on one port. A rank opens its own `sockets_per_peer` connections to a
//   peer the first time it sends to it and only ever sends on those; it receives on the
//   connections its peers opened. Every connection proves the job token (bootstrap/auth.hpp),
//   bound to this communicator and to both ranks, before any frame is accepted.
// - A message is cut into fragments of at most 4 MiB spread over the peer's sockets (the least
//   loaded first), so one large message uses every socket, and the layer above cuts
//   collectives into chunks so that receiving, reducing and forwarding overlap.
// - One io thread per transport does all socket work and sleeps in epoll when idle; callers
//   block on their Requests. Nothing spins.
// - A receive whose message has not arrived yet is posted and the payload is read straight into
//   its buffer; a message that arrives first is kept until its receive is posted.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "transports/transport.hpp"

namespace holmes::tcp {

struct TcpOptions {
  std::string listen_host = "127.0.0.1";  // IP address to listen on
  int sockets_per_peer = 2;               // 1..16
  int socket_buffer_bytes = 4 << 20;      // SO_SNDBUF/SO_RCVBUF; 0 leaves kernel autotuning
  std::string token;                      // job token every connection proves
  std::string context;                    // names the communicator; bound into every proof
  std::chrono::milliseconds connect_timeout{60000};
};

// Listens at once (peers are set later, Transport::set_peers); throws HM_ERR_TRANSPORT when it
// cannot.
std::unique_ptr<Transport> make_tcp_transport(const TcpOptions& options);

}  // namespace holmes::tcp
