// The Nic interface (nic.hpp) on a real RDMA port through libibverbs: the opened device, a
// protection domain and one completion channel per transport; per queue pair an RC QP with its
// own completion queue on that channel. The channel and device-event fds are non-blocking so the
// transport's progress thread can sleep in epoll on them and drain them without blocking.
#pragma once

#include <memory>

#include "transports/verbs/nic.hpp"
#include "transports/verbs/port_discovery.hpp"

namespace holmes::verbs {

// Opens the chosen port; throws HM_ERR_UNSUPPORTED when it is gone or no longer ACTIVE,
// HM_ERR_TRANSPORT when a resource cannot be created.
std::unique_ptr<Nic> open_ibv_nic(const PortChoice& choice);

}  // namespace holmes::verbs
