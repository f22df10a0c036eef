#include "transports/verbs/transport.hpp"

#include <cctype>

#include "core/parse.hpp"
#include "core/status.hpp"
#include "transports/verbs/handshake.hpp"
#include "transports/verbs/qp_info.hpp"

namespace holmes::verbs {
namespace {

// Text from a peer, made safe for logs and error messages.
std::string printable(std::span<const std::uint8_t> bytes) {
  std::string text(bytes.begin(), bytes.end());
  for (char& c : text) {
    if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
  }
  return text;
}

}  // namespace

void VerbsTransport::set_peers(int rank, std::vector<std::string> addresses) {
  directory_.check(rank, addresses.size());
  {
    std::lock_guard lock(devices_mutex_);
    remote_devices_.assign(addresses.size(), std::string());
  }
  directory_.set(rank, addresses);
  asio::post(io_, [this, addresses = std::move(addresses)] {
    peers_.resize(addresses.size());
    for (std::size_t i = 0; i < addresses.size(); ++i) peers_[i].address = addresses[i];
    auto waiting = std::move(early_hellos_);
    early_hellos_.clear();
    for (auto& a : waiting) {
      if (!a->finished) check_hello(a);
    }
  });
}

CompletionPtr VerbsTransport::connect_all() {
  auto done = std::make_shared<Completion>();
  asio::post(io_, [this, done] {
    if (closed_.fail(done)) return;
    connect_waiters_.add(done);
    for (std::size_t i = 0; i < peers_.size(); ++i) {
      const int peer = static_cast<int>(i);
      auto& p = peers_[i];
      if (peer != directory_.rank() && !p.address.empty() && !p.out && !p.failure.failed()) {
        dial(peer);
      }
    }
    check_connected();
  });
  return done;
}

void VerbsTransport::check_connected() {
  connect_waiters_.settle(
      static_cast<int>(peers_.size()),
      [this](int peer) {
        const auto& p = peers_[static_cast<std::size_t>(peer)];
        if (peer == directory_.rank() || p.address.empty()) {
          return ConnectWaiters::Peer::kNotServed;
        }
        return p.out && p.out->ready ? ConnectWaiters::Peer::kConnected
                                     : ConnectWaiters::Peer::kConnecting;
      },
      [this](int peer) -> const PeerFailure& {
        return peers_[static_cast<std::size_t>(peer)].failure;
      });
}

void VerbsTransport::dial(int peer) {
  auto& p = peers_[peer];
  HostPort where;
  try {
    where = parse_host_port(p.address, fmt::format("verbs address of rank {}", peer));
  } catch (const Error& e) {
    fail_peer_now(peer, HM_ERR_INVALID_ARGUMENT, e.what());
    return;
  }
  error_code ec;
  const auto address = asio::ip::make_address(where.host, ec);
  if (ec) {
    fail_peer_now(
        peer, HM_ERR_INVALID_ARGUMENT,
        fmt::format("rank {} published verbs address '{}', which is not ip:port", peer, p.address));
    return;
  }
  try {
    p.out = make_connection(peer, Direction::kOutbound);
    by_id_[p.out->id] = p.out.get();
  } catch (const Error& e) {
    fail_peer_now(peer,
                  e.status() == HM_ERR_OUT_OF_MEMORY ? HM_ERR_OUT_OF_MEMORY : HM_ERR_TRANSPORT,
                  fmt::format("cannot set up a queue pair to {} on {}: {}", peer_name(peer),
                              nic_->port().name, e.what()));
    return;
  }
  auto d = std::make_shared<Dial>(io_);
  d->peer = peer;
  dials_.insert(d);
  d->timer.expires_after(options_.connect_timeout);
  d->timer.async_wait([this, d](const error_code& ec) {
    if (ec || d->finished) return;
    dial_failed(d, HM_ERR_TIMEOUT,
                fmt::format("could not set up the verbs queue pair to {} within {} ms",
                            peer_name(d->peer), options_.connect_timeout.count()));
  });
  d->socket.async_connect(tcp::endpoint(address, where.port), [this, d](const error_code& ec) {
    if (!dial_alive(d)) return;
    if (ec) {
      dial_failed(d, HM_ERR_PEER_FAILED,
                  fmt::format("cannot connect to {}: {}", peer_name(d->peer), ec.message()));
      return;
    }
    error_code ignored;
    d->socket.set_option(tcp::no_delay(true), ignored);
    asio::async_read(
        d->socket, asio::buffer(d->challenge), [this, d](const error_code& ec, std::size_t) {
          if (!dial_alive(d)) return;
          if (ec) {
            dial_failed(
                d, HM_ERR_PEER_FAILED,
                fmt::format("{} closed the handshake: {}", peer_name(d->peer), ec.message()));
            return;
          }
          on_challenge(d);
        });
  });
}

bool VerbsTransport::dial_alive(const std::shared_ptr<Dial>& d) {
  if (d->finished) return false;
  if (closed_.closed() || peers_[d->peer].failure.failed()) {
    end_dial(d);
    return false;
  }
  return true;
}

void VerbsTransport::end_dial(const std::shared_ptr<Dial>& d) {
  if (d->finished) return;
  d->finished = true;
  error_code ignored;
  d->timer.cancel();
  d->socket.close(ignored);
  dials_.erase(d);
}

void VerbsTransport::dial_failed(const std::shared_ptr<Dial>& d, hm_status_t status,
                                 const std::string& message) {
  end_dial(d);
  fail_peer_now(d->peer, status, message);
}

void VerbsTransport::on_challenge(const std::shared_ptr<Dial>& d) {
  auth::Proof proof;
  if (!d->answer.answer(d->challenge, token_,
                        handshake_context(options_.context, directory_.rank(), d->peer), proof)) {
    dial_failed(d, HM_ERR_AUTH,
                fmt::format("{} did not answer as a Holmes endpoint", peer_name(d->peer)));
    return;
  }
  const auto info = local_info(*peers_[d->peer].out).encode();
  d->hello = encode_hello(proof, static_cast<std::uint32_t>(directory_.rank()), info);
  asio::async_write(
      d->socket, asio::buffer(d->hello), [this, d](const error_code& ec, std::size_t) {
        if (!dial_alive(d)) return;
        if (ec) {
          dial_failed(
              d, HM_ERR_PEER_FAILED,
              fmt::format("handshake with {} failed: {}", peer_name(d->peer), ec.message()));
          return;
        }
        asio::async_read(
            d->socket, asio::buffer(d->reply), [this, d](const error_code& ec, std::size_t) {
              if (!dial_alive(d)) return;
              if (ec) {
                // A refusal closes the socket right after the verdict.
                const auto verdict =
                    auth::Verdict::decode(std::span<const std::uint8_t, auth::Verdict::kWireBytes>(
                        d->reply.data(), auth::Verdict::kWireBytes));
                dial_failed(d, HM_ERR_AUTH,
                            fmt::format("{} {}", peer_name(d->peer),
                                        verdict.accepted
                                            ? "closed the handshake before its reply"
                                            : "refused this rank's job token (HOLMES_TOKEN "
                                              "differs, or another communicator listens there)"));
                return;
              }
              on_verdict(d);
            });
      });
}

void VerbsTransport::on_verdict(const std::shared_ptr<Dial>& d) {
  const auto verdict =
      auth::Verdict::decode(std::span<const std::uint8_t, auth::Verdict::kWireBytes>(
          d->reply.data(), auth::Verdict::kWireBytes));
  if (!d->answer.trusts(verdict, token_,
                        handshake_context(options_.context, directory_.rank(), d->peer))) {
    dial_failed(d, HM_ERR_AUTH,
                fmt::format("{} could not prove the job token", peer_name(d->peer)));
    return;
  }
  ReplyPrefix prefix;
  try {
    prefix = decode_reply_prefix(std::span<const std::uint8_t, kReplyPrefixBytes>(
        d->reply.data() + auth::Verdict::kWireBytes, kReplyPrefixBytes));
  } catch (const Error& e) {
    dial_failed(d, HM_ERR_TRANSPORT, fmt::format("{} sent {}", peer_name(d->peer), e.what()));
    return;
  }
  d->payload.resize(prefix.length);
  if (prefix.length == 0) {
    on_reply(d, prefix.status);
    return;
  }
  asio::async_read(
      d->socket, asio::buffer(d->payload),
      [this, d, status = prefix.status](const error_code& ec, std::size_t) {
        if (!dial_alive(d)) return;
        if (ec) {
          dial_failed(d, HM_ERR_PEER_FAILED,
                      fmt::format("{} closed the handshake: {}", peer_name(d->peer), ec.message()));
          return;
        }
        on_reply(d, status);
      });
}

void VerbsTransport::on_reply(const std::shared_ptr<Dial>& d, hm_status_t status) {
  const int peer = d->peer;
  if (status != HM_SUCCESS) {
    dial_failed(d, status,
                fmt::format("{} could not set up its end of the queue pair: {}", peer_name(peer),
                            printable(d->payload)));
    return;
  }
  Connection& c = *peers_[peer].out;
  QpInfo remote;
  try {
    remote = QpInfo::decode(d->payload);
  } catch (const Error& e) {
    dial_failed(d, HM_ERR_TRANSPORT, fmt::format("{} sent a {}", peer_name(peer), e.what()));
    return;
  }
  if (const auto why = incompatibility(local_info(c), remote); !why.empty()) {
    dial_failed(d, HM_ERR_UNSUPPORTED,
                fmt::format("cannot form a queue pair with {}: {}", peer_name(peer), why));
    return;
  }
  try {
    finish_connection(c, remote);
  } catch (const Error& e) {
    dial_failed(d, HM_ERR_TRANSPORT,
                fmt::format("cannot connect the queue pair to {} on {}: {}", peer_name(peer),
                            nic_->port().name, e.what()));
    return;
  }
  end_dial(d);
  pump(peer);
  check_connected();
}

}  // namespace holmes::verbs
