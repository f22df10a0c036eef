// Which TCP congestion control the tcp transport sets on its connections (TCP_CONGESTION).
//
// Many images now make BBR the kernel's default (this development machine and its CI do). BBR
// paces every flow: the kernel sends each burst on a high-resolution timer at the rate it
// estimates. Between two ranks of one host (loopback) there is no bottleneck to pace for, and the
// timers cost CPU that the copies need: on this 2-core machine a 4-rank tcp allreduce of 16 MiB
// ran 20-30% faster with a loss-based algorithm on its loopback connections (BENCHMARKS.md).
// Links between hosts keep the kernel's default: there pacing can be worth its cost, and the
// administrator chose it.
//
// HOLMES_TCP_CONGESTION (TransportOptions::tcp_congestion):
//   auto (or unset)  connections within this host get cubic (reno where cubic is not permitted,
//                    nothing where neither is); others keep the kernel's default
//   system           never set: every connection keeps the kernel's default
//   <name>           every connection gets <name> (e.g. bbr, cubic, reno, dctcp); the kernel
//                    must offer it to this process (net.ipv4.tcp_allowed_congestion_control, or
//                    any available one with CAP_NET_ADMIN)
#pragma once

#include <string>
#include <string_view>

#include "core/asio.hpp"

namespace holmes::tcp {

class CongestionPolicy {
 public:
  // Checks `request` against the kernel once (on a throw-away socket). A malformed name, or one
  // the kernel refuses, throws HM_ERR_INVALID_ARGUMENT naming HOLMES_TCP_CONGESTION and listing
  // what this process may use.
  static CongestionPolicy resolve(std::string_view request);

  // The algorithm for a connection between `local` and `remote` (this host's end and the
  // peer's), or empty: leave the kernel's default.
  std::string_view choose(const boost::asio::ip::address& local,
                          const boost::asio::ip::address& remote) const;

  // Sets choose()'s algorithm on the connected socket `fd`. A refusal here (which resolve()
  // rules out) leaves the default and is logged: a slower link, not a failure.
  void apply(int fd, const boost::asio::ip::address& local,
             const boost::asio::ip::address& remote) const;

 private:
  std::string same_host_;   // for connections within this host
  std::string everywhere_;  // for every connection (a name the user forced)
};

}  // namespace holmes::tcp
