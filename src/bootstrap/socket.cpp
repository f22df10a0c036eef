#include "bootstrap/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/status.hpp"

namespace holmes {
namespace {

std::string format_sockaddr(const sockaddr_storage& addr, bool with_port) {
  char host[INET6_ADDRSTRLEN] = {0};
  std::uint16_t port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
    if (with_port) return fmt::format("[{}]:{}", host, port);
  } else {
    return "?";
  }
  return with_port ? fmt::format("{}:{}", host, port) : std::string(host);
}

int poll_timeout_ms(const Deadline& deadline) {
  const auto left = deadline.remaining().count();
  // Wake at least every second so that long waits stay responsive to clock changes.
  return static_cast<int>(left > 1000 ? 1000 : left);
}

// getaddrinfo's results, freed on scope exit.
struct AddrInfo {
  addrinfo* list = nullptr;
  AddrInfo(const char* host, int socktype) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = socktype;
    if (::getaddrinfo(host, "9", &hints, &list) != 0) list = nullptr;
  }
  ~AddrInfo() {
    if (list != nullptr) ::freeaddrinfo(list);
  }
  AddrInfo(const AddrInfo&) = delete;
  AddrInfo& operator=(const AddrInfo&) = delete;
};

bool is_loopback(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr) >> 24) == 127;
  }
  return addr->sa_family == AF_INET6 &&
         IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr);
}

}  // namespace

std::optional<std::string> local_address_toward(const std::string& host) {
  const AddrInfo found(host.c_str(), SOCK_DGRAM);
  for (const addrinfo* ai = found.list; ai != nullptr; ai = ai->ai_next) {
    Socket probe(::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!probe.valid()) continue;
    // A UDP connect only chooses the route and the source address; no packet leaves.
    if (::connect(probe.fd(), ai->ai_addr, ai->ai_addrlen) != 0) continue;
    const std::string local = probe.local_address();
    if (local != "?") return local;
  }
  return std::nullopt;
}

std::optional<std::string> host_name_address() {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0) return std::nullopt;
  const AddrInfo found(name, SOCK_STREAM);
  std::optional<std::string> loopback;
  for (const addrinfo* ai = found.list; ai != nullptr; ai = ai->ai_next) {
    sockaddr_storage addr{};
    std::memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
    if (!is_loopback(ai->ai_addr)) return format_sockaddr(addr, false);
    if (!loopback) loopback = format_sockaddr(addr, false);
  }
  return loopback;
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Socket Socket::connect(const std::string& host, std::uint16_t port, const Deadline& deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) {
    fail(HM_ERR_INVALID_ARGUMENT, "cannot resolve host '{}': {}", host, gai_strerror(rc));
  }
  std::string last_error = "no address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    Socket sock(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!sock.valid()) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(sock.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (::connect(sock.fd(), ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last_error = std::strerror(errno);
      continue;
    }
    try {
      sock.wait_ready(POLLOUT, deadline, "connect");
    } catch (...) {
      ::freeaddrinfo(found);
      throw;
    }
    int error = 0;
    socklen_t length = sizeof(error);
    ::getsockopt(sock.fd(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      last_error = std::strerror(error);
      continue;
    }
    ::freeaddrinfo(found);
    return sock;
  }
  ::freeaddrinfo(found);
  fail(HM_ERR_TRANSPORT, "cannot connect to {}:{}: {}", host, port, last_error);
}

void Socket::wait_ready(short events, const Deadline& deadline, const char* what) {
  for (;;) {
    if (deadline.expired()) fail(HM_ERR_TIMEOUT, "{} on socket timed out", what);
    pollfd p{fd_, events, 0};
    const int rc = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (rc > 0) return;  // ready, or an error the next syscall will report
    if (rc < 0 && errno != EINTR) fail(HM_ERR_TRANSPORT, "poll: {}", std::strerror(errno));
  }
}

void Socket::write_all(std::span<const std::uint8_t> data, const Deadline& deadline) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_ready(POLLOUT, deadline, "write");
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      fail(HM_ERR_PEER_FAILED, "write to {}: {}", remote_endpoint(),
           n == 0 ? "connection closed" : std::strerror(errno));
    }
  }
}

void Socket::read_exact(std::span<std::uint8_t> data, const Deadline& deadline) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::recv(fd_, data.data() + done, data.size() - done, 0);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n == 0) {
      fail(HM_ERR_PEER_FAILED, "{} closed the connection", remote_endpoint());
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_ready(POLLIN, deadline, "read");
    } else if (errno != EINTR) {
      fail(HM_ERR_PEER_FAILED, "read from {}: {}", remote_endpoint(), std::strerror(errno));
    }
  }
}

std::string Socket::local_endpoint() const {
  sockaddr_storage addr{};
  socklen_t length = sizeof(addr);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &length) != 0) return "?";
  return format_sockaddr(addr, true);
}

std::string Socket::remote_endpoint() const {
  sockaddr_storage addr{};
  socklen_t length = sizeof(addr);
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &length) != 0) return "?";
  return format_sockaddr(addr, true);
}

std::string Socket::local_address() const {
  sockaddr_storage addr{};
  socklen_t length = sizeof(addr);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &length) != 0) return "?";
  return format_sockaddr(addr, false);
}

}  // namespace holmes
