#include "transports/ucx/transport.hpp"

#include "core/status.hpp"

namespace holmes::ucx {

CompletionPtr Engine::isend(int peer, std::uint64_t tag, std::uint32_t signature,
                            std::span<const std::byte> data) {
  directory_.require_peer(peer, "send to");
  auto caller = std::make_shared<Completion>();
  caller->set_progress(progress_.request_progress());
  if (!post([this, peer, tag, signature, data, caller] {
        start_send(peer, tag, signature, data, caller);
      })) {
    std::string why;
    const auto status = final_status(&why);
    caller->complete(status, why);
  }
  return caller;
}

void Engine::start_send(int peer, std::uint64_t tag, std::uint32_t signature,
                        std::span<const std::byte> data, const CompletionPtr& caller) {
  if (closed_.fail(caller)) return;
  if (!serves(peer)) {
    caller->complete(HM_ERR_INTERNAL,
                     fmt::format("ucx does not carry the traffic to rank {}", peer));
    return;
  }
  const auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.gone && !p.failure.failed()) {
    caller->complete(HM_ERR_PEER_FAILED,
                     fmt::format("{} closed its ucx endpoint; this message cannot be delivered",
                                 peer_name(peer)));
    return;
  }
  const ucp_ep_h ep = endpoint(peer);
  if (ep == nullptr) {
    caller->complete(p.failure.status, p.failure.message);
    return;
  }
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::kSend;
  op->peer = peer;
  op->caller = caller;
  AmHeader header;
  header.cookie = cookie_;
  header.sender = static_cast<std::uint32_t>(directory_.rank());
  header.kind = AmKind::kData;
  header.tag = tag;
  header.signature = signature;
  header.total = data.size();
  op->header = header.encode();
  launch(std::move(op), [ep, data](Op& o, ucp_request_param_t& param) {
    return ucp_am_send_nbx(ep, kAmId, o.header.data(), o.header.size(), data.data(), data.size(),
                           &param);
  });
}

}  // namespace holmes::ucx
