// The verbs transport's logic over any Nic (nic.hpp): ibv_nic.hpp on hardware, an in-memory
// fabric in the tests.
//
// - Per served peer up to two RC queue pairs: the one this rank dials carries its data to the
//   peer (and credits back), the one the peer dials carries the peer's data to this rank. So
//   no two ranks race to set up the same queue pair, and a rank connects only where it sends.
//   Each is set up by an authenticated TCP handshake (handshake.hpp) on the transport's
//   listen_address, then INIT -> RTR -> RTS.
// - Data moves through registered slots: a message is cut into slot-sized pieces, each copied
//   into a send slot behind a header (wire.hpp) and sent into one of the receive slots the peer
//   pre-posted; the receiver hands each piece to the shared Matcher, which copies it into the
//   posted receive buffer or keeps it until the receive is posted, then reposts the slot. A
//   send completes once its last piece is copied, so its buffer is free at once.
// - Credits (credit_window.hpp) keep every sender within the receive slots the peer has posted.
// - One progress thread (Boost.Asio) sleeps in epoll on the completion channel, the device's
//   event fd and the handshake sockets: completions are event driven, never busy polled.
// - Closing sends a goodbye on every queue pair so that peers fail what they wait for from this
//   rank with HM_ERR_PEER_FAILED; the destructor waits (bounded) for the goodbyes to be
//   acknowledged before it destroys the queue pairs. Work-request errors (retries exhausted,
//   ...) fail that peer's traffic with a message naming the peer and the device.
#pragma once

#include <memory>

#include "transports/options.hpp"
#include "transports/transport.hpp"
#include "transports/verbs/nic.hpp"
#include "transports/verbs/verbs_config.hpp"

namespace holmes::verbs {

// Listens at once on options.listen_host (an ephemeral port); throws HM_ERR_TRANSPORT when it
// cannot.
std::unique_ptr<Transport> make_verbs_transport_on(const TransportOptions& options,
                                                   const VerbsConfig& config,
                                                   std::unique_ptr<Nic> nic);

}  // namespace holmes::verbs
