#include "transports/tcp/transport.hpp"

#include "core/bytes.hpp"
#include "core/log.hpp"
#include "core/parse.hpp"
#include "core/status.hpp"

namespace holmes::tcp {

void TcpTransport::set_peers(int rank, std::vector<std::string> addresses) {
  directory_.set(rank, addresses);
  hand_to_io([this, addresses = std::move(addresses)] {
    peers_.resize(addresses.size());
    for (std::size_t i = 0; i < addresses.size(); ++i) peers_[i].address = addresses[i];
    // Connections that arrived before we knew our peers can be checked now.
    auto waiting = std::move(early_hellos_);
    early_hellos_.clear();
    for (auto& link : waiting) {
      if (!link->closed) check_hello(link);
    }
  });
}

CompletionPtr TcpTransport::connect_all() {
  auto done = std::make_shared<Completion>();
  hand_to_io([this, done] {
    if (closed_.fail(done)) return;
    connect_waiters_.add(done);
    for (std::size_t peer = 0; peer < peers_.size(); ++peer) {
      if (static_cast<int>(peer) != directory_.rank() && !peers_[peer].address.empty() &&
          !peers_[peer].connecting) {
        connect_peer(static_cast<int>(peer));
      }
    }
    check_connected();
  });
  return done;
}

void TcpTransport::check_connected() {
  connect_waiters_.settle(
      static_cast<int>(peers_.size()),
      [this](int peer) {
        const auto& p = peers_[static_cast<std::size_t>(peer)];
        if (peer == directory_.rank() || p.address.empty()) {
          return ConnectWaiters::Peer::kNotServed;
        }
        return p.connected() ? ConnectWaiters::Peer::kConnected : ConnectWaiters::Peer::kConnecting;
      },
      [this](int peer) -> const PeerFailure& {
        return peers_[static_cast<std::size_t>(peer)].failure;
      });
}

void TcpTransport::connect_peer(int peer) {
  auto& p = peers_[peer];
  p.connecting = true;
  std::vector<Lane> lanes;
  try {
    lanes = lanes_to(peer);
  } catch (const Error& e) {
    fail_peer_now(peer, HM_ERR_INVALID_ARGUMENT, e.what());
    return;
  }
  p.striped = lanes.size() > 1;
  const int sockets = config_.sockets_per_peer;
  const int count = static_cast<int>(lanes.size()) * sockets;
  for (const Lane& lane : lanes) {
    error_code ec;
    const auto address = asio::ip::make_address(lane.remote.ip, ec);
    if (ec) {
      fail_peer_now(
          peer, HM_ERR_INVALID_ARGUMENT,
          fmt::format("rank {} published '{}', which is not an IP address", peer, lane.remote.ip));
      return;
    }
    const tcp::endpoint endpoint(address, lane.remote.port);
    for (int s = 0; s < sockets; ++s) {
      const int index = static_cast<int>(p.out.size());
      auto link = std::make_shared<OutLink>(io_);
      link->nic = lane.nic;
      link->weight = lane.weight / sockets;
      p.out.push_back(link);
      if (lane.nic >= 0) {
        // Leaves through the lane's NIC: bound to its address before it connects.
        const tcp::endpoint local(asio::ip::make_address(lane.local_ip), 0);
        link->socket.open(local.protocol(), ec);
        if (!ec) link->socket.bind(local, ec);
        if (ec) {
          fail_peer_now(
              peer, HM_ERR_TRANSPORT,
              fmt::format("cannot bind a connection to {} to NIC {} ({}): {}", peer_name(peer),
                          config_.nics[lane.nic].name, lane.local_ip, ec.message()));
          return;
        }
      }
      link->timer.expires_after(config_.connect_timeout);
      link->timer.async_wait([this, peer, link](const error_code& ec) {
        if (ec || closed_.closed() || link->ready) return;
        fail_peer_now(peer, HM_ERR_TIMEOUT,
                      fmt::format("could not connect to {} within {} ms", peer_name(peer),
                                  config_.connect_timeout.count()));
      });
      link->socket.async_connect(
          endpoint, [this, peer, index, count, link, endpoint](const error_code& ec) {
            if (closed_.closed() || peers_[peer].failure.failed()) return;
            if (ec) {
              fail_peer_now(peer, HM_ERR_PEER_FAILED,
                            fmt::format("cannot connect to {} at {}: {}", peer_name(peer),
                                        endpoint.address().to_string(), ec.message()));
              return;
            }
            configure(link->socket);
            client_handshake(peer, index, count, link);
          });
    }
  }
}

void TcpTransport::client_handshake(int peer, int index, int count,
                                    const std::shared_ptr<OutLink>& link) {
  asio::async_read(
      link->socket, asio::buffer(link->challenge),
      [this, peer, index, count, link](const error_code& ec, std::size_t) {
        if (closed_.closed() || peers_[peer].failure.failed()) return;
        auth::Proof proof;
        if (ec || !link->answer.answer(link->challenge, token_,
                                       context_for(directory_.rank(), peer, index, count), proof)) {
          fail_peer_now(peer, ec ? HM_ERR_PEER_FAILED : HM_ERR_AUTH,
                        fmt::format("{} did not answer as a Holmes endpoint{}", peer_name(peer),
                                    ec ? ": " + ec.message() : std::string()));
          return;
        }
        ByteWriter hello;
        hello.put_bytes(proof.encode());
        hello.put<std::uint32_t>(static_cast<std::uint32_t>(directory_.rank()));
        hello.put<std::uint32_t>(static_cast<std::uint32_t>(index));
        hello.put<std::uint32_t>(static_cast<std::uint32_t>(count));
        link->hello = std::move(hello.bytes());
        asio::async_write(
            link->socket, asio::buffer(link->hello),
            [this, peer, index, count, link](const error_code& ec, std::size_t) {
              if (closed_.closed() || peers_[peer].failure.failed()) return;
              if (ec) {
                fail_peer_now(
                    peer, HM_ERR_PEER_FAILED,
                    fmt::format("handshake with {} failed: {}", peer_name(peer), ec.message()));
                return;
              }
              asio::async_read(
                  link->socket, asio::buffer(link->verdict),
                  [this, peer, index, count, link](const error_code& ec, std::size_t) {
                    if (closed_.closed() || peers_[peer].failure.failed()) return;
                    const auto verdict = auth::Verdict::decode(link->verdict);
                    if (ec || !verdict.accepted) {
                      fail_peer_now(
                          peer, HM_ERR_AUTH,
                          fmt::format("{} refused this rank's job token (HOLMES_TOKEN differs, "
                                      "or another communicator listens there)",
                                      peer_name(peer)));
                      return;
                    }
                    if (!link->answer.trusts(verdict, token_,
                                             context_for(directory_.rank(), peer, index, count))) {
                      fail_peer_now(
                          peer, HM_ERR_AUTH,
                          fmt::format("{} could not prove the job token", peer_name(peer)));
                      return;
                    }
                    link_ready(peer, link);
                  });
            });
      });
}

void TcpTransport::link_ready(int peer, const std::shared_ptr<OutLink>& link) {
  link->ready = true;
  link->timer.cancel();
  watch_out_link(peer, link);
  auto& p = peers_[peer];
  ++p.out_ready;
  if (!p.connected()) return;
  auto backlog = std::move(p.backlog);
  p.backlog.clear();
  for (auto& f : backlog) enqueue(peer, std::move(f));
  check_connected();
}

// A send-only link whose writes are all done has no operation that could see it break: this
// read (the peer never sends on it) is that operation. A dead path ends it with ETIMEDOUT or
// unreachable; the peer closing ends it with EOF or a reset, which its links to this rank
// report already (as a process that exited).
void TcpTransport::watch_out_link(int peer, const std::shared_ptr<OutLink>& link) {
  link->socket.async_read_some(
      asio::buffer(link->probe), [this, peer, link](const error_code& ec, std::size_t bytes) {
        if (closed_.closed() || peers_[peer].failure.failed()) return;
        if (!ec && bytes > 0) {
          fail_peer_now(peer, HM_ERR_TRANSPORT,
                        fmt::format("{} sent bytes on a link that only carries this rank's "
                                    "messages; connection dropped",
                                    peer_name(peer)));
          return;
        }
        if (!ec || ec == asio::error::operation_aborted || ec == asio::error::eof ||
            ec == asio::error::connection_reset || ec == asio::error::broken_pipe) {
          return;
        }
        fail_peer_now(peer, HM_ERR_PEER_FAILED,
                      link_down(peer, ec).value_or(fmt::format("the connection to {} broke: {}",
                                                               peer_name(peer), ec.message())));
      });
}

void TcpTransport::accepted(tcp::socket socket, std::string remote, int nic) {
  configure(socket);
  auto link = std::make_shared<InLink>(io_, std::move(socket));
  link->nic = nic;
  link->remote = std::move(remote);
  in_links_.insert(link);
  server_handshake(link);
}

void TcpTransport::server_handshake(const std::shared_ptr<InLink>& link) {
  link->timer.expires_after(config_.connect_timeout);
  link->timer.async_wait([this, link](const error_code& ec) {
    if (!ec && !closed_.closed() && link->peer < 0)
      refuse(link, "no proof of the job token in time");
  });
  link->challenge = link->token_challenge.encode();
  asio::async_write(link->socket, asio::buffer(link->challenge),
                    [this, link](const error_code& ec, std::size_t) {
                      if (closed_.closed() || link->closed) return;
                      if (ec) return refuse(link, "closed during the handshake");
                      asio::async_read(link->socket, asio::buffer(link->hello),
                                       [this, link](const error_code& ec, std::size_t) {
                                         if (closed_.closed() || link->closed) return;
                                         if (ec) return refuse(link, "closed before its proof");
                                         if (peers_.empty()) {
                                           early_hellos_.push_back(link);
                                         } else {
                                           check_hello(link);
                                         }
                                       });
                    });
}

void TcpTransport::check_hello(const std::shared_ptr<InLink>& link) {
  const auto proof = auth::Proof::decode(std::span<const std::uint8_t, auth::Proof::kWireBytes>(
      link->hello.data(), auth::Proof::kWireBytes));
  const std::uint8_t* identity = link->hello.data() + auth::Proof::kWireBytes;
  const auto rank = load_le<std::uint32_t>(identity);
  const auto index = load_le<std::uint32_t>(identity + 4);
  const auto count = load_le<std::uint32_t>(identity + 8);
  auth::Verdict verdict;
  std::string why;
  if (rank >= peers_.size() || rank == static_cast<std::uint32_t>(directory_.rank())) {
    why = fmt::format("claims to be rank {}, not a peer of rank {} of {}", rank, directory_.rank(),
                      peers_.size());
  } else if (count == 0 || count > kMaxLinksPerPeer || index >= count) {
    why = fmt::format("claims link {} of {}", index, count);
  } else {
    const auto context = context_for(static_cast<int>(rank), directory_.rank(),
                                     static_cast<int>(index), static_cast<int>(count));
    verdict = link->token_challenge.judge(token_, proof, context);
    if (!verdict.accepted) why = "wrong job token (or another communicator)";
  }
  link->verdict = verdict.encode();
  asio::async_write(link->socket, asio::buffer(link->verdict),
                    [this, link, accepted = verdict.accepted, why, rank, count](
                        const error_code& ec, std::size_t) {
                      if (closed_.closed() || link->closed) return;
                      if (!accepted) return refuse(link, why);
                      if (ec) return refuse(link, "closed during the handshake");
                      link->timer.cancel();
                      link->peer = static_cast<int>(rank);
                      auto& p = peers_[link->peer];
                      p.in_expected = static_cast<int>(count);
                      read_frames(link);
                    });
}

void TcpTransport::refuse(const std::shared_ptr<InLink>& link, const std::string& why) {
  if (link->closed) return;
  HM_LOG_WARN("tcp rank {}: refused connection from {}: {}", directory_.rank(), link->remote, why);
  link->closed = true;
  error_code ignored;
  link->timer.cancel();
  link->socket.close(ignored);
  in_links_.erase(link);
}

}  // namespace holmes::tcp
