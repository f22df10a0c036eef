#include "transports/verbs/transport.hpp"

#include "core/log.hpp"
#include "core/status.hpp"
#include "transports/verbs/handshake.hpp"
#include "transports/verbs/qp_info.hpp"

namespace holmes::verbs {

void VerbsTransport::accepted(tcp::socket socket, std::string remote) {
  auto a = std::make_shared<Accept>(io_, std::move(socket));
  a->remote = std::move(remote);
  error_code ignored;
  a->socket.set_option(tcp::no_delay(true), ignored);
  accepts_.insert(a);
  start_accept(a);
}

void VerbsTransport::start_accept(const std::shared_ptr<Accept>& a) {
  a->timer.expires_after(options_.connect_timeout);
  a->timer.async_wait([this, a](const error_code& ec) {
    if (!ec && !a->finished) refuse(a, "no complete handshake in time");
  });
  a->challenge = a->token_challenge.encode();
  asio::async_write(
      a->socket, asio::buffer(a->challenge), [this, a](const error_code& ec, std::size_t) {
        if (a->finished) return;
        if (ec) return refuse(a, "closed during the handshake");
        asio::async_read(a->socket, asio::buffer(a->prefix),
                         [this, a](const error_code& ec, std::size_t) {
                           if (a->finished) return;
                           if (ec) return refuse(a, "closed before its proof");
                           try {
                             a->hello = decode_hello_prefix(a->prefix);
                           } catch (const Error& e) {
                             return refuse(a, e.what());
                           }
                           a->info.resize(a->hello.info_bytes);
                           asio::async_read(a->socket, asio::buffer(a->info),
                                            [this, a](const error_code& ec, std::size_t) {
                                              if (a->finished) return;
                                              if (ec)
                                                return refuse(a, "closed before its queue pair");
                                              if (peers_.empty()) {
                                                early_hellos_.push_back(a);  // checked by set_peers
                                              } else {
                                                check_hello(a);
                                              }
                                            });
                         });
      });
}

void VerbsTransport::check_hello(const std::shared_ptr<Accept>& a) {
  const std::uint32_t rank = a->hello.rank;
  if (rank >= peers_.size() || rank == static_cast<std::uint32_t>(directory_.rank())) {
    refuse(a, fmt::format("claims to be rank {}, not a peer of rank {} of {}", rank,
                          directory_.rank(), peers_.size()));
    return;
  }
  const int peer = static_cast<int>(rank);
  const auto context = handshake_context(options_.context, peer, directory_.rank());
  const auth::Verdict verdict = a->token_challenge.judge(token_, a->hello.proof, context);
  if (!verdict.accepted) {
    HM_LOG_WARN(
        "verbs rank {}: refused a handshake from {}: wrong job token (or another "
        "communicator)",
        directory_.rank(), a->remote);
    const auto rejected = verdict.encode();
    a->reply.assign(rejected.begin(), rejected.end());
    asio::async_write(a->socket, asio::buffer(a->reply),
                      [this, a](const error_code&, std::size_t) { end_accept(a); });
    return;
  }
  auto& p = peers_[peer];
  const auto answer = [&](hm_status_t status, const std::string& text) {
    send_reply(a, verdict, status, std::vector<std::uint8_t>(text.begin(), text.end()));
  };
  if (closed_.closed()) return answer(closed_.status(), closed_.why());
  if (p.in) {
    return answer(HM_ERR_TRANSPORT, fmt::format("rank {} already has a queue pair from rank {}",
                                                directory_.rank(), peer));
  }
  if (p.failure.failed()) {
    return answer(p.failure.status, fmt::format("rank {} has given up on rank {}: {}",
                                                directory_.rank(), peer, p.failure.message));
  }
  QpInfo remote;
  try {
    remote = QpInfo::decode(a->info);
  } catch (const Error& e) {
    HM_LOG_WARN("verbs rank {}: {} (rank {}) sent a {}", directory_.rank(), a->remote, peer,
                e.what());
    return answer(HM_ERR_TRANSPORT, e.what());
  }
  try {
    p.in = make_connection(peer, Direction::kInbound);
    by_id_[p.in->id] = p.in.get();
    if (const auto why = incompatibility(local_info(*p.in), remote); !why.empty()) {
      fail(HM_ERR_UNSUPPORTED, "cannot form a queue pair with {}: {}", peer_name(peer), why);
    }
    finish_connection(*p.in, remote);
  } catch (const Error& e) {
    const std::string message = e.status() == HM_ERR_UNSUPPORTED
                                    ? e.what()
                                    : fmt::format("cannot set up the queue pair from {} on {}: {}",
                                                  peer_name(peer), nic_->port().name, e.what());
    answer(e.status(), message);
    fail_peer_now(peer, e.status(), message);  // its data can never reach this rank
    return;
  }
  send_reply(a, verdict, HM_SUCCESS, local_info(*p.in).encode());
}

void VerbsTransport::send_reply(const std::shared_ptr<Accept>& a, const auth::Verdict& verdict,
                                hm_status_t status, std::vector<std::uint8_t> payload) {
  if (payload.size() > kMaxReplyTextBytes) payload.resize(kMaxReplyTextBytes);
  a->reply = encode_reply(verdict, status, payload);
  a->timer.cancel();
  asio::async_write(a->socket, asio::buffer(a->reply),
                    [this, a](const error_code&, std::size_t) { end_accept(a); });
}

void VerbsTransport::refuse(const std::shared_ptr<Accept>& a, const std::string& why) {
  if (a->finished) return;
  HM_LOG_WARN("verbs rank {}: refused a handshake from {}: {}", directory_.rank(), a->remote, why);
  end_accept(a);
}

void VerbsTransport::end_accept(const std::shared_ptr<Accept>& a) {
  if (a->finished) return;
  a->finished = true;
  error_code ignored;
  a->timer.cancel();
  a->socket.close(ignored);
  accepts_.erase(a);
}

}  // namespace holmes::verbs
