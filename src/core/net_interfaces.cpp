#include "core/net_interfaces.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <memory>

#include <fmt/format.h>

namespace holmes {
namespace {

int prefix_length(const sockaddr* mask, bool ipv6) {
  if (mask == nullptr) return 0;
  const auto* bytes = ipv6 ? reinterpret_cast<const unsigned char*>(
                                 &reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr)
                           : reinterpret_cast<const unsigned char*>(
                                 &reinterpret_cast<const sockaddr_in*>(mask)->sin_addr);
  int bits = 0;
  for (int i = 0; i < (ipv6 ? 16 : 4); ++i) bits += __builtin_popcount(bytes[i]);
  return bits;
}

// The address's bytes (4 or 16); false for text that is neither family.
bool address_bytes(const std::string& text, std::array<unsigned char, 16>& out, bool& ipv6) {
  out.fill(0);
  if (::inet_pton(AF_INET, text.c_str(), out.data()) == 1) {
    ipv6 = false;
    return true;
  }
  if (::inet_pton(AF_INET6, text.c_str(), out.data()) == 1) {
    ipv6 = true;
    return true;
  }
  return false;
}

// Clears every bit past the first `prefix` of an address of `size` bytes.
void mask(std::array<unsigned char, 16>& bytes, int size, int prefix) {
  for (int i = 0; i < size; ++i) {
    const int keep = std::clamp(prefix - 8 * i, 0, 8);
    bytes[static_cast<std::size_t>(i)] &= static_cast<unsigned char>(0xff00u >> keep);
  }
}

}  // namespace

std::vector<InterfaceAddress> interface_addresses(std::string* error) {
  std::vector<InterfaceAddress> out;
  ifaddrs* raw = nullptr;
  if (::getifaddrs(&raw) != 0) {
    if (error != nullptr) *error = fmt::format("getifaddrs failed: {}", std::strerror(errno));
    return out;
  }
  const std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> list(raw, ::freeifaddrs);
  for (const ifaddrs* a = raw; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_name == nullptr) continue;
    const int family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    InterfaceAddress entry;
    entry.interface = a->ifa_name;
    entry.ipv6 = family == AF_INET6;
    entry.prefix = prefix_length(a->ifa_netmask, entry.ipv6);
    entry.up = (a->ifa_flags & IFF_UP) != 0 && (a->ifa_flags & IFF_RUNNING) != 0;
    entry.loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
    char text[INET6_ADDRSTRLEN] = {0};
    const void* address = entry.ipv6
                              ? static_cast<const void*>(
                                    &reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr)
                              : static_cast<const void*>(
                                    &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr);
    ::inet_ntop(family, address, text, sizeof(text));
    entry.address = text;
    out.push_back(std::move(entry));
  }
  return out;
}

std::optional<double> interface_gbit_per_s(std::string_view name, const std::string& sysfs_root) {
  std::ifstream in(fmt::format("{}/class/net/{}/speed", sysfs_root, name));
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  long long mbit = 0;
  const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), mbit);
  if (ec != std::errc() || mbit <= 0) return std::nullopt;
  return static_cast<double>(mbit) / 1000;
}

std::string ipv4_network(const std::string& address, int prefix) {
  std::array<unsigned char, 16> bytes{};
  bool ipv6 = false;
  if (!address_bytes(address, bytes, ipv6) || ipv6 || prefix < 0 || prefix > 32) return {};
  mask(bytes, 4, prefix);
  char text[INET_ADDRSTRLEN] = {0};
  ::inet_ntop(AF_INET, bytes.data(), text, sizeof(text));
  return fmt::format("{}/{}", text, prefix);
}

bool same_subnet(const std::string& a, const std::string& b, int prefix) {
  std::array<unsigned char, 16> x{};
  std::array<unsigned char, 16> y{};
  bool x6 = false;
  bool y6 = false;
  if (!address_bytes(a, x, x6) || !address_bytes(b, y, y6) || x6 != y6 || prefix < 0) return false;
  const int size = x6 ? 16 : 4;
  mask(x, size, prefix);
  mask(y, size, prefix);
  return x == y;
}

}  // namespace holmes
