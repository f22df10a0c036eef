// The ports of this host's RDMA devices as libibverbs reports them: ibv_get_device_list,
// ibv_query_device and ibv_query_port give state, link layer, active MTU, speed and width, LID;
// the GID table (with each GID's type and network device) comes from sysfs, falling back to
// ibv_query_gid where sysfs does not describe it. Safe on hosts without devices, kernel support
// or userspace providers: it then throws, it never crashes.
#pragma once

#include <vector>

#include "transports/verbs/port_discovery.hpp"

namespace holmes::verbs {

// Throws HM_ERR_UNSUPPORTED "no RDMA device found (...)" when libibverbs lists no device.
// Devices that cannot be opened or queried are listed with `problem` set.
std::vector<PortInfo> query_ports();

}  // namespace holmes::verbs
