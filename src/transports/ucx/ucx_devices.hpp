// Which network devices a ucx endpoint lets UCX use. Left alone, UCX opens lanes on every
// interface it finds (eth0 as well as the loopback a job was told to use). Unless the user set
// UCX_NET_DEVICES, the transport restricts UCX to the interface that holds the job's listen
// address plus every RDMA port present, so that a cluster keeps its HCAs.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace holmes::ucx {

// The interface whose address is `host` (an IPv4 or IPv6 literal): "lo" for 127.0.0.1. nullopt
// for a wildcard address, a name that is not an IP literal, or an address no interface holds.
std::optional<std::string> interface_holding(const std::string& host);

// "mlx5_0:1", ... for every port of every RDMA device under `infiniband_dir`, sorted.
std::vector<std::string> rdma_device_ports(
    const std::filesystem::path& infiniband_dir = "/sys/class/infiniband");

// The UCX_NET_DEVICES value to use when the user set none: the interface holding `listen_host`
// followed by `rdma_ports`; nullopt (leave UCX's default) when no interface holds it.
std::optional<std::string> default_net_devices(const std::string& listen_host,
                                               const std::vector<std::string>& rdma_ports);

}  // namespace holmes::ucx
