#include "transports/ucx/ucx_devices.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <system_error>

namespace holmes::ucx {

std::optional<std::string> interface_holding(const std::string& host) {
  in_addr v4{};
  in6_addr v6{};
  const bool is_v4 = inet_pton(AF_INET, host.c_str(), &v4) == 1;
  const bool is_v6 = !is_v4 && inet_pton(AF_INET6, host.c_str(), &v6) == 1;
  if (!is_v4 && !is_v6) return std::nullopt;
  if ((is_v4 && v4.s_addr == htonl(INADDR_ANY)) || (is_v6 && IN6_IS_ADDR_UNSPECIFIED(&v6))) {
    return std::nullopt;
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return std::nullopt;
  const std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> owner(list, &freeifaddrs);
  for (const ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_name == nullptr) continue;
    if (is_v4 && it->ifa_addr->sa_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(it->ifa_addr);
      if (a->sin_addr.s_addr == v4.s_addr) return std::string(it->ifa_name);
    } else if (is_v6 && it->ifa_addr->sa_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(it->ifa_addr);
      if (std::memcmp(&a->sin6_addr, &v6, sizeof v6) == 0) return std::string(it->ifa_name);
    }
  }
  return std::nullopt;
}

std::vector<std::string> rdma_device_ports(const std::filesystem::path& infiniband_dir) {
  std::vector<std::string> ports;
  std::error_code ec;
  for (const auto& device : std::filesystem::directory_iterator(infiniband_dir, ec)) {
    std::error_code port_ec;
    for (const auto& port : std::filesystem::directory_iterator(device.path() / "ports", port_ec)) {
      ports.push_back(device.path().filename().string() + ":" + port.path().filename().string());
    }
  }
  std::sort(ports.begin(), ports.end());
  return ports;
}

std::optional<std::string> default_net_devices(const std::string& listen_host,
                                               const std::vector<std::string>& rdma_ports) {
  auto devices = interface_holding(listen_host);
  if (!devices) return std::nullopt;
  for (const auto& port : rdma_ports) *devices += "," + port;
  return devices;
}

std::optional<std::string> default_rndv_thresh(bool same_host_peers,
                                               const std::vector<std::string>& rdma_ports) {
  if (same_host_peers || !rdma_ports.empty()) return std::nullopt;
  return "inf";
}

}  // namespace holmes::ucx
