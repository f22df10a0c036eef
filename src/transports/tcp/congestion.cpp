#include "transports/tcp/congestion.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/log.hpp"
#include "core/status.hpp"
#include "core/text.hpp"

namespace holmes::tcp {
namespace {

// The kernel's limit on a name (TCP_CA_NAME_MAX, 16 with its NUL).
constexpr std::size_t kMaxNameBytes = 15;
// Loss-based algorithms for connections within a host, in order of preference. The kernel
// always permits reno; cubic is its usual default where BBR is not.
constexpr std::string_view kSameHostChoices[] = {"cubic", "reno"};

bool well_formed(std::string_view name) {
  return !name.empty() && name.size() <= kMaxNameBytes &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
         });
}

// errno of setting `name` on `fd`, 0 on success.
int set_on(int fd, std::string_view name) {
  const std::string text(name);
  const int rc = ::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, text.c_str(),
                              static_cast<socklen_t>(text.size()));
  return rc == 0 ? 0 : errno;
}

// errno of setting `name` on a fresh TCP socket (0: this process may use it).
int probe(std::string_view name) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  const int error = set_on(fd, name);
  ::close(fd);
  return error;
}

std::string read_sysctl(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return "?";
  return line;
}

}  // namespace

CongestionPolicy CongestionPolicy::resolve(std::string_view request) {
  CongestionPolicy policy;
  if (request.empty() || request == "auto") {
    for (const auto name : kSameHostChoices) {
      if (probe(name) == 0) {
        policy.same_host_ = name;
        break;
      }
    }
    if (policy.same_host_.empty()) {
      HM_LOG_DEBUG("tcp: neither cubic nor reno can be set; same-host links keep the default");
    }
    return policy;
  }
  if (request == "system") return policy;
  require(well_formed(request),
          "HOLMES_TCP_CONGESTION is '{}': expected auto, system or the name of a TCP congestion "
          "control algorithm (lower-case letters, digits, '_' or '-', at most {} characters)",
          printable(request), kMaxNameBytes);
  if (const int error = probe(request); error != 0) {
    fail(HM_ERR_INVALID_ARGUMENT,
         "HOLMES_TCP_CONGESTION is '{}', which this process cannot use ({}); allowed here: {} "
         "(available to root: {})",
         request,
         error == ENOENT  ? "the kernel has no algorithm of that name"
         : error == EPERM ? "not permitted to this process"
                          : std::strerror(error),
         read_sysctl("/proc/sys/net/ipv4/tcp_allowed_congestion_control"),
         read_sysctl("/proc/sys/net/ipv4/tcp_available_congestion_control"));
  }
  policy.everywhere_ = request;
  return policy;
}

std::string_view CongestionPolicy::choose(const boost::asio::ip::address& local,
                                          const boost::asio::ip::address& remote) const {
  if (!everywhere_.empty()) return everywhere_;
  // Namespaces that emulate hosts have addresses of their own, so their links count as between
  // hosts, as they should: they carry the shaped traffic of the emulation.
  const bool same_host = remote.is_loopback() || remote == local;
  return same_host ? std::string_view(same_host_) : std::string_view();
}

void CongestionPolicy::apply(int fd, const boost::asio::ip::address& local,
                             const boost::asio::ip::address& remote) const {
  const auto name = choose(local, remote);
  if (name.empty()) return;
  if (const int error = set_on(fd, name); error != 0) {
    HM_LOG_DEBUG("tcp: cannot set congestion control {} on the link to {}: {}", name,
                 remote.to_string(), std::strerror(error));
  }
}

}  // namespace holmes::tcp
