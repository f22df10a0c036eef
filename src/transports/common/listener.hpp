// The TCP port a transport's peers dial (tcp's data connections, the verbs queue pair
// handshakes): bound at once to an ephemeral port of the endpoint's IP, and accepting on the
// transport's io_context until it closes.
#pragma once

#include "core/asio.hpp"

#include <functional>
#include <string>

namespace holmes {

class Listener {
 public:
  // Each accepted connection, with the peer's "ip:port" ("?" when the kernel cannot say).
  using OnAccept = std::function<void(boost::asio::ip::tcp::socket socket, std::string remote)>;

  // Listens on `host` (an IP address). `transport` names it in errors and logs ("tcp").
  // Throws HM_ERR_INVALID_ARGUMENT when `host` is not an IP address, HM_ERR_TRANSPORT when it
  // cannot listen there.
  Listener(boost::asio::io_context& io, const std::string& host, const char* transport);

  // "ip:port" or "[ip]:port": what peers dial.
  const std::string& address() const { return address_; }

  // Accepts connections until close(), handing each to `on_accept` on the io_context's thread.
  // A failed accept (out of file descriptors, say) is retried after a pause instead of spinning
  // on the error; `rank` names this endpoint in the log line.
  void start(OnAccept on_accept, std::function<int()> rank);
  // Stops accepting; call on the io_context's thread. Later calls do nothing.
  void close();

 private:
  void accept_next();

  const char* transport_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer backoff_;
  std::string address_;
  OnAccept on_accept_;
  std::function<int()> rank_;
  bool closed_ = false;
};

}  // namespace holmes
