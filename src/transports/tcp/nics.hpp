// The NICs a tcp endpoint stripes its links over (HOLMES_TCP_NICS, TransportOptions::tcp_nics):
// hosts joined by several Ethernet ports (or rails) move a message over all of them at once,
// each NIC with its own listener and its own connections to every peer (lanes.hpp pairs them).
//
// The list, as the communicator hands it over (from the setting, or from this host's NICs in
// the topology file, communicator/transport_setup.cpp):
//   ""  or "off"   no list: one address (the listen address), as a host with one NIC
//   "auto"         every interface that is up, is not loopback and has an IPv4 address
//   "A[@G],B[@G]"  interfaces by name (eth0) or by one of this host's IP addresses, each
//                  optionally with its rate in Gbit/s (eth0@25); unset rates come from the
//                  interface's reported speed (/sys/class/net/<if>/speed) when it has one
// A name gives the interface's first IPv4 address. An address must be one of this host's, or
// one of a loopback interface's network (127.0.0.2: loopback takes its whole /8, which is how
// tests give one machine two "NICs" without root).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/net_interfaces.hpp"

namespace holmes::tcp {

// At most this many NICs per endpoint.
constexpr int kMaxNics = 8;

struct TcpNic {
  std::string name;  // the interface ("eth0", "lo")
  std::string ip;    // the address its listener and its connections use
  int prefix = 0;    // netmask bits of that address on the interface
  double gbit = 0;   // rate in Gbit/s; 0: unknown
};

// An interface's speed in Gbit/s, or nullopt when it reports none.
using InterfaceSpeed = std::function<std::optional<double>(std::string_view interface)>;

// The NICs `text` names (grammar above), resolved against `interfaces` (this host's:
// interface_addresses()). Throws HM_ERR_INVALID_ARGUMENT naming `label` (the setting,
// "HOLMES_TCP_NICS") and what was wrong: a malformed entry or rate, an interface that does not
// exist (listing those that do), one that is down or has no IPv4 address, an address that is
// not this host's, a NIC given twice, more than kMaxNics.
std::vector<TcpNic> resolve_tcp_nics(std::string_view text, std::string_view label,
                                     const std::vector<InterfaceAddress>& interfaces,
                                     const InterfaceSpeed& speed);

// The same against this host's interfaces and their sysfs speeds.
std::vector<TcpNic> resolve_tcp_nics(std::string_view text, std::string_view label);

// "eth0 10.0.0.5/24 25 Gbit/s" (rate "?" when unknown).
std::string describe(const TcpNic& nic);

}  // namespace holmes::tcp
