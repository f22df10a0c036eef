// Where a tcp endpoint listens (its card, the text peers exchange as its address) and the lanes
// a sender opens to a peer: one lane per pair of NICs that can reach each other, each with
// `sockets_per_peer` connections, and a weight that says which share of a message it carries.
//
// The card: the listen address first, as a host with one NIC publishes it ("10.0.0.5:41000"),
// then one entry per NIC (nics.hpp), each "ip:port/prefix@gbit" after a ';' (gbit 0: unknown):
//   10.0.0.5:41000;10.0.0.5:41000/24@25;10.1.0.5:41001/24@25
// A peer that has no NIC list publishes the address alone, and is still reached.
//
// Lanes (computed by the sender alone: a receiver accepts whatever its listeners get):
//  - each of the sender's NICs pairs with a NIC of the peer's in its own subnet (a rail), the
//    least used one when several are; its connections are bound to the sender NIC's address,
//    and the kernel routes them out of that NIC since the peer's address is on its network;
//  - a NIC with no such peer NIC is not used for this peer (a host with one NIC on one of two
//    rails is reached over that rail only); when no pair shares a subnet at all (routed
//    networks), or the sender has no NIC list, there is one lane to the peer's listen address,
//    unbound, as with one NIC;
//  - a lane's weight is its rate: the lower of its two NICs' (one side's when the other's is
//    unknown); lanes of unknown rate get the mean of the known ones, or 1 when none is known.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "transports/tcp/nics.hpp"

namespace holmes::tcp {

struct TcpEndpoint {
  std::string ip;
  std::uint16_t port = 0;
  int prefix = 0;   // 0: unknown
  double gbit = 0;  // 0: unknown

  std::string host_port() const;  // "ip:port", "[v6]:port"
};

struct TcpCard {
  TcpEndpoint primary;            // the listen address
  std::vector<TcpEndpoint> nics;  // empty: no NIC list

  std::string encode() const;
  // Throws HM_ERR_INVALID_ARGUMENT naming `what` ("address of rank 3") and the bad entry.
  static TcpCard decode(const std::string& text, const std::string& what);
};

// The listen address part of a card ("ip:port"): what messages name a peer by.
std::string primary_of(const std::string& card_text);

struct Lane {
  int nic = -1;          // index of the sender's NIC; -1: unbound (the kernel picks)
  std::string local_ip;  // the address its connections are bound to ("" when unbound)
  TcpEndpoint remote;    // the peer's listener it dials
  double weight = 1;     // > 0: its share of every message is weight / sum of weights
};

// The lanes from a sender with `mine` (its resolved NIC list, with ports unused) to `peer`.
// Never empty.
std::vector<Lane> plan_lanes(const std::vector<TcpNic>& mine, const TcpCard& peer);

// "eth0 -> 10.1.0.6:41001 (weight 25)"; `mine`: the sender's NICs.
std::string describe(const Lane& lane, const std::vector<TcpNic>& mine);

}  // namespace holmes::tcp
