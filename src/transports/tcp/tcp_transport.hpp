// tcp transport over Boost.Asio: the tier for Ethernet links.
//
// - Each rank listens on one port. A rank opens its own `sockets_per_peer` connections to a
//   peer the first time it sends to it and only ever sends on those; it receives on the
//   connections its peers opened. Every connection proves the job token (bootstrap/auth.hpp),
//   bound to this communicator and to both ranks, before any frame is accepted.
// - A message is cut into fragments of at most 4 MiB spread over the peer's sockets (the least
//   loaded first), so one large message uses every socket, and the layer above cuts
//   collectives into chunks so that receiving, reducing and forwarding overlap.
// - One io thread per transport does the socket work and sleeps in epoll when idle; callers
//   block on their Requests. During a small collective the caller's thread runs the sockets
//   itself between yields while the io thread steps aside (io_lease.hpp): a small message then
//   costs no thread wake-up. Nothing spins: a caller yields between polls and sleeps after 1 ms.
// - A receive whose message has not arrived yet is posted and the payload is read straight into
//   its buffer; a message that arrives first is kept until its receive is posted.
// - Failures name the peer and its link. A link that goes down silently (cable, switch port,
//   host gone) is found by the kernel: keepalive probes on idle connections and TCP_USER_TIMEOUT
//   on all abort a connection that has acknowledged nothing for half the communicator's timeout
//   (at least 1 s), which fails that peer's traffic. A rank whose communicator fails tells its
//   peers why before it closes (a notice frame, frame.hpp), so a rank blocked on it reports the
//   dead link two hops away instead of a bare closed connection.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "transports/options.hpp"
#include "transports/transport.hpp"

namespace holmes::tcp {

// The tcp transport reads listen_host, sockets_per_peer, socket_buffer_bytes, token, context,
// connect_timeout, checksum, tcp_congestion and tcp_fused_reduce.
using TcpOptions = TransportOptions;

// Listens at once (peers are set later, Transport::set_peers); throws HM_ERR_TRANSPORT when it
// cannot.
std::unique_ptr<Transport> make_tcp_transport(const TcpOptions& options);

}  // namespace holmes::tcp
