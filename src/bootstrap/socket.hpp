// A blocking TCP socket whose every operation is bounded by a Deadline (poll-based, so a wait
// sleeps in the kernel instead of spinning). Used by the store client, where simplicity beats
// asynchrony; the data plane uses Boost.Asio instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "core/clock.hpp"

namespace holmes {

// The local address of the route this host would take to `host` (asks the kernel through an
// unconnected UDP socket: nothing is sent); nullopt when host does not resolve or has no route.
std::optional<std::string> local_address_toward(const std::string& host);
// An address this host's name resolves to, preferring one that is not loopback; nullopt if none.
std::optional<std::string> host_name_address();

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  // Connects to host:port (any address family getaddrinfo gives). One attempt; throws
  // HM_ERR_TRANSPORT (refused, unreachable) or HM_ERR_TIMEOUT.
  static Socket connect(const std::string& host, std::uint16_t port, const Deadline& deadline);

  // Throw HM_ERR_PEER_FAILED when the other side closes, HM_ERR_TIMEOUT at the deadline.
  void write_all(std::span<const std::uint8_t> data, const Deadline& deadline);
  void read_exact(std::span<std::uint8_t> data, const Deadline& deadline);

  // "address:port" of this end and of the other end.
  std::string local_endpoint() const;
  std::string remote_endpoint() const;
  // Just the local IP address (no port).
  std::string local_address() const;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void close();

 private:
  // Waits until fd is ready for `events` (POLLIN/POLLOUT) or the deadline passes.
  void wait_ready(short events, const Deadline& deadline, const char* what);
  int fd_ = -1;
};

}  // namespace holmes
