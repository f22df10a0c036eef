// verbs transport: RC queue pairs over libibverbs (rdma-core), for InfiniBand and RoCE fabrics
// inside an island. Data moves through registered slots with send/receive and credit-based flow
// control; queue pairs are set up by an authenticated TCP handshake on listen_address(). See
// verbs_engine.hpp for the design and verbs_config.hpp for the HOLMES_IB_* settings.
//
// On a host without an RDMA device (or without kernel support or userspace providers)
// verbs_available() is false and says why, and make_verbs_transport() throws
// HM_ERR_UNSUPPORTED with that reason; nothing crashes.
#pragma once

#include <memory>
#include <string>

#include "transports/options.hpp"
#include "transports/transport.hpp"

namespace holmes::verbs {

// Whether this host has a usable (ACTIVE) RDMA port under the HOLMES_IB_* settings; otherwise
// false with `why` ("no RDMA device found (...)", "no usable ACTIVE RDMA port (...)", a bad
// HOLMES_IB_DEVICE, ...).
bool verbs_available(std::string* why);

// Opens the port (HOLMES_IB_DEVICE, else chosen by local rank among the ACTIVE ones) and listens
// for handshakes on options.listen_host. Reads listen_host, token, context, connect_timeout.
// Throws HM_ERR_UNSUPPORTED when no port is usable, HM_ERR_INVALID_ARGUMENT for malformed
// HOLMES_IB_* values, HM_ERR_TRANSPORT when the device refuses a resource.
std::unique_ptr<Transport> make_verbs_transport(const TransportOptions& options);

}  // namespace holmes::verbs
