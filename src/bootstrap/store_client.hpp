// Client of the rendezvous store (store_server.hpp). Blocking calls, each bounded by a deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bootstrap/socket.hpp"
#include "core/clock.hpp"

namespace holmes {

class StoreClient {
 public:
  // Connects to host:port and proves the token, retrying while the connection is refused (the
  // server may still be starting) until `deadline`. Throws HM_ERR_AUTH when the server refuses
  // the token or cannot prove it itself, HM_ERR_TIMEOUT when no server answered in time.
  // `io_timeout` bounds every later request that does not carry its own deadline.
  StoreClient(std::string host, std::uint16_t port, std::string token, const Deadline& deadline,
              std::chrono::milliseconds io_timeout = std::chrono::milliseconds(60000));

  void set(std::string_view key, std::span<const std::uint8_t> value);
  void set(std::string_view key, std::string_view value);
  // Waits until the key exists; HM_ERR_TIMEOUT naming the key at the deadline.
  std::vector<std::uint8_t> get(std::string_view key, const Deadline& deadline);
  std::string get_string(std::string_view key, const Deadline& deadline);
  // Adds delta to the counter at key (a missing key counts as 0); returns the new value.
  std::int64_t add(std::string_view key, std::int64_t delta);
  bool check(std::string_view key);
  bool remove(std::string_view key);
  void ping();

  // The local IP address this process uses to reach the store: a good default address for
  // peers to reach us.
  std::string local_address() const { return socket_.local_address(); }
  const std::string& endpoint() const { return endpoint_; }

 private:
  struct Reply;
  Reply call(const std::vector<std::uint8_t>& frame, const Deadline& deadline, const char* what,
             std::string_view key);
  void handshake(const Deadline& deadline);

  std::string host_;
  std::uint16_t port_;
  std::string token_;
  std::string endpoint_;
  std::chrono::milliseconds io_timeout_;
  Socket socket_;
};

}  // namespace holmes
