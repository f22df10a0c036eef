#include "transports/tcp/transport.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>

#include "core/status.hpp"

namespace holmes::tcp {

TcpTransport::TcpTransport(const TransportOptions& options)
    : config_(tcp_config(options)),
      token_(config_.token, config_.context),
      congestion_(CongestionPolicy::resolve(config_.congestion)),
      liveness_(std::max(kMinLiveness, config_.connect_timeout / 2)),
      work_(asio::make_work_guard(io_)),
      listener_(io_, config_.listen_host, "tcp") {
  listen_on_nics();
  listener_.start(
      [this](tcp::socket socket, std::string remote) {
        accepted(std::move(socket), std::move(remote), listener_nic_);
      },
      [this] { return directory_.rank(); });
  for (std::size_t i = 0; i < nic_listeners_.size(); ++i) {
    nic_listeners_[i]->start(
        [this, nic = nic_listener_nic_[i]](tcp::socket socket, std::string remote) {
          accepted(std::move(socket), std::move(remote), nic);
        },
        [this] { return directory_.rank(); });
  }
  thread_.start([this] { io_loop(); });
}

void TcpTransport::listen_on_nics() {
  const auto& nics = config_.nics;
  nic_sent_ = std::make_unique<std::atomic<std::uint64_t>[]>(nics.size());
  nic_received_ = std::make_unique<std::atomic<std::uint64_t>[]>(nics.size());
  TcpCard card;
  card.primary = TcpCard::decode(listener_.address(), "the listen address").primary;
  for (std::size_t i = 0; i < nics.size(); ++i) {
    std::uint16_t port = card.primary.port;
    if (same_subnet(nics[i].ip, card.primary.ip, 128)) {  // the same address, in any spelling
      listener_nic_ = static_cast<int>(i);
    } else {
      nic_listeners_.push_back(std::make_unique<Listener>(io_, nics[i].ip, "tcp"));
      nic_listener_nic_.push_back(static_cast<int>(i));
      port = TcpCard::decode(nic_listeners_.back()->address(), nics[i].name).primary.port;
    }
    card.nics.push_back({nics[i].ip, port, nics[i].prefix, nics[i].gbit});
  }
  card_ = card.encode();
}

std::vector<Lane> TcpTransport::lanes_to(int peer) const {
  return plan_lanes(config_.nics, TcpCard::decode(directory_.address(peer),
                                                  fmt::format("address of rank {}", peer)));
}

std::vector<NicTraffic> TcpTransport::nic_traffic() const {
  std::vector<NicTraffic> out;
  for (std::size_t i = 0; i < config_.nics.size(); ++i) {
    out.push_back({config_.nics[i], nic_sent_[i].load(), nic_received_[i].load()});
  }
  return out;
}

TcpTransport::~TcpTransport() {
  shutdown(HM_ERR_ABORTED, "the communicator was destroyed", ShutdownWait::kUntilReleased);
  engine_.detach_callers();
  work_.reset();
  io_.stop();
  thread_.join();
}

void TcpTransport::io_loop() {
  // One handler at a time, so that the thread parks promptly once a caller drives.
  constexpr auto kSlice = std::chrono::milliseconds(100);
  while (!io_.stopped()) engine_.turns().own_turn([this, kSlice] { io_.run_one_for(kSlice); });
}

void TcpTransport::driven_poll(const Completion* awaited) {
  // A message takes three handlers here (epoll, the read, its completion); once the awaited
  // request is done, the caller moves on at once rather than after one more epoll_wait.
  for (int i = 0;
       i < kHandlersPerPoll && (awaited == nullptr || !awaited->done()) && io_.poll_one() > 0;
       ++i) {
  }
}

LinkProperties TcpTransport::link(int peer) const {
  const std::string where = primary_of(directory_.address(peer));
  std::string lanes;
  if (!config_.nics.empty()) {
    try {
      for (const auto& lane : lanes_to(peer)) {
        lanes += fmt::format("{}{}", lanes.empty() ? " over " : ", ", describe(lane, config_.nics));
      }
    } catch (const Error& e) {
      lanes = fmt::format(" ({})", e.what());
    }
  }
  return {"tcp", fmt::format("tcp {} x{} sockets{}", where, config_.sockets_per_peer, lanes), 0, 0};
}

std::string TcpTransport::peer_name(int peer) const {
  return fmt::format("rank {} (tcp {})", peer, primary_of(directory_.address(peer)));
}

std::string TcpTransport::context_for(int from, int to, int index, int count) const {
  return fmt::format("data|{}|{}->{}|{}/{}", config_.context, from, to, index, count);
}

void TcpTransport::configure(tcp::socket& socket) const {
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  // Dead links: the kernel aborts a connection (ETIMEDOUT) when sent data stays unacknowledged
  // for liveness_ (TCP_USER_TIMEOUT), and probes idle ones often enough to find out as quickly
  // (keepalive; the user timeout then decides, the probe count never does). A link that goes
  // down without a word is otherwise silent for the kernel's 15 minutes of retries.
  const int fd = socket.native_handle();
  const int on = 1;
  const auto user_timeout = static_cast<unsigned>(liveness_.count());
  const int probe_s = std::max<int>(1, static_cast<int>(liveness_.count() / 3000));
  const int probes = 1000;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &probe_s, sizeof probe_s);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &probe_s, sizeof probe_s);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
  if (config_.socket_buffer_bytes > 0) {
    socket.set_option(asio::socket_base::send_buffer_size(config_.socket_buffer_bytes), ignored);
    socket.set_option(asio::socket_base::receive_buffer_size(config_.socket_buffer_bytes), ignored);
  }
  error_code local_ec;
  error_code remote_ec;
  const auto local = socket.local_endpoint(local_ec);
  const auto remote = socket.remote_endpoint(remote_ec);
  if (!local_ec && !remote_ec) congestion_.apply(fd, local.address(), remote.address());
}

std::unique_ptr<Transport> make_tcp_transport(const TcpOptions& options) {
  return std::make_unique<TcpTransport>(options);
}

}  // namespace holmes::tcp
