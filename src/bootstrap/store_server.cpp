#include "bootstrap/store_server.hpp"

#include "core/asio.hpp"

#include <atomic>
#include <map>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bootstrap/auth.hpp"
#include "bootstrap/store_protocol.hpp"
#include "core/bytes.hpp"
#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes {

namespace asio = boost::asio;
using asio::ip::tcp;

class StoreSession;

class StoreServer::Impl {
 public:
  explicit Impl(StoreServerOptions options);
  ~Impl();

  void accept_next();
  // Called on the io thread by sessions.
  store::Response execute(const store::Request& request, const std::shared_ptr<StoreSession>& s);
  void wake_waiters(const std::string& key);

  asio::io_context io;
  StoreServerOptions options;
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_backoff{io};
  std::uint16_t port = 0;
  std::atomic<std::uint64_t> refused{0};
  std::atomic<std::uint64_t> accepted{0};
  std::map<std::string, std::vector<std::uint8_t>, std::less<>> data;
  std::unordered_map<std::string, std::vector<std::weak_ptr<StoreSession>>> waiters;
  std::thread thread;
};

// One client connection: handshake, then a request/response loop. A GET on a missing key parks
// the session (it reads nothing more) until the key is set or its timeout passes.
class StoreSession : public std::enable_shared_from_this<StoreSession> {
 public:
  StoreSession(StoreServer::Impl& server, tcp::socket socket)
      : server_(server), socket_(std::move(socket)), timer_(server.io) {
    boost::system::error_code ec;
    const auto remote = socket_.remote_endpoint(ec);
    peer_ =
        ec ? std::string("?") : fmt::format("{}:{}", remote.address().to_string(), remote.port());
  }

  void start() {
    auto self = shared_from_this();
    timer_.expires_after(server_.options.handshake_timeout);
    timer_.async_wait([self](const boost::system::error_code& ec) {
      if (!ec && !self->authenticated_) {
        self->refuse("no proof of the job token within the handshake timeout");
      }
    });
    challenge_.channel = auth::Channel::kStore;
    challenge_.server_nonce = auth::random_nonce();
    challenge_bytes_ = challenge_.encode();
    asio::async_write(socket_, asio::buffer(challenge_bytes_),
                      [self](const boost::system::error_code& ec, std::size_t) {
                        if (ec) return self->close();
                        self->read_proof();
                      });
  }

  // Answer a parked GET (from SET/ADD of its key or from its timer).
  void finish_wait(store::Response response) {
    waiting_key_.reset();
    timer_.cancel();
    boost::system::error_code ignored;
    socket_.cancel(ignored);  // the readability watch of park(); nothing else is pending
    if (closed_) return;
    send(std::move(response));
  }
  bool waiting_for(const std::string& key) const { return waiting_key_ && *waiting_key_ == key; }

  void park(const std::string& key, std::uint32_t timeout_ms) {
    waiting_key_ = key;
    timer_.expires_after(std::chrono::milliseconds(timeout_ms));
    auto self = shared_from_this();
    timer_.async_wait([self, key](const boost::system::error_code& ec) {
      if (!ec && self->waiting_for(key)) self->finish_wait({store::Reply::kTimeout, {}});
    });
    // A parked client sends nothing until answered: if its socket becomes readable it has gone
    // away (or broken the protocol), and the session is dropped now rather than at the timeout.
    socket_.async_wait(tcp::socket::wait_read, [self, key](const boost::system::error_code& ec) {
      if (ec || !self->waiting_for(key)) return;  // answered (the wait was cancelled)
      self->waiting_key_.reset();
      self->close();
    });
  }

 private:
  void read_proof() {
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(proof_bytes_),
                     [self](const boost::system::error_code& ec, std::size_t) {
                       if (ec) return self->refuse("closed before proving the job token");
                       self->check_proof();
                     });
  }

  void check_proof() {
    const auto proof = auth::Proof::decode(proof_bytes_);
    const auto expected =
        auth::compute_mac(server_.options.token, auth::Role::kClient, auth::Channel::kStore,
                          challenge_.server_nonce, proof.client_nonce, "store");
    auth::Verdict verdict;
    verdict.accepted = auth::macs_equal(expected, proof.mac);
    if (verdict.accepted) {
      verdict.mac =
          auth::compute_mac(server_.options.token, auth::Role::kServer, auth::Channel::kStore,
                            challenge_.server_nonce, proof.client_nonce, "store");
    }
    verdict_bytes_ = verdict.encode();
    auto self = shared_from_this();
    asio::async_write(
        socket_, asio::buffer(verdict_bytes_),
        [self, ok = verdict.accepted](const boost::system::error_code& ec, std::size_t) {
          if (!ok) return self->refuse("wrong job token");
          if (ec) return self->close();
          self->authenticated_ = true;
          self->timer_.cancel();
          self->server_.accepted.fetch_add(1);
          self->read_frame();
        });
  }

  void read_frame() {
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(length_bytes_),
                     [self](const boost::system::error_code& ec, std::size_t) {
                       if (ec) return self->close();  // the client went away: normal
                       const auto length = load_le<std::uint32_t>(self->length_bytes_.data());
                       if (length == 0 || length > store::kMaxFrameBytes) {
                         HM_LOG_WARN("store: dropping {}: frame of {} bytes is out of bounds",
                                     self->peer_, length);
                         return self->close();
                       }
                       self->body_.resize(length);
                       self->read_body();
                     });
  }

  void read_body() {
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(body_),
                     [self](const boost::system::error_code& ec, std::size_t) {
                       if (ec) return self->close();
                       auto request = store::decode_request(self->body_);
                       self->body_.clear();
                       self->body_.shrink_to_fit();
                       if (!request) {
                         HM_LOG_WARN("store: dropping {}: malformed request", self->peer_);
                         self->bad_request_ = true;
                         return self->send({store::Reply::kBadRequest, {}});
                       }
                       auto response = self->server_.execute(*request, self);
                       if (!self->waiting_key_) self->send(std::move(response));
                     });
  }

  void send(store::Response response) {
    out_ = store::encode_response(response);
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(out_),
                      [self](const boost::system::error_code& ec, std::size_t) {
                        if (ec || self->bad_request_) return self->close();
                        self->read_frame();
                      });
  }

  void refuse(const char* why) {
    if (closed_) return;
    server_.refused.fetch_add(1);
    HM_LOG_WARN("store: refused connection from {}: {}", peer_, why);
    close();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ignored;
    timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  StoreServer::Impl& server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  std::string peer_;
  auth::Challenge challenge_;
  std::array<std::uint8_t, auth::Challenge::kWireBytes> challenge_bytes_{};
  std::array<std::uint8_t, auth::Proof::kWireBytes> proof_bytes_{};
  std::array<std::uint8_t, auth::Verdict::kWireBytes> verdict_bytes_{};
  std::array<std::uint8_t, 4> length_bytes_{};
  std::vector<std::uint8_t> body_;
  std::vector<std::uint8_t> out_;
  std::optional<std::string> waiting_key_;
  bool authenticated_ = false;
  bool bad_request_ = false;
  bool closed_ = false;
};

StoreServer::Impl::Impl(StoreServerOptions opts) : options(std::move(opts)) {
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(options.host, ec);
  if (ec) {
    fail(HM_ERR_INVALID_ARGUMENT, "store: '{}' is not an IP address to listen on", options.host);
  }
  const tcp::endpoint endpoint(address, options.port);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    fail(HM_ERR_TRANSPORT, "store: cannot listen on {}:{}: {}", options.host, options.port,
         ec.message());
  }
  port = acceptor.local_endpoint().port();
  accept_next();
  thread = std::thread([this] { io.run(); });
}

StoreServer::Impl::~Impl() {
  io.stop();
  if (thread.joinable()) thread.join();
  boost::system::error_code ignored;
  acceptor.close(ignored);
}

void StoreServer::Impl::accept_next() {
  acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of file descriptors or similar: log, wait a little, and try again without spinning.
      HM_LOG_WARN("store: accept failed: {}; retrying in 100 ms", ec.message());
      accept_backoff.expires_after(std::chrono::milliseconds(100));
      accept_backoff.async_wait([this](const boost::system::error_code& wait_ec) {
        if (!wait_ec) accept_next();
      });
      return;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    std::make_shared<StoreSession>(*this, std::move(socket))->start();
    accept_next();
  });
}

store::Response StoreServer::Impl::execute(const store::Request& request,
                                           const std::shared_ptr<StoreSession>& session) {
  using store::Reply;
  switch (request.op) {
    case store::Op::kSet:
      data.insert_or_assign(request.key, request.value);
      wake_waiters(request.key);
      return {Reply::kOk, {}};
    case store::Op::kGet: {
      const auto it = data.find(request.key);
      if (it != data.end()) return {Reply::kOk, it->second};
      if (request.timeout_ms == 0) return {Reply::kTimeout, {}};
      session->park(request.key, request.timeout_ms);
      waiters[request.key].push_back(session);
      return {};
    }
    case store::Op::kAdd: {
      std::int64_t value = 0;
      const auto it = data.find(request.key);
      if (it != data.end()) {
        // A counter is stored as decimal text; anything else counts as zero.
        const std::string text(it->second.begin(), it->second.end());
        try {
          value = std::stoll(text);
        } catch (...) {
          value = 0;
        }
      }
      value = static_cast<std::int64_t>(static_cast<std::uint64_t>(value) +
                                        static_cast<std::uint64_t>(request.delta));
      const std::string text = std::to_string(value);
      data.insert_or_assign(request.key, std::vector<std::uint8_t>(text.begin(), text.end()));
      wake_waiters(request.key);
      return {Reply::kOk, std::vector<std::uint8_t>(text.begin(), text.end())};
    }
    case store::Op::kCheck:
      return {data.count(request.key) ? Reply::kOk : Reply::kNotFound, {}};
    case store::Op::kDelete:
      return {data.erase(request.key) ? Reply::kOk : Reply::kNotFound, {}};
    case store::Op::kPing:
      return {Reply::kOk, {}};
  }
  return {Reply::kBadRequest, {}};
}

void StoreServer::Impl::wake_waiters(const std::string& key) {
  const auto it = waiters.find(key);
  if (it == waiters.end()) return;
  auto parked = std::move(it->second);
  waiters.erase(it);
  const auto& value = data.at(key);
  for (auto& weak : parked) {
    if (auto session = weak.lock(); session && session->waiting_for(key)) {
      session->finish_wait({store::Reply::kOk, value});
    }
  }
}

StoreServer::StoreServer(StoreServerOptions options)
    : impl_(std::make_shared<Impl>(std::move(options))) {}

StoreServer::~StoreServer() = default;

std::uint16_t StoreServer::port() const { return impl_->port; }
const std::string& StoreServer::host() const { return impl_->options.host; }
std::uint64_t StoreServer::refused_connections() const { return impl_->refused.load(); }
std::uint64_t StoreServer::accepted_connections() const { return impl_->accepted.load(); }

}  // namespace holmes
