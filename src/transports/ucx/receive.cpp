#include "transports/ucx/transport.hpp"

#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes::ucx {

CompletionPtr Engine::irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                            std::span<std::byte> data) {
  directory_.require_peer(peer, "receive from");
  auto caller = std::make_shared<Completion>();
  caller->set_progress(progress_.request_progress());
  if (!post([this, peer, tag, signature, data, caller] {
        start_recv(peer, tag, signature, data, caller);
      })) {
    std::string why;
    const auto status = final_status(&why);
    caller->complete(status, why);
  }
  return caller;
}

void Engine::start_recv(int peer, std::uint64_t tag, std::uint32_t signature,
                        std::span<std::byte> data, const CompletionPtr& caller) {
  if (closed_.fail(caller)) return;
  if (!serves(peer)) {
    caller->complete(HM_ERR_INTERNAL,
                     fmt::format("ucx does not carry the traffic from rank {}", peer));
    return;
  }
  auto receive = std::make_shared<PostedReceive>();
  receive->caller = caller;
  receive->matched = std::make_shared<Completion>();
  const Completion* key = receive->matched.get();
  receives_.emplace(key, receive);
  receive->matched->on_complete([this, key](const Completion&) { matched_done(key); });
  if (matcher_.post(peer, tag, signature, data, receive->matched)) return;  // it was here
  const auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.failure.failed()) {
    matcher_.fail_posted(peer, tag, p.failure.status, p.failure.message);
  } else if (p.gone) {
    matcher_.fail_posted(
        peer, tag, HM_ERR_PEER_FAILED,
        fmt::format("{} closed its ucx endpoint before sending this message", peer_name(peer)));
  }
}

void Engine::matched_done(const Completion* matched) {
  const auto it = receives_.find(matched);
  if (it == receives_.end()) return;
  if (it->second->writers == 0) finish_receive(std::shared_ptr<PostedReceive>(it->second));
}

void Engine::finish_receive(const std::shared_ptr<PostedReceive>& receive) {
  receives_.erase(receive->matched.get());
  receive->caller->complete(receive->matched->status(), receive->matched->message());
}

ucs_status_t Engine::message_callback(void* arg, const void* header, std::size_t header_length,
                                      void* data, std::size_t length,
                                      const ucp_am_recv_param_t* param) {
  auto* engine = static_cast<Engine*>(arg);
  const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  try {
    return engine->on_message(header, header_length, data, length, rendezvous);
  } catch (const std::exception& e) {
    // Nothing may unwind through UCX. Out of memory for an unexpected message is the likely one.
    HM_LOG_ERROR("ucx rank {}: dropped an arriving message: {}", engine->directory_.rank(),
                 e.what());
    return rendezvous ? UCS_ERR_NO_MEMORY : UCS_OK;
  }
}

ucs_status_t Engine::on_message(const void* header, std::size_t header_length, void* data,
                                std::size_t length, bool rendezvous) {
  // A rendezvous message refused with an error fails the sender's send with that status; an
  // eager one is simply dropped.
  const auto refuse = [rendezvous](ucs_status_t why) { return rendezvous ? why : UCS_OK; };
  const auto h = AmHeader::decode(
      {static_cast<const std::uint8_t*>(header), header != nullptr ? header_length : 0});
  if (!h || h->cookie != cookie_) {
    if (!warned_foreign_) {
      warned_foreign_ = true;
      HM_LOG_WARN(
          "ucx rank {}: dropped a message that is not from this communicator (bad header "
          "or another job's token)",
          directory_.rank());
    }
    return refuse(UCS_ERR_REJECTED);
  }
  if (closed_.closed()) return refuse(UCS_ERR_CANCELED);
  const int peer = static_cast<int>(h->sender);
  const bool peers_known = !peers_.empty();
  if (peers_known && !serves(peer)) {
    HM_LOG_WARN(
        "ucx rank {}: dropped a message claiming to come from rank {}, not a peer served "
        "by ucx",
        directory_.rank(), peer);
    return refuse(UCS_ERR_REJECTED);
  }
  if (h->kind == AmKind::kGoodbye) {
    // At once (it makes no UCP call): what the peer refuses after it must find it gone.
    peer_said_goodbye(peer);
    return UCS_OK;
  }
  if (h->total != length || h->total > kMaxMessageBytes) {
    protocol_error(peer, fmt::format("rank {} sent a {}-byte message whose header says {} bytes",
                                     peer, length, h->total));
    return refuse(UCS_ERR_REJECTED);
  }
  if (peers_known) {
    const auto& p = peers_[static_cast<std::size_t>(peer)];
    if (p.failure.failed()) return refuse(UCS_ERR_CANCELED);
  }
  const FragmentHeader fragment{h->tag, h->signature, h->total, 0, h->total};
  if (!rendezvous) {
    if (!matcher_.deliver(peer, fragment, {static_cast<const std::byte*>(data), length})) {
      protocol_error(peer, fmt::format("rank {} sent a second message with tag {:#x} of another "
                                       "size",
                                       peer, h->tag));
    }
    return UCS_OK;
  }
  const auto landing = matcher_.land(peer, fragment);
  if (!landing) {
    protocol_error(peer, fmt::format("rank {} sent a second message with tag {:#x} of another size",
                                     peer, h->tag));
    return UCS_ERR_REJECTED;
  }
  if (landing->target == nullptr) return UCS_OK;  // a mismatch, reported to the receive: drop it
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::kReceive;
  op->peer = peer;
  op->fragment = fragment;
  op->landing = *landing;
  if (landing->request) {
    if (auto it = receives_.find(landing->request.get()); it != receives_.end()) {
      op->receive = it->second;
      ++op->receive->writers;
    }
  }
  launch(std::move(op), [this, data, length](Op& o, ucp_request_param_t& param) {
    return ucp_am_recv_data_nbx(ucp_->get(), data, o.landing.target, length, &param);
  });
  return UCS_INPROGRESS;  // UCP owns the descriptor now
}

void Engine::protocol_error(int peer, std::string message) {
  later_.push_back([this, peer, message = std::move(message)] {
    if (!closed_.closed() && serves(peer)) {
      fail_peer_now(peer, HM_ERR_TRANSPORT,
                    fmt::format("ucx: {}; this rank stops talking to it", message));
    }
  });
}

}  // namespace holmes::ucx
