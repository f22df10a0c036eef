// This host's network interfaces as the kernel lists them (getifaddrs): every IPv4 and IPv6
// address with its interface, prefix length and state. Discovery (topology/discovery.hpp)
// describes the host with them; the tcp transport resolves the NICs it stripes over
// (transports/tcp/nics.hpp) from them. Read only when asked: nothing here is cached.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace holmes {

struct InterfaceAddress {
  std::string interface;  // "eth0"
  bool ipv6 = false;
  std::string address;  // "10.0.0.5", "fd00::5"
  int prefix = 0;       // netmask bits
  bool up = false;      // IFF_UP and IFF_RUNNING: administratively up with a carrier
  bool loopback = false;
};

// Every address of every interface, in the kernel's order. Empty (and `error` set, when given)
// when getifaddrs fails.
std::vector<InterfaceAddress> interface_addresses(std::string* error = nullptr);

// The interface's speed in Gbit/s from <sysfs_root>/class/net/<name>/speed; nullopt when it
// reports none (virtual NICs: veth, bridges and most VMs' NICs report -1 or nothing).
std::optional<double> interface_gbit_per_s(std::string_view name,
                                           const std::string& sysfs_root = "/sys");

// The network of an IPv4 address: "10.0.0.0/24" for 10.0.0.5 with prefix 24; empty for IPv6
// or text that is no address.
std::string ipv4_network(const std::string& address, int prefix);

// Whether `a` and `b` (IP addresses as text, same family) share their first `prefix` bits;
// false for text that is no address or for different families.
bool same_subnet(const std::string& a, const std::string& b, int prefix);

}  // namespace holmes
