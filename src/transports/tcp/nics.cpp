#include "transports/tcp/nics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "core/status.hpp"
#include "core/text.hpp"

namespace holmes::tcp {
namespace {

// "lo, eth0, eth1": the interfaces there are, for the error that names a missing one.
std::string interface_names(const std::vector<InterfaceAddress>& interfaces) {
  std::set<std::string> names;
  for (const auto& a : interfaces) names.insert(a.interface);
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "none" : out;
}

bool is_address(const std::string& text) { return same_subnet(text, text, 0); }

// One entry's interface and address, or a throw naming `label` and the entry.
TcpNic find_nic(const std::string& what, std::string_view label,
                const std::vector<InterfaceAddress>& interfaces) {
  TcpNic nic;
  if (is_address(what)) {
    for (const auto& a : interfaces) {
      if (a.address == what) return {a.interface, a.address, a.prefix, 0};
    }
    // Loopback answers for its whole network (127.0.0.0/8), not only the address it lists.
    for (const auto& a : interfaces) {
      if (a.loopback && same_subnet(a.address, what, a.prefix)) {
        return {a.interface, what, a.prefix, 0};
      }
    }
    fail(HM_ERR_INVALID_ARGUMENT, "{}: '{}' is not an address of this host (its interfaces: {})",
         label, printable(what), interface_names(interfaces));
  }
  const InterfaceAddress* found = nullptr;
  bool exists = false;
  for (const auto& a : interfaces) {
    if (a.interface != what) continue;
    exists = true;
    if (!a.ipv6) {
      found = &a;
      break;
    }
  }
  require(exists, "{}: no network interface '{}' on this host (its interfaces: {})", label,
          printable(what), interface_names(interfaces));
  require(found != nullptr, "{}: interface '{}' has no IPv4 address", label, what);
  require(found->up, "{}: interface '{}' ({}) is down", label, what, found->address);
  return {found->interface, found->address, found->prefix, 0};
}

double parse_rate(std::string_view text, std::string_view entry, std::string_view label) {
  double gbit = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), gbit);
  require(ec == std::errc() && end == text.data() + text.size() && std::isfinite(gbit) && gbit > 0,
          "{}: '{}' has rate '{}': expected Gbit/s as a positive number (eth0@25)", label,
          printable(entry), printable(text));
  return gbit;
}

}  // namespace

std::vector<TcpNic> resolve_tcp_nics(std::string_view text, std::string_view label,
                                     const std::vector<InterfaceAddress>& interfaces,
                                     const InterfaceSpeed& speed) {
  const std::string list(trim(text));
  std::vector<TcpNic> nics;
  if (list.empty() || list == "off") return nics;
  if (list == "auto") {
    std::set<std::string> seen;
    for (const auto& a : interfaces) {
      if (a.ipv6 || a.loopback || !a.up || !seen.insert(a.interface).second) continue;
      nics.push_back({a.interface, a.address, a.prefix, 0});
    }
    require(!nics.empty(),
            "{}=auto: this host has no interface that is up with an IPv4 address "
            "other than loopback (its interfaces: {})",
            label, interface_names(interfaces));
  } else {
    std::string_view rest = list;
    while (true) {
      const auto comma = rest.find(',');
      const std::string entry(trim(rest.substr(0, comma)));
      require(!entry.empty(), "{}: '{}' has an empty entry: expected NAME_OR_IP[@GBIT],...", label,
              printable(list));
      const auto at = entry.find('@');
      TcpNic nic =
          find_nic(std::string(trim(std::string_view(entry).substr(0, at))), label, interfaces);
      if (at != std::string::npos) {
        nic.gbit = parse_rate(std::string_view(entry).substr(at + 1), entry, label);
      }
      nics.push_back(std::move(nic));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  require(static_cast<int>(nics.size()) <= kMaxNics, "{}: {} NICs, at most {} are supported", label,
          nics.size(), kMaxNics);
  for (std::size_t i = 0; i < nics.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      require(nics[i].ip != nics[j].ip, "{}: NIC {} ({}) is given twice", label, nics[i].name,
              nics[i].ip);
    }
    if (nics[i].gbit == 0 && speed) nics[i].gbit = speed(nics[i].name).value_or(0);
  }
  return nics;
}

std::vector<TcpNic> resolve_tcp_nics(std::string_view text, std::string_view label) {
  const std::string list(trim(text));
  if (list.empty() || list == "off") return {};
  std::string error;
  const auto interfaces = interface_addresses(&error);
  require(error.empty(), "{}: cannot list this host's interfaces: {}", label, error);
  return resolve_tcp_nics(list, label, interfaces,
                          [](std::string_view name) { return interface_gbit_per_s(name); });
}

std::string describe(const TcpNic& nic) {
  return fmt::format("{} {}/{} {} Gbit/s", nic.name, nic.ip, nic.prefix,
                     nic.gbit > 0 ? fmt::format("{:g}", nic.gbit) : std::string("?"));
}

}  // namespace holmes::tcp
