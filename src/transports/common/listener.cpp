#include "transports/common/listener.hpp"

#include <chrono>

#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {
// How long a failed accept waits before the next.
constexpr std::chrono::milliseconds kAcceptBackoff{100};
}  // namespace

Listener::Listener(asio::io_context& io, const std::string& host, const char* transport)
    : transport_(transport), acceptor_(io), backoff_(io) {
  error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) fail(HM_ERR_INVALID_ARGUMENT, "{}: '{}' is not an IP address", transport_, host);
  const tcp::endpoint endpoint(address, 0);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail(HM_ERR_TRANSPORT, "{}: cannot listen on {}: {}", transport_, host, ec.message());
  const auto bound = acceptor_.local_endpoint();
  address_ = address.is_v6() ? fmt::format("[{}]:{}", address.to_string(), bound.port())
                             : fmt::format("{}:{}", address.to_string(), bound.port());
}

void Listener::start(OnAccept on_accept, std::function<int()> rank) {
  on_accept_ = std::move(on_accept);
  rank_ = std::move(rank);
  accept_next();
}

void Listener::close() {
  closed_ = true;
  error_code ignored;
  acceptor_.close(ignored);
  backoff_.cancel();
}

void Listener::accept_next() {
  acceptor_.async_accept([this](const error_code& ec, tcp::socket socket) {
    if (closed_ || ec == asio::error::operation_aborted) return;
    if (ec) {
      HM_LOG_WARN("{} rank {}: accept failed: {}; retrying in {} ms", transport_, rank_(),
                  ec.message(), kAcceptBackoff.count());
      backoff_.expires_after(kAcceptBackoff);
      backoff_.async_wait([this](const error_code& wait_ec) {
        if (!wait_ec && !closed_) accept_next();
      });
      return;
    }
    error_code remote_ec;
    const auto remote = socket.remote_endpoint(remote_ec);
    std::string where = remote_ec
                            ? std::string("?")
                            : fmt::format("{}:{}", remote.address().to_string(), remote.port());
    on_accept_(std::move(socket), std::move(where));
    accept_next();
  });
}

}  // namespace holmes
