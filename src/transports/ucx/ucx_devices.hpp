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

// The UCX_RNDV_THRESH value to use when the user set none: "inf" (every message eager, sent in
// fragments as it goes) when UCX can only carry this worker's traffic over tcp (every peer on
// another host, no RDMA port here): its rendezvous then emulates the receiver's read over tcp,
// and under tc shaping it halved what a link carried (pure-ib emulation, 64 MiB hierarchical
// allreduce: 0.19 GB/s with rendezvous, 0.31 without; the probe read 0.47 GB/s on a link held to
// 0.25). nullopt: leave UCX's default (rendezvous moves data by RDMA, or by cma on one host).
std::optional<std::string> default_rndv_thresh(bool same_host_peers,
                                               const std::vector<std::string>& rdma_ports);

}  // namespace holmes::ucx
